"""earlylog's own background threads, started with _thread rather than threading.
Importing threading costs milliseconds of every process's start-up, and importing it from a
non-main thread would make that thread threading's main_thread(); so this module never imports
it, and only reads it when the program already has."""
import sys
import _thread

_ours = {}     # ident -> name of each thread we started
_natives = {}  # ident -> kernel tid, for ours and the main thread (threading may not be there)
_main = [None]  # ident of the thread that ran boot: the main thread, or the forking one in a child
_alone = [False]  # this process must never get another thread: see forked()


def forked():
    """In a fork child, before remember_main(). A child forked by a thread other than its parent's
    main one ends when that thread returns, without exit(): a thread of ours (or faulthandler's
    timer thread) would keep it alive for ever. So would one in any child it forks in turn."""
    if _main[0] is not None and _thread.get_ident() != _main[0]:
        _alone[0] = True


def may_start():
    """False in a process that must end when its only thread returns (see forked())."""
    return not _alone[0]


def remember_main():
    """Called from boot's thread: the one whose stack matters most in every dump."""
    _main[0] = _thread.get_ident()
    _natives[_main[0]] = _thread.get_native_id()


def start(name, target, *args):
    """Start a daemon-like thread (it never keeps the interpreter alive) running target(*args);
    nothing where no thread may start (see forked())."""
    if _alone[0]:
        return

    def run():
        me = _thread.get_ident()
        _ours[me], _natives[me] = name, _thread.get_native_id()
        try:
            target(*args)
        except BaseException:  # ours: never "Exception ignored in thread" on the program's stderr
            pass
        finally:  # idents are reused: a later program thread must not inherit our name
            _ours.pop(me, None)
            _natives.pop(me, None)
    _thread.start_new_thread(run, ())


def main_ident():
    threading = sys.modules.get("threading")
    if threading is not None and _main[0] is None:
        return threading.main_thread().ident
    return _main[0]


def program_threads():
    """{ident: threading.Thread} of the program's threads, or {} when it never imported threading."""
    threading = sys.modules.get("threading")
    return {t.ident: t for t in threading.enumerate()} if threading is not None else {}


def native_ids():
    """{ident: kernel tid} for our threads and the main thread."""
    return dict(_natives)


def name_of(ident):
    """Our own thread's name, or None."""
    return _ours.get(ident)


class Wakeup:
    """A sleep that another thread or a signal handler can cut short; lock-only, no Condition."""

    def __init__(self):
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def wait(self, timeout):
        """Sleep up to timeout seconds; True if set() woke us (the wake is consumed)."""
        return self._lock.acquire(timeout=max(timeout, 0))

    def set(self):
        try:
            self._lock.release()
        except RuntimeError:  # already set and not yet consumed
            pass
