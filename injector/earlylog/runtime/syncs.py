"""The standard library's synchronisation objects as a dump sees them: which of their wait
methods a frame sits in (sync_frame: Condition, Semaphore, Event, Barrier, Thread.join,
Queue, Future), whether a Lock, RLock or Condition is held now, and which thread owns an RLock.
Read by waits.py (what a thread waits for) and holders.py (a thread inside Condition.wait() has
given its lock back): a module of its own below both, since waits.py imports holders.py. It runs
in the watchdog thread only (dumps, and runtime/stuck.py's beats). It must never import threading, queue or concurrent.futures (their classes are found in the
modules the program loaded, through runtime/introspect.py), never run the program's code (exact
types and identity only; the one repr taken is the C RLock's own), never block, never raise."""
import _thread

from earlylog.runtime import introspect, threads as our_threads

LOCK = type(our_threads.allocate_lock())  # the real one: _thread's may be monkey-patched by now
RLOCK = getattr(_thread, "RLock", None)

# The stdlib methods a waiting thread sits in: (kind, module, class, method names).
_WAITS = (("lock", "threading", "Condition", ("__enter__",)),
          ("condition", "threading", "Condition", ("wait", "wait_for")),
          ("semaphore", "threading", "Semaphore", ("acquire", "__enter__")),
          ("event", "threading", "Event", ("wait",)),
          ("barrier", "threading", "Barrier", ("wait", "_wait", "_enter")),
          ("join", "threading", "Thread", ("join", "_wait_for_tstate_lock")),
          ("queue", "queue", "Queue", ("get", "put", "join")),
          ("future", "concurrent.futures._base", "Future", ("result", "exception")))
_MODULES = {"threading.py": "threading", "queue.py": "queue", "_base.py": "concurrent.futures._base"}


def sync_frame(frame):
    """(kind, self) when frame is a stdlib synchronisation method a thread waits in, else None."""
    module = module_of(frame)
    if module is None:
        return None
    name = frame.f_code.co_name
    this = introspect.local(frame, "self")
    for kind, module_name, cls_name, methods in _WAITS:
        if module_name == module and name in methods:
            cls = introspect.stdlib(module, cls_name)
            if cls is not None and introspect.isa(this, cls):
                return kind, this
    return None


def module_of(frame):
    """`threading`, `queue` or `concurrent.futures._base` when frame runs in that loaded module."""
    path = frame.f_code.co_filename
    module = _MODULES.get(path.rpartition("/")[2])
    return module if module is not None and path == introspect.module_dict(module).get("__file__") else None


def locked(lock):
    """Is this Lock, RLock or Condition's lock held now? False when that cannot be told."""
    if is_condition(lock):
        lock = introspect.field(lock, "_lock")
    if type(lock) is LOCK:
        return lock.locked()
    return rlock_owner(lock) is not None


def rlock_owner(lock):
    """The ident of the thread owning an RLock, or None (not an RLock, or not held)."""
    if RLOCK is not None and type(lock) is RLOCK:
        text = repr(lock)  # the C type's own: `<locked _thread.RLock object owner=N count=1 at ...>`
        owner = text.partition("owner=")[2].split(" ", 1)[0]
        return int(owner) if owner.isdigit() and int(owner) else None
    py_rlock = introspect.stdlib("threading", "_PyRLock")
    if py_rlock is not None and type(lock) is py_rlock:
        owner = introspect.field(lock, "_owner")
        return owner if type(owner) is int else None
    return None


def is_condition(obj):
    cls = introspect.stdlib("threading", "Condition")
    return cls is not None and introspect.isa(obj, cls)
