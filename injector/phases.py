"""Per-thread phases: what each thread is trying to do right now (nested), for logs and dumps.
It must stay lock-free and cheap (a begin/end is a list append/pop per thread) and never raise."""
import threading
import time

# thread ident -> list of open phases, innermost last; each is [name, detail, monotonic start]
_open = {}


def begin(name, detail=""):
    """Open a phase on this thread and log `phase: begin NAME DETAIL`; returns a token for end()."""
    entry = [name, detail, time.monotonic()]
    _open.setdefault(threading.get_ident(), []).append(entry)
    _log("begin %s%s" % (name, " " + detail if detail else ""))
    return entry


def end(token, error=None):
    """Close a phase: `phase: end NAME after S s`, or `phase: error NAME after S s: ...`."""
    stack = _open.get(threading.get_ident(), [])
    if token in stack:
        stack.remove(token)
    took = time.monotonic() - token[2]
    if error is None:
        _log("end %s after %.3f s" % (token[0], took))
    else:
        _log("error %s after %.3f s: %s: %s" % (token[0], took, type(error).__name__, error))


class phase:
    """`with phase("name", "detail"):` for code that wants begin/end around a block."""

    def __init__(self, name, detail=""):
        self.name, self.detail, self.token = name, detail, None

    def __enter__(self):
        self.token = begin(self.name, self.detail)
        return self

    def __exit__(self, exc_type, exc, tb):
        end(self.token, exc)
        return False


def current():
    """{thread ident: [(name, detail, seconds open), ...]} for every thread with an open phase."""
    now = time.monotonic()
    return {tid: [(n, d, now - t) for n, d, t in list(stack)] for tid, stack in list(_open.items()) if stack}


def describe(tid):
    """`import torch > init_process_group(...) (41 s so far)` for one thread, or ''."""
    stack = current().get(tid)
    if not stack:
        return ""
    name, detail, secs = stack[-1]
    path = " > ".join(n for n, _d, _s in stack)
    return "%s%s (%.0f s so far)" % (path, (" " + detail) if detail else "", secs)


def reset_after_fork():
    """Only the forking thread survives a fork; keep its phases, drop the rest."""
    me = threading.get_ident()
    for tid in list(_open):
        if tid != me:
            del _open[tid]


def _log(text):
    from earlylog import boot
    if boot.logger is not None:
        boot.logger.event("phase", text)
