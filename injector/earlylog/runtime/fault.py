"""faulthandler, shared between the program and earlylog. A process has one fatal-signal handler,
one handler per registered signal and one timer; the program always wins each of them and sees
exactly the state it made (`is_enabled()`, `unregister()`'s answer, its own file and timer), and
earlylog aims them at its log wherever the program has not taken them, taking each back when the
program gives it back. It must never change what the program set, nor raise into the program."""
import faulthandler
import os
import sys

from earlylog.runtime import state

_REAL = {name: getattr(faulthandler, name) for name in (
    "enable", "disable", "is_enabled", "register", "unregister",
    "dump_traceback_later", "cancel_dump_traceback_later")}
_C_STACK = {"c_stack": True} if sys.version_info >= (3, 14) else {}

_fd = None          # earlylog's file for crash and SIGTERM stacks in this process, or None
_signal = None      # the signal earlylog dumps stacks at (SIGTERM), None when it must not
program_fatal = False   # the program enabled faulthandler (itself, PYTHONFAULTHANDLER, -X faulthandler)
program_signal = False  # the program registered that signal itself
program_timer = False   # the program armed or cancelled the timer: it is theirs from then on


def install():
    """Once per lineage, before earlylog enables anything: what is already enabled is the program's."""
    global program_fatal
    program_fatal = _REAL["is_enabled"]()
    for wrapper in (enable, disable, is_enabled, register, unregister, dump_traceback_later,
                    cancel_dump_traceback_later):
        wrapper.__doc__ = _REAL[wrapper.__name__].__doc__
        setattr(faulthandler, wrapper.__name__, wrapper)


def aim(fd, signum):
    """Send crash stacks, and signum's stacks (chained to its action), to fd; fd None: nowhere."""
    global _fd, _signal
    _fd, _signal = fd, signum
    _take()


def _take():
    if not program_fatal:
        if _fd is not None:
            _REAL["enable"](file=_fd, all_threads=True, **_C_STACK)
        elif _REAL["is_enabled"]():
            _REAL["disable"]()
    if _signal is not None and not program_signal:
        if _fd is not None:
            _REAL["register"](_signal, file=_fd, all_threads=True, chain=True)
        else:
            _REAL["unregister"](_signal)


def _give_back():
    """The program let go of what it had taken: crash stacks go to earlylog's log again."""
    try:
        _take()
    except Exception:  # never let an exception reach the application
        pass


def arm_timer(seconds):
    """earlylog's timer: every thread's stack into its file after `seconds`, unless the program's."""
    if not program_timer and _fd is not None:
        _REAL["dump_traceback_later"](seconds, repeat=False, file=_fd)


def cancel_timer():
    if not program_timer:
        _REAL["cancel_dump_traceback_later"]()


# What the program calls instead of faulthandler's own functions: each calls the real one first
# (so errors and return values are faulthandler's), then notes who owns what.

def enable(*args, **kwargs):
    global program_fatal
    result = _REAL["enable"](*args, **kwargs)
    program_fatal = True
    return result


def disable():
    global program_fatal
    result = _REAL["disable"]()
    program_fatal = False
    _give_back()
    return result


def is_enabled():
    return program_fatal


def register(signum, *args, **kwargs):
    global program_signal
    result = _REAL["register"](signum, *args, **kwargs)
    if signum == _signal:
        program_signal = True
    return result


def unregister(signum):
    global program_signal
    if signum == _signal and not program_signal:
        return False  # without earlylog nothing was registered for it: leave ours in place
    result = _REAL["unregister"](signum)
    if signum == _signal:
        program_signal = False
        _give_back()
    return result


def dump_traceback_later(*args, **kwargs):
    _timer_taken()
    return _REAL["dump_traceback_later"](*args, **kwargs)


def cancel_dump_traceback_later():
    _timer_taken()
    return _REAL["cancel_dump_traceback_later"]()


def _timer_taken():
    global program_timer
    if program_timer:
        return
    program_timer = True  # before the real call: the watchdog must not re-arm over the program's timer
    logger = state.logger
    if logger is not None and state.pid == os.getpid():
        logger.event("note", "the program arms faulthandler's timer itself; earlylog's GIL-held stack dumps "
                             "are off in this process", console=False)
