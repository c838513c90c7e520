"""Per-thread phases: what each thread is trying to do right now (nested), for logs and dumps.
It must stay lock-free and cheap (a begin/end is a list append/pop per thread) and never raise."""
import os
import time
from _thread import get_ident

from earlylog.grammar import records
from earlylog.runtime import state


class Open:
    """One open phase: its name and detail, monotonic start, what it waits for ("for peers"),
    and whether the reminder has spoken for it."""
    __slots__ = ("name", "detail", "started", "waiting", "reminded")

    def __init__(self, name, detail, waiting):
        self.name, self.detail, self.started, self.waiting, self.reminded = \
            name, detail, time.monotonic(), waiting, False


# thread ident -> list of Open phases, innermost last
_open = {}
# A phase that waits on other processes (peers joining a rendezvous) gets one `phase: waiting`
# line once it has been open this long (or EARLYLOG_STALL, if shorter), so a hung rank says so
# even with the watchdog off.
REMIND_AFTER = 5.0
_reminder_pid = None


def begin(name, detail="", waiting="", quiet=False):
    """Open a phase on this thread and log `phase: begin NAME DETAIL` unless quiet; returns a token.
    `waiting` ("for peers") marks a phase that waits on others: dumps and the reminder say so."""
    entry = Open(name, detail, waiting)
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
    took = time.monotonic() - token.started
    if quiet:
        return took
    if error is None:
        _log("end %s after %.3f s" % (token.name, took))
    else:
        try:
            text = str(error)
        except Exception:  # a broken __str__ must not replace the program's own exception
            text = "(its str() failed)"
        _log("error %s after %.3f s: %s: %s" % (token.name, took, type(error).__name__, text))
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
    return {tid: [(e.name, e.detail, now - e.started) for e in list(stack)]
            for tid, stack in list(_open.items()) if stack}


def describe(tid):
    """`import torch > init_process_group DETAIL, waiting for peers (41 s so far)` for a thread, or ''."""
    stack = list(_open.get(tid, ()))
    if not stack:
        return ""
    top = stack[-1]
    path = " > ".join(entry.name for entry in stack)
    return "%s%s%s (%.0f s so far)" % (path, (" " + top.detail) if top.detail else "",
                                      ", waiting " + top.waiting if top.waiting else "", time.monotonic() - top.started)


def reset_after_fork():
    """Only the forking thread survives a fork; keep its phases, drop the rest."""
    me = get_ident()
    for tid in list(_open):
        if tid != me:
            del _open[tid]


def _start_reminder():
    global _reminder_pid
    _reminder_pid = os.getpid()
    from earlylog.runtime import threads
    try:
        threads.start("earlylog-phases", _remind)
    except RuntimeError:  # "can't create new thread at interpreter shutdown": no reminder then
        pass


def _remind():
    """Say once per waiting phase that it is still waiting; stops with its process (daemon)."""
    stall = state.config.stall if state.config is not None else 0
    after = min(REMIND_AFTER, stall) if stall else REMIND_AFTER
    me = os.getpid()
    from earlylog.runtime import threads
    wake = threads.Wakeup()
    threads.on_pause(wake)
    while _reminder_pid == me:
        if threads.stopping() or wake.wait(after / 5) and threads.stopping():
            threads.parked(_remind)  # for a fork (docs/design.md#no-thread-of-ours-across-a-fork)
            return
        now = time.monotonic()
        for stack in list(_open.values()):
            for entry in list(stack):
                if entry.waiting and not entry.reminded and now - entry.started >= after:
                    entry.reminded = True
                    _log(quiet=True, text="%s%s%s: still waiting %s after %.0f s"
                         % (records.STILL_WAITING, entry.name, " " + entry.detail if entry.detail else "",
                            entry.waiting, now - entry.started))


def _log(text, quiet=False):
    """quiet: a line that is no sign of life, so the watchdog goes on measuring the silence."""
    logger = state.logger
    if logger is not None:
        before = logger.last_activity
        logger.event("phase", text)
        if quiet:
            logger.last_activity = before


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset_after_fork)
