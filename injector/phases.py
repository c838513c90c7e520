"""Per-thread phases: what each thread is trying to do right now (nested), for logs and dumps.
It must stay lock-free and cheap (a begin/end is a list append/pop per thread) and never raise."""
import os
from _thread import get_ident
import time

# thread ident -> list of open phases, innermost last; each is
# [name, detail, monotonic start, waiting-for text, reminded]
_open = {}
# A phase that waits on other processes (peers joining a rendezvous) gets one `phase: waiting`
# line once it has been open this long (or EARLYLOG_STALL, if shorter), so a hung rank says so
# even with the watchdog off.
REMIND_AFTER = 5.0
_reminder_pid = None


def begin(name, detail="", waiting="", quiet=False):
    """Open a phase on this thread and log `phase: begin NAME DETAIL` unless quiet; returns a token.
    `waiting` ("for peers") marks a phase that waits on others: dumps and the reminder say so."""
    entry = [name, detail, time.monotonic(), waiting, False]
    _open.setdefault(get_ident(), []).append(entry)
    if not quiet:
        _log("begin %s%s" % (name, " " + detail if detail else ""))
    if waiting and _reminder_pid != os.getpid():
        _start_reminder()
    return entry


def end(token, error=None, quiet=False):
    """Close a phase: `phase: end NAME after S s`, or `phase: error NAME after S s: ...`; returns S."""
    tid = get_ident()
    stack = _open.get(tid, ())
    if stack and stack[-1] is token:
        stack.pop()
    else:  # closed out of order (a generator, a callback): find this very entry
        for i, entry in enumerate(stack):
            if entry is token:
                del stack[i]
                break
    if not stack:
        _open.pop(tid, None)  # short-lived threads must not leave one empty list each behind
    took = time.monotonic() - token[2]
    if quiet:
        return took
    if error is None:
        _log("end %s after %.3f s" % (token[0], took))
    else:
        try:
            text = str(error)
        except Exception:  # a broken __str__ must not replace the program's own exception
            text = "(its str() failed)"
        _log("error %s after %.3f s: %s: %s" % (token[0], took, type(error).__name__, text))
    return took


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
    return {tid: [(e[0], e[1], now - e[2]) for e in list(stack)]
            for tid, stack in list(_open.items()) if stack}


def describe(tid):
    """`import torch > init_process_group DETAIL, waiting for peers (41 s so far)` for a thread, or ''."""
    stack = list(_open.get(tid, ()))
    if not stack:
        return ""
    _name, detail, started, waiting, _reminded = stack[-1]
    path = " > ".join(entry[0] for entry in stack)
    return "%s%s%s (%.0f s so far)" % (path, (" " + detail) if detail else "",
                                      ", waiting " + waiting if waiting else "", time.monotonic() - started)


def reset_after_fork():
    """Only the forking thread survives a fork; keep its phases, drop the rest."""
    me = get_ident()
    for tid in list(_open):
        if tid != me:
            del _open[tid]


def _start_reminder():
    global _reminder_pid
    _reminder_pid = os.getpid()
    from earlylog import threads
    try:
        threads.start("earlylog-phases", _remind)
    except RuntimeError:  # "can't create new thread at interpreter shutdown": no reminder then
        pass


def _remind():
    """Say once per waiting phase that it is still waiting; stops with its process (daemon)."""
    from earlylog import boot
    stall = boot.config.stall if boot.config is not None else 0
    after = min(REMIND_AFTER, stall) if stall else REMIND_AFTER
    me = os.getpid()
    while _reminder_pid == me:
        time.sleep(after / 5)
        now = time.monotonic()
        for stack in list(_open.values()):
            for entry in list(stack):
                if entry[3] and not entry[4] and now - entry[2] >= after:
                    entry[4] = True
                    _log(quiet=True, text="waiting %s%s: still waiting %s after %.0f s"
                         % (entry[0], " " + entry[1] if entry[1] else "", entry[3], now - entry[2]))


def _log(text, quiet=False):
    """quiet: a line that is no sign of life, so the watchdog goes on measuring the silence."""
    from earlylog import boot
    logger = boot.logger
    if logger is not None:
        before = logger.last_activity
        logger.event("phase", text)
        if quiet:
            logger.last_activity = before


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset_after_fork)
