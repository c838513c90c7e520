"""faulthandler, shared between the program and earlylog, and aimed at the log at start-up: crash
stacks, SIGTERM's stacks and the GIL-free timer, the watchdog's C half. A process has one
fatal-signal handler, one handler per registered signal and one timer; the program always wins
each of them and sees exactly the state it made (`is_enabled()`, `unregister()`'s answer, its own
file and timer), and earlylog aims them at its log wherever the program has not taken them,
taking each back when the program gives it back. It must never change what the program set, nor
raise into the program."""
import _thread
import faulthandler
import os
import sys

from earlylog.grammar import records
from earlylog.runtime import state, threads

_REAL = {name: getattr(faulthandler, name) for name in (
    "enable", "disable", "is_enabled", "register", "unregister",
    "dump_traceback_later", "cancel_dump_traceback_later")}
_C_STACK = {"c_stack": True} if sys.version_info >= (3, 14) else {}

_fd = None          # earlylog's file for crash and SIGTERM stacks in this process, or None
_signal = None      # the signal earlylog dumps stacks at (SIGTERM), None when it must not
program_fatal = False   # the program enabled faulthandler (itself, PYTHONFAULTHANDLER, -X faulthandler)
program_signal = False  # the program registered that signal itself
program_timer = False   # the program armed or cancelled the timer: it is theirs from then on
_timer_on = False       # earlylog's timer is armed: faulthandler runs a thread for it


BEAT_MAX = 5.0  # the watchdog thread wakes at least this often (idle cost: one wake per beat)
# `earlylog dump` asks for a dump by creating this file (% pid) in the process's log folder; the
# watchdog looks for it at every beat. A file, not a signal: SIGUSR1 stays the program's (its
# default action kills, and a program that checks getsignal() must see what it set).
REQUEST = ".dump-%d"

_armed = None  # this process's Armed; a fork child builds its own in start()


def start(logger):
    """Arm faulthandler (fatal signals, SIGTERM, the GIL-free timer) at start-up, from the main
    thread; returns the Armed that the watchdog thread keeps up (boot starts that thread)."""
    global _armed
    if not state.installed:
        install()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
    threads.remember_main()
    armed = _armed = Armed(logger)
    armed.arm()
    return armed


def stuck_at():
    """{(file, line)} of each thread's innermost frame at this process's last stall dump, or an
    empty set: at the end, hooks.after_main looks for a SystemExit raised at one of them (a
    framework's stop request that ended a call that never returned)."""
    watchdog = getattr(_armed, "watchdog", None)
    return getattr(watchdog, "stuck_at", None) or set()


def _before_fork():
    # faulthandler's timer hangs the child forever if it is armed at fork time (see
    # docs/design.md#faulthandlers-timer-and-fork): cancel it here, re-arm in the parent below and in the child's own start().
    armed = _armed
    if armed is None or armed.pid != os.getpid():
        return
    try:
        armed.forking = True
        # Counted before the timer is cancelled: its thread is one of ours until then.
        others = threads.other_threads(1 if _timer_on else 0)
        pause = threads.WARNS_ON_FORK and others is not None and others <= 0 and not threads.forking_to_exec()
        if armed.timeout:
            cancel_timer()
        _warn_fork(armed, others or 0)
        if pause:
            threads.pause_for_fork()
    except BaseException:  # never let an exception reach the application's fork()
        pass


def _warn_fork(armed, running):
    """In the parent, before fork(): name the other threads (a lock one holds stays held), and
    count those with no Python stack (`running` counts all): a native pool's (OpenMP's, a BLAS's)
    locks and state are copied too, its threads are not. Here, not in the watchdog's module: that
    loads a moment into the process, and a fork may come first."""
    # Under gevent's patching threading knows this thread by its greenlet's id: the patched
    # get_ident's, not the OS thread's.
    me = (threads.get_ident(), _thread.get_ident())
    others = sorted(t.name for ident, t in threads.program_threads().items() if ident not in me)
    native = max(0, running - len(others))
    if not others and not native or (tuple(others), native) in armed.warned_forks:
        return
    armed.warned_forks.add((tuple(others), native))
    armed.logger.event("fork", records.fork_threads(others, native))


def _after_fork_in_parent():
    armed = _armed
    if armed is None or armed.pid != os.getpid():
        return
    armed.forking = False
    try:
        threads.resume_after_fork(armed.rearm_timer, sys._getframe(1))
    except BaseException:
        pass


class Armed:
    """What faulthandler is aimed at in one process (the fd its stacks go to, the signal, the timer's
    seconds) and the watchdog's beat; set at start-up, kept up by the watchdog thread."""

    def __init__(self, logger):
        self.logger = logger
        self.pid = os.getpid()
        stall = logger.config.stall
        self.beat = min(max(stall / 2, 0.25), BEAT_MAX) if stall else BEAT_MAX
        # A child forked by a thread other than main ends when that thread returns (no exit()
        # runs): a thread of ours, or faulthandler's timer thread, would keep it alive for ever.
        self.threaded = threads.may_start()
        # The GIL-free timer fires only when the watchdog thread missed its turn for a whole
        # stall: the main thread holds the GIL in C code, so Python cannot look (docs/design.md#gil-free-timer).
        self.timeout = stall + self.beat if stall and self.threaded else 0
        self.fd = self._dump_fd()
        self.log_fd = logger.fd
        self.signum = None
        # The request file of `earlylog dump`, absolute now: the program may change its cwd later.
        self.request = os.path.join(os.path.abspath(os.path.dirname(logger.path)), REQUEST % self.pid) \
            if logger.path and self.threaded else None
        self.forking = False
        self.watchdog = None  # the watchdog thread's Watchdog, once it runs
        self.warned_forks = set()  # the sets of thread names a fork was told about (_warn_fork)

    def _dump_fd(self):
        """The log file; without one, the console's own (non-blocking) fd; None if neither."""
        if self.logger.fd is not None:
            return self.logger.fd
        console = self.logger.console
        return console.fd if console.kind in ("pipe", "tty", "file") else None

    def arm(self):
        # _signal, not signal: the same functions without signal.py's enum wrappers, which cost
        # over 1 ms of every process's start-up (docs/design.md#_signal-not-signal).
        import _signal as signal
        # A C-level SIGTERM handler dumps even while C code holds the GIL, then chains to the
        # previous handler (SIG_DFL: exit status -15 at once, as without earlylog).
        self.signum = signal.SIGTERM if signal.getsignal(signal.SIGTERM) != signal.SIG_IGN else None
        aim(self.fd, self.signum)
        logger = self.logger
        if self.fd is None:
            logger.event("WARNING", "no log file and the console is a socket or off: fatal-signal, "
                                    "SIGTERM and GIL-held stack dumps are off in this process")
        elif program_fatal:
            # PYTHONFAULTHANDLER / -X faulthandler: the program chose where crash stacks go.
            logger.event("note", "the program enabled faulthandler itself: fatal-signal stacks "
                                 "go where it sends them (usually stderr), not here", console=False)
        self.rearm_timer()  # at start, from the main thread (docs/design.md#gil-free-timer)
        stall = logger.config.stall
        stalls = records.stacks_after(stall)
        if not self.threaded:
            what = "stall and on-demand dumps are off in this process: it was forked by a thread other than " \
                   "main and ends when that thread returns, which a thread of earlylog's would prevent"
        elif self.request is None:
            what = "%s; no on-demand dumps without a log file" % stalls
        else:
            what = "%s; `earlylog dump %d` writes them now" % (stalls, self.pid)
        logger.event("note", "watchdog: %s; fatal signals and SIGTERM write every thread's stack here "
                     "(a bare \"Current thread 0x...\" block with no \"Fatal Python error\" or "
                     "\"Timeout\" line above it is the stack at SIGTERM)" % what, console=False)

    def rearm_timer(self):
        if self.timeout and self.fd is not None and not self.forking:
            arm_timer(self.timeout)

    def check_file(self):
        """At each beat: once the logger has lost its file (the program closed our fd), its number
        may be a file of the program's now, so faulthandler must stop writing there."""
        if self.fd is not None and self.fd == self.log_fd and self.logger.fd is None:
            self.fd = None
            if self.timeout:
                cancel_timer()
                self.timeout = 0
            aim(None, self.signum)


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
    global _timer_on
    if not program_timer and _fd is not None:
        # Each call starts faulthandler's timer thread anew: it must not take the program's signals.
        threads.signals_blocked(_REAL["dump_traceback_later"], seconds, repeat=False, file=_fd)
        _timer_on = True


def cancel_timer():
    global _timer_on
    if not program_timer:
        _REAL["cancel_dump_traceback_later"]()
        _timer_on = False


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
    global program_timer, _timer_on
    if program_timer:
        return
    program_timer = True  # before the real call: the watchdog must not re-arm over the program's timer
    _timer_on = False  # faulthandler's timer thread is the program's from now on
    logger = state.logger
    if logger is not None and state.pid == os.getpid():
        logger.event("note", "the program arms faulthandler's timer itself; earlylog's GIL-held stack dumps "
                             "are off in this process", console=False)
