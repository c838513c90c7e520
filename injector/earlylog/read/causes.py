"""A cause: the judged report's evidence turned into one sentence that says what is wrong, shows
the evidence (thread, frame, pid) and gives the next step. Thread-level causes (locks, joins,
exits, dead threads, the GIL, crashes) live in thread_causes.py, process-level ones (children,
pipes, stdin, sockets, pools) in process_causes.py; verdict.py gathers and orders them."""


class Cause:
    """One cause: `kind` (a short word such as "deadlock"), `text` (what is wrong, with its
    evidence), `next` (the step a user can take), and the pids and thread names involved."""
    __slots__ = ("kind", "text", "next", "pids", "threads")

    def __init__(self, kind, text, next_step, pids=(), threads=()):
        self.kind, self.text, self.next = kind, text, next_step
        self.pids, self.threads = list(pids), list(threads)

    def as_dict(self):
        return {"kind": self.kind, "text": self.text, "next": self.next, "pids": self.pids,
                "threads": self.threads}
