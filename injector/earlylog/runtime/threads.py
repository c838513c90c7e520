"""earlylog's own background threads, started with _thread rather than threading.
Importing threading costs milliseconds of every process's start-up, and importing it from a
non-main thread would make that thread threading's main_thread(); so this module never imports
it, and only reads it when the program already has."""
import os
import sys
import time
import _thread as _patchable


# _thread's functions as they were when earlylog started, before the program's own code ran:
# gevent's and eventlet's monkey-patching replace them with greenlet versions, under which our
# threads would be greenlets and our locks would switch to a hub (docs/design.md#under-monkey-patching).
get_ident = _patchable.get_ident  # the OS thread's ident, as sys._current_frames() keys it
allocate_lock = _patchable.allocate_lock
start_new_thread = _patchable.start_new_thread
get_native_id = _patchable.get_native_id
sleep = time.sleep                 # a real sleep of this OS thread, even once time.sleep is patched

_ours = {}     # ident -> name of each thread we started
_natives = {}  # ident -> kernel tid, for ours and the main thread (threading may not be there)
_main = [None]  # ident of the thread that ran boot: the main thread, or the forking one in a child
_alone = [False]  # this process must never get another thread: see forked()
_gate = [allocate_lock()]  # held by a thread of ours while it imports: see gated()
_before_imports = []  # [the call gated() runs first], until it ran
_fork_holder = [None]  # ident of the forking thread that took the gate in _hold_fork
FORK_WAIT = 1.0   # the longest os.fork() waits for an import of ours to finish
# Python 3.12+ warns in os.fork() when the process has more than one OS thread (counted by the
# kernel), so our threads end before a fork and start again after it (see pause_for_fork).
WARNS_ON_FORK = sys.version_info >= (3, 12)
_starting = [0]   # threads of ours started but not yet in _ours
_pausing = [False]  # a fork waits for our threads to end: see pause_for_fork()
_wakes = {}       # ident -> Wakeup of each thread of ours that ends for a fork (see on_pause)
_resume = []      # (name, target, args) of the threads that ended for the fork in progress
_park_lock = [allocate_lock()]  # parked() against resume_after_fork(); never held across a call


def gated(call, *args):
    """call(*args), which imports modules, with os.fork() held off until it returns. A fork child
    inherits a module another thread was importing half done, its lock held by a thread that does
    not exist there, and hangs the first time it imports that module: so a fork waits for this
    (docs/design.md#imports-in-background-threads). Keep call short: every fork may wait for it.
    The first call in a process first runs what before_imports() was given."""
    with _gate[0]:
        if _before_imports:
            try:
                _before_imports.pop()()
            except Exception:  # ours: the import goes on as it would without it
                pass
        return call(*args)


def before_imports(call):
    """call() runs once, before the first import of ours in this process (the first gated() call):
    boot gives imports.own_threads, which makes those imports read their files high. Not at a
    thread's start: a process that ends in its first 0.1 s never pays for it."""
    _before_imports[:] = [call]


def read(path, limit=1 << 20, keep=False):
    """The first `limit` bytes of a file, or None when it cannot be read: for our threads, through a
    bare descriptor at a high number (fds.read; keep: a file read again and again stays open). A
    Python file object holds a lock while it reads; finalization kills a daemon thread when it next
    takes the GIL, and one killed mid-read leaves that lock held, so freeing the object at the
    interpreter's end aborts the process. A descriptor at the lowest free number may be the one a
    program just freed and closes again (docs/design.md#our-fds-sit-high). Our modules call fds
    directly; fds is imported here on first use, never at start-up."""
    from earlylog.runtime import fds
    return fds.read(path, limit, keep)


def quiesce():
    """At exit, before the interpreter finalizes: wait (FORK_WAIT at most) for an import of ours to
    finish, and keep any other from starting. Finalization kills a daemon thread when it next takes
    the GIL; one killed inside an import (reading a module's file) leaves that file's lock held,
    and freeing what it left aborts or corrupts the process as it ends. The gate stays held."""
    _gate[0].acquire(timeout=FORK_WAIT)


def _hold_fork():
    # Two threads may fork at once, and one may give up waiting while the other holds the gate: the
    # holder's ident, not a flag, says who releases it.
    if _gate[0].acquire(timeout=FORK_WAIT):
        _fork_holder[0] = get_ident()


def _release_in_parent():
    if _fork_holder[0] == get_ident():
        _fork_holder[0] = None
        _gate[0].release()


def _fresh_in_child():
    _fork_holder[0] = None
    _pausing[0] = False
    _starting[0] = 0
    del _resume[:]  # the parent starts them again; the child starts its own watchdog
    _wakes.clear()
    _park_lock[0] = allocate_lock()
    _gate[0] = allocate_lock()  # the child has none of our threads to hold it
    # Nor their names and kernel ids: a thread the child starts may get one of their idents.
    _ours.clear()
    _natives.clear()


# At import, so once per lineage: fork children inherit the registration with the module.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_hold_fork, after_in_parent=_release_in_parent, after_in_child=_fresh_in_child)


def forked():
    """In a fork child, before remember_main(). A child forked by a thread other than its parent's
    main one ends when that thread returns, without exit(): a thread of ours (or faulthandler's
    timer thread) would keep it alive for ever. So would one in any child it forks in turn."""
    if _main[0] is not None and get_ident() != _main[0]:
        _alone[0] = True


def may_start():
    """False in a process that must end when its only thread returns (see forked())."""
    return not _alone[0]


def remember_main():
    """Called from boot's thread: the one whose stack matters most in every dump."""
    _main[0] = get_ident()
    _natives[_main[0]] = get_native_id()


def signals_blocked(call, *args, **kwargs):
    """call(*args) with every signal blocked in this thread, so that a thread it creates (ours, or
    faulthandler's timer) starts with all of them blocked: the kernel then hands a signal sent to
    the process to one of the program's threads only. A signal the program blocks to collect it
    with sigwait() would otherwise be delivered to our thread, and kill the process."""
    import _signal
    try:
        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask here: nothing to keep apart
        return call(*args, **kwargs)
    try:
        return call(*args, **kwargs)
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def start(name, target, *args):
    """Start a daemon-like thread (it never keeps the interpreter alive) running target(*args);
    nothing where no thread may start (see forked())."""
    if _alone[0]:
        return

    def run():
        me = get_ident()
        _ours[me], _natives[me] = name, get_native_id()
        _starting[0] -= 1
        try:
            target(*args)
        except BaseException:  # ours: never "Exception ignored in thread" on the program's stderr
            pass
        finally:  # idents are reused: a later program thread must not inherit our name
            _wakes.pop(me, None)
            _ours.pop(me, None)
            _natives.pop(me, None)
    _starting[0] += 1
    try:
        signals_blocked(start_new_thread, run, ())
    except BaseException:
        _starting[0] -= 1
        raise


def on_pause(wake):
    """A long-lived thread of ours hands over the Wakeup it sleeps on: a coming fork sets it. The
    thread then checks stopping() before each sleep, and once it is True hands its continuation to
    parked() and returns (docs/design.md#no-thread-of-ours-across-a-fork)."""
    _wakes[get_ident()] = wake


def wait_until(due, target, *args):
    """Sleep until `due` (monotonic) in a thread of ours; True to go on, False when a fork ended
    the wait: target(*args) then runs again after the fork (see parked()), and the caller returns."""
    wake = Wakeup()
    on_pause(wake)
    if not stopping():
        wake.wait(due - time.monotonic())
    if stopping():
        parked(target, *args)
        return False
    return True


def stopping():
    """True while a fork waits for our threads to end."""
    return _pausing[0]


def parked(target, *args):
    """From a thread of ours that ends for a fork: target(*args) runs in a new thread of ours once
    the fork is done, in the parent (the child starts its own threads)."""
    name = _ours.get(get_ident(), "earlylog")
    with _park_lock[0]:
        if _pausing[0]:
            _resume.append((name, target, args))
            return
    start(name, target, *args)  # the fork was over before this thread got here


def alone_but_ours(extra):
    """True when no thread but the calling one and ours (plus `extra` of earlylog's: faulthandler's
    timer) is in the kernel's count, /proc/self/stat's, which is what os.fork() counts: only then
    would our threads alone make it warn."""
    others = other_threads(extra)
    return others is not None and others <= 0


def other_threads(extra):
    """How many threads the kernel counts (/proc/self/stat) beside the calling one and ours (plus
    `extra` of earlylog's: faulthandler's timer), Python's and native ones alike; None if unknown."""
    data = read("/proc/self/stat", 4096)
    if not data:
        return None
    try:
        count = int(data[data.rindex(b")") + 2:].split()[17])  # num_threads, the 20th field
    except (ValueError, IndexError):
        return None
    return count - 1 - len(_ours) - _starting[0] - extra


def pause_for_fork():
    """Before os.fork() on Python 3.12+, in a process whose only other threads are ours: ask each to
    end, and wait (FORK_WAIT at most) until the kernel counts one thread, so that the fork warns
    exactly as it would without earlylog. resume_after_fork() starts them again in the parent."""
    import time
    _pausing[0] = True
    for wake in list(_wakes.values()):
        wake.set()
    deadline = time.monotonic() + FORK_WAIT
    while (_ours or _starting[0]) and time.monotonic() < deadline:
        sleep(0.0001)  # the real one: a patched time.sleep would switch greenlets inside fork()
    # A thread that returned is still in the kernel's count for a few microseconds; a count that
    # stays above one for long is a thread we did not know of (a timer that fired): no use waiting.
    deadline = min(deadline, time.monotonic() + 0.1)
    while not alone_but_ours(0) and time.monotonic() < deadline:
        sleep(0.0002)


def resume_after_fork(restart, caller):
    """In the parent after fork(): restart() (faulthandler's timer) and start again the threads
    that ended for it, once os.fork() has counted the threads: 3.13 counts them after the at-fork
    hooks, so this waits for the program's first instruction after the fork (see _after_return)."""
    if not _pausing[0]:
        restart()
        return

    def again():
        with _park_lock[0]:
            _pausing[0] = False
            waiting = list(_resume)
            del _resume[:]
        restart()
        for name, target, args in waiting:
            start(name, target, *args)
    if not _after_return(again, caller):
        again()


def _after_return(call, frame):
    """Run call() once, at the next instruction, return or yield of frame or one of its two callers
    (what runs once os.fork() has returned), through sys.monitoring events on those code objects
    alone, removed at the first; False where that cannot be (before 3.12, no free tool id)."""
    monitoring = getattr(sys, "monitoring", None)
    tool = next((t for t in (4, 3) if monitoring.get_tool(t) is None), None) if monitoring else None
    if tool is None or frame is None:
        return False
    events = monitoring.events
    kinds = (events.INSTRUCTION, events.PY_RETURN, events.PY_YIELD)
    codes = []
    while frame is not None and len(codes) < 3:
        codes.append(frame.f_code)
        frame = frame.f_back
    done = []

    def once(*_args):
        if done:
            return
        done.append(True)
        for code in codes:
            monitoring.set_local_events(tool, code, 0)
        for kind in kinds:
            monitoring.register_callback(tool, kind, None)
        monitoring.free_tool_id(tool)
        try:
            call()
        except BaseException:  # never let an exception reach the application
            pass
    monitoring.use_tool_id(tool, "earlylog")
    for kind in kinds:
        monitoring.register_callback(tool, kind, once)
    for code in codes:
        monitoring.set_local_events(tool, code, kinds[0] | kinds[1] | kinds[2])
    return True


def forking_to_exec():
    """True in a fork hook of subprocess with preexec_fn: it forks in Python and execs at once, so
    that child is the program it is about to exec (which starts earlylog itself), and no fork
    warning comes of it."""
    frame = sys._getframe(1)
    for _depth in range(10):
        if frame is None:
            return False
        if frame.f_code.co_name == "_execute_child" and frame.f_code.co_filename.endswith("subprocess.py"):
            return True
        frame = frame.f_back
    return False


# Modules whose presence means the process may run other interpreters (3.12+ gives each its own
# memory allocator): their APIs, and the C-API test helpers that make one (run_in_subinterp).
_INTERPRETER_MODULES = ("_interpreters", "_xxsubinterpreters", "_testcapi", "_testinternalcapi")


def current_frames():
    """sys._current_frames(), or {} while the process runs another interpreter. CPython walks every
    interpreter's threads there and makes frame objects for theirs, which their interpreter later
    frees with its own allocator: heap corruption, a crash (`munmap_chunk(): invalid pointer`) in a
    program that uses subinterpreters (CPython's test_sys aborted so). Our looks skip such moments."""
    return {} if _other_interpreters() else sys._current_frames()


def current_exceptions():
    """sys._current_exceptions() (3.10+), or None where there is none or another interpreter runs
    (its exceptions are its own objects: see current_frames())."""
    read = getattr(sys, "_current_exceptions", None)
    return None if read is None or _other_interpreters() else read()


def _other_interpreters():
    if sys.version_info < (3, 12) or not any(name in sys.modules for name in _INTERPRETER_MODULES):
        return False
    module = sys.modules.get("_interpreters") or sys.modules.get("_xxsubinterpreters")
    try:
        if module is None:
            import importlib
            module = importlib.import_module("_interpreters" if sys.version_info >= (3, 13) else "_xxsubinterpreters")
        return len(module.list_all()) > 1
    except Exception:  # none of its API here: assume another interpreter may run
        return True


def main_ident():
    threading = sys.modules.get("threading")
    if threading is not None and _main[0] is None:
        return threading.main_thread().ident
    return _main[0]


def program_threads():
    """{ident: threading.Thread} of the program's threads, or {} when it never imported threading."""
    threading = sys.modules.get("threading")
    return {t.ident: t for t in threading.enumerate()} if threading is not None else {}


def program_thread_name(ident):
    """The name of the program's thread `ident`, read from threading's table and the Thread's own
    dict (no code of threading's runs, no lock is taken); None when threading does not know it."""
    threading = sys.modules.get("threading")
    thread = vars(threading).get("_active", {}).get(ident) if threading is not None else None
    try:
        name = vars(thread).get("_name") if thread is not None else None
    except TypeError:
        name = None
    return name if type(name) is str else None


def native_ids():
    """{ident: kernel tid} for our threads and the main thread."""
    return dict(_natives)


def name_of(ident):
    """Our own thread's name, or None."""
    return _ours.get(ident)


class Wakeup:
    """A sleep that another thread or a signal handler can cut short; lock-only, no Condition."""

    def __init__(self):
        self._lock = allocate_lock()
        self._lock.acquire()

    def wait(self, timeout):
        """Sleep up to timeout seconds; True if set() woke us (the wake is consumed)."""
        return self._lock.acquire(timeout=max(timeout, 0))

    def set(self):
        try:
            self._lock.release()
        except RuntimeError:  # already set and not yet consumed
            pass
