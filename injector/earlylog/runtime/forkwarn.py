"""Python 3.12+ warns at os.fork() and os.forkpty() in a process the kernel lists with more than one
thread ("This process (pid=N) is multi-threaded, use of fork() may lead to deadlocks in the child.").
earlylog's own threads (the watchdog, faulthandler's timer) would make a one-thread program's fork
warn, which it never does without earlylog. So at each fork of a program whose only thread is the
forking one, a filter ignores that one warning (its exact text); a program with threads of its own
(Python or native) still gets it. It must never hide a warning the program would get without
earlylog, and its filter goes as soon as it has matched (or at the next fork, and in the child)."""
import os

from earlylog.runtime import fault, threads

_TEXT = "This process (pid=%d) is multi-threaded, use of %s() may lead to deadlocks in the child."


class _Once:
    """The message part of the filter: matches the warning of this fork, then takes its filter out
    (3.13 warns after the after_in_parent hooks, 3.12 before them, so no hook could). CPython's
    filter loop holds the entry while it calls match() and rereads the list's length each round."""

    def __init__(self, pid):
        self.texts = (_TEXT % (pid, "fork"), _TEXT % (pid, "forkpty"))
        self.entry = ("ignore", self, DeprecationWarning, None, 0)

    def match(self, text):
        if text not in self.texts:
            return None
        _remove()
        return True

    def __repr__(self):
        return "earlylog's filter for its own threads at fork"


_pending = []  # the entry in warnings.filters now, if any


def register():
    os.register_at_fork(before=_before, after_in_child=_remove)


def _before():
    try:
        _remove()  # one a fork left unmatched: each fork decides afresh
        if not _alone():
            return
        import _warnings  # built in: warnings.filters is this same list
        entry = _Once(os.getpid()).entry
        _warnings.filters.insert(0, entry)
        _pending.append(entry)
    except Exception:  # never let an exception reach the application's fork()
        pass


def _remove():
    try:
        import _warnings
        while _pending:
            entry = _pending.pop()
            for i, other in enumerate(_warnings.filters):
                if other is entry:
                    del _warnings.filters[i]
                    break
    except Exception:
        pass


def _alone():
    """Is the forking thread the program's only one? The kernel's count, less earlylog's own threads
    and faulthandler's timer (armed by earlylog, not by the program), is what CPython would count."""
    stat = (threads.read("/proc/self/stat") or b"").rpartition(b")")[2].split()
    if len(stat) < 18:
        return False
    main = threads.main_ident()
    ours = sum(1 for ident in threads.native_ids() if ident != main)
    armed = fault._armed
    timer = 1 if armed is not None and armed.timeout and not fault.program_timer else 0
    return int(stat[17]) - ours - timer <= 1
