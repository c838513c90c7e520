"""A cause: the judged report's evidence turned into one sentence that says what is wrong, shows
the evidence (thread, frame, pid) and gives the next step. Thread-level causes (locks, joins,
exits, dead threads, the GIL, crashes) live in thread_causes.py, asyncio's (a blocked loop, a
dead task) in async_causes.py, process-level ones (children, pipes, stdin, sockets, pools) in
process_causes.py; read/registry.py lists every kind, runs the finders and orders what they find.
Also the words every cause uses for a process and a duration."""
from earlylog.grammar import stalls
from earlylog.read import frames
from earlylog.grammar import records


class Cause:
    """One cause: `kind` (a short word such as "deadlock"), `text` (what is wrong, with its
    evidence), `next` (the step a user can take), and the pids and thread names involved."""
    __slots__ = ("kind", "text", "next", "pids", "threads")

    def __init__(self, kind, text, next_step, pids=(), threads=()):
        self.kind, self.text, self.next = kind, text, next_step
        self.pids, self.threads = list(pids), list(threads)

    def json(self):
        return {"kind": self.kind, "text": self.text, "next": self.next, "pids": self.pids,
                "threads": self.threads}


def label(d):
    """How the report names a process: `rank 3`, `rank 1 (pid 4242)` for a rank its launcher did
    not tag (mp.spawn's), or `pid 4242 (train)`; a process that retitled itself by its title (Ray's
    worker as its task: `pid 4242 (ray::hang_forever)`)."""
    if d.tag and d.tag.startswith("rank") and d.rank is not None:
        return "rank %d" % d.rank
    found = rank(d)[0]
    return "rank %d (pid %d)" % (found, d.pid) if found is not None else "pid %d (%s)" % (d.pid, d.title or d.tag)


def rank(d):
    """(rank, world size or None) of a rank of a distributed job, else (None, None): a process
    torchrun (or another launcher that sets RANK) started, tagged rankN, or one whose log shows
    init_process_group's phase (mp.spawn, a rank passed as an argument). A process that only
    inherited RANK (a DataLoader worker, a subprocess of a rank) is none."""
    if d.tag and d.tag.startswith("rank") and d.rank is not None:
        return d.rank, d.world_size
    main = d.stall.main if d.stall else None
    found = records.parse_init(main.phase if main else None)[0]
    if found:
        return found
    init = next((p for p in reversed(d.phases or ()) if p.name.startswith("init_process_group ")), None)
    return records.parse_init(init.name if init else None)[0] or (None, None)


def what(wait):
    """`lock `cache_lock``, or `an unnamed lock`: a `waits for:` note's object as a cause names it."""
    return "%s `%s`" % (wait.kind, wait.name) if wait.name != "?" else "an unnamed %s" % wait.kind


def place(frame):
    """`train.py:12`, or `an unknown place`."""
    return frames.place(frame) if frame else "an unknown place"


def secs(s):
    """A duration as the report writes it: `0.4 s`, `41 s`."""
    return "%.1f s" % s if s < 10 else "%.0f s" % s


def first_line(text):
    """An exception as one line: `Type: message`, its message's first line with words (a message
    that opens with a blank line or a rule, as torchrun's ChildFailedError does, by its next one),
    and how many lines were left out. Lines come escaped (`\\n`) as the log writes them."""
    lines = text.split("\\n")
    if len(lines) == 1:
        return text
    head, _, message = lines[0].partition(": ")
    words = [line.strip() for line in [message] + lines[1:] if any(c.isalnum() for c in line)]
    more = len(lines) - 1
    return "%s: %s (%d more line%s)" % (head, words[0] if words else "", more, "" if more == 1 else "s")


def busy(stall_text):
    """Does a `stall:` line say the process was computing (`; busy: CPU time still rising ...`)?"""
    line = stalls.parse(stall_text)
    return line is not None and line.state == stalls.BUSY
