"""What a blocked thread waits for, read from the live objects at dump time, as extra dump lines:
the lock, queue, event, barrier, future, thread or module import it waits on, named as the code
names it (`cache_lock`, `self._lock`), as `waits for:` and `joins:` lines, written through
grammar/notes.py (their grammar, and the reader's parser of them). It owns which wait a frame is
in (a stdlib wait method, found by runtime/syncs.py; a C lock's acquire() or a SimpleQueue's
get() read from the source's call, runtime/holders.py; importlib's lock for a module) and the
notes() entry point, which adds the lock's `held by:` lines (holders.py) and the signal handler
lines (`in signal handler:`, `set by:`: runtime/signals.py); and waited(), the same wait for a
stall line (runtime/stuck.py).
It runs in the watchdog thread at dump time and at runtime/stuck.py's beats only. It must never
run the program's code: objects are told apart by exact type and identity, and values read only
through runtime/introspect.py (its contract). It never blocks and never raises; what cannot be
known is left out. Its cost falls on dumps only: nothing is imported before the first one."""
import _collections
import sys

from earlylog.grammar import notes as grammar
from earlylog.runtime import holders, introspect, reach, signals, syncs

_DEQUE = _collections.deque
# (label, module, class) of the objects a wait can be on, most derived first.
_KNOWN = (("threading.BoundedSemaphore", "threading", "BoundedSemaphore"),
          ("threading.Semaphore", "threading", "Semaphore"),
          ("threading.Condition", "threading", "Condition"), ("threading.Event", "threading", "Event"),
          ("threading.Barrier", "threading", "Barrier"), ("threading.RLock", "threading", "_PyRLock"),
          ("queue.PriorityQueue", "queue", "PriorityQueue"), ("queue.LifoQueue", "queue", "LifoQueue"),
          ("queue.Queue", "queue", "Queue"), ("queue.SimpleQueue", "queue", "SimpleQueue"),
          ("concurrent.futures.Future", "concurrent.futures._base", "Future"))
# The waits whose end another thread's call brings (a put, a set(), a notify, an arrival, a
# release, a set_result()): the dump says which threads can still make it (runtime/reach.py).
_CHANGED = ("semaphore", "condition", "event", "barrier", "queue", "future")


def notes(ident, frame, frames, threads, reached=None):
    """Dump lines for thread `ident` whose innermost frame is `frame`; frames is
    sys._current_frames(), threads {ident: threading.Thread}; reached: one dump's {id of a waited
    object: who can change it}, so that its waiters share one search (runtime/reach.py)."""
    try:
        found = _waited(frame)
        if found is None:
            return []
        kind, obj, name, call = found
        if kind == "join":
            return _join_lines(obj)
        name = name if name is None or len(name) <= 80 else name[:77] + "..."
        detail = call + (_unfinished(obj) if call == "join" else "") if kind == "queue" else None
        out = [grammar.waits_for(kind, name, _label(obj), detail)]
        if kind in ("lock", "semaphore"):
            out += holders.holder_lines(ident, obj, frames, threads)
            out += [grammar.in_signal_handler(*pair) for pair in signals.interrupted_by(frame)]
        elif kind == "event":
            out += [grammar.set_by(*pair) for pair in signals.handlers(obj)]
        elif kind == "import":
            owner = introspect.field(obj, "owner")
            if type(owner) is int and owner:
                # A thread that is gone: in a child of fork(), one of the parent's, importing at the fork.
                # Its ident can be a running thread's again (a thread the child started may reuse
                # the gone thread's stack, and so its ident): that one holds the lock only while
                # it imports the module.
                if owner == ident:
                    out.append(grammar.held_by(grammar.ITSELF))
                elif _importing(frames.get(owner), introspect.field(obj, "name")):
                    who = grammar.thread(introspect.thread_name(threads.get(owner), owner), owner)
                    out.append(grammar.held_by(who))
                else:
                    out.append(grammar.held_by(grammar.gone_thread(owner)))
        if kind in _CHANGED and name is not None and not _shared(obj):
            # (one no code names, `threading.Event().wait()`, is a wait forever on purpose; one
            # shared with other processes may be changed there)
            out += reach.lines(ident, kind, obj, frames, threads, _waited, reached)
        return out
    except Exception:  # a frame or object we did not foresee: the dump goes on without these lines
        return []


# --- what one thread waits for -------------------------------------------------------------

def waited(frame):
    """(kind, name or None, method) of the wait the stack ending in frame is blocked in, or None:
    for the stall line of a thread that made no progress (runtime/stuck.py). Never raises."""
    try:
        found = _waited(frame)
    except Exception:
        return None
    return None if found is None else (found[0], found[2], found[3])


def _waited(frame):
    """(kind, object, name or None, method) of the wait this stack is blocked in, or None."""
    kind = obj = call = None
    caller = frame
    while caller is not None:
        seen = syncs.sync_frame(caller)
        if seen is None:
            break
        kind, obj = seen
        call = caller.f_code.co_name
        caller = caller.f_back
    if obj is not None:
        if kind == "lock" and not syncs.locked(obj):
            return None  # entering a free condition: it is getting it now
        return kind, obj, name_of(caller, obj), call
    module_lock = _import_lock(frame)
    if module_lock is not None:
        return module_lock
    if syncs.module_of(frame) == "threading" or frame.f_code.co_filename.endswith("/gevent/_threading.py"):
        # its own locks (a finished program waiting in _shutdown): the reader tells those; gevent's
        # copy of threading's Condition for its thread pool takes a waiter lock twice, by design
        return None
    # No stdlib frame: blocked in C, in a lock's acquire() (`with lock:` too) or SimpleQueue.get().
    waits = []
    for expr, attr, text in holders.calls_at(frame):
        found, value = introspect.resolve(expr, frame)
        if found and _c_wait(value, attr):
            waits.append(("queue" if _is_simple_queue(value) else "lock", value, text, attr))
    # `with a, b:` before 3.13 cannot tell its items apart: the ones entered first are held
    # (locked) by this very thread, so the last locked one is the one it waits for.
    return waits[-1] if waits else None


def _shared(obj):
    """Is obj multiprocessing's (its Barrier is threading's subclass over shared memory): other
    processes wait on it and change it, which no thread of this one shows."""
    for klass in introspect.mro(type(obj)):
        module = introspect.class_dict(klass).get("__module__")
        if type(module) is str and module.startswith("multiprocessing"):
            return True
    return False


def _import_lock(frame):
    """("import", lock, module name, "acquire") when frame is importlib waiting for a module's
    import lock: another thread is importing that module (imports run under a lock per module)."""
    if frame.f_code.co_name != "acquire" or frame.f_code.co_filename != "<frozen importlib._bootstrap>":
        return None
    this = introspect.local(frame, "self")
    if not _is_module_lock(this):
        return None
    name = introspect.field(this, "name")
    return "import", this, name if type(name) is str else None, "acquire"


def _importing(frame, name):
    """Is the stack ending in frame inside the import (or importlib.reload) of module `name`?"""
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>" and introspect.local(frame, "name") == name:
            return True
        frame = frame.f_back
    return False


def _is_module_lock(obj):
    """Is obj exactly importlib's lock for one module's import?"""
    bootstrap = sys.modules.get("_frozen_importlib")
    cls = vars(bootstrap).get("_ModuleLock") if bootstrap is not None else None
    return cls is not None and type(obj) is cls


def _c_wait(value, attr):
    """True for a call that blocks in C: entering or acquiring a Lock/RLock someone holds, or
    reading a SimpleQueue."""
    if _is_simple_queue(value):
        return attr == "get"
    return attr in ("with", "acquire") and (type(value) is syncs.LOCK or type(value) is syncs.RLOCK) and \
        syncs.locked(value)


def _is_simple_queue(value):
    cls = introspect.stdlib("queue", "SimpleQueue")
    return cls is not None and type(value) is cls


def _label(obj):
    """`threading.Lock at 0x7f..[, detail]`."""
    addr = "0x%x" % id(obj)
    if _is_module_lock(obj):
        return "importlib._ModuleLock at " + addr
    if type(obj) is syncs.LOCK:
        return "threading.Lock at " + addr
    if syncs.RLOCK is not None and type(obj) is syncs.RLOCK:
        return "threading.RLock at " + addr
    for label, module, name in _KNOWN:
        cls = introspect.stdlib(module, name)
        if cls is not None and introspect.isa(obj, cls):
            return "%s at %s%s" % (label, addr, _detail(obj, name))
    return "object at " + addr


def _detail(obj, name):
    if name in ("Semaphore", "BoundedSemaphore"):
        value, start = introspect.field(obj, "_value"), introspect.field(obj, "_initial_value")
        if type(value) is not int:
            return ""
        # A BoundedSemaphore keeps the count it started with; a Semaphore does not.
        return ", %d of %d free" % (value, start) if type(start) is int else ", %d free" % value
    if name == "Barrier":
        count, parties = introspect.field(obj, "_count"), introspect.field(obj, "_parties")
        return ", %d of %d arrived" % (count, parties) if type(count) is int and type(parties) is int else ""
    if name == "Future":
        # No worker has picked it up: a pool whose workers all wait for such futures never will.
        return ", not started" if introspect.field(obj, "_state") == "PENDING" else ""
    return ""


def _unfinished(queue):
    """`, 2 unfinished, 0 queued`: what Queue.join() waits for (items got without task_done()) and
    what is still in the queue, read from its fields (a deque or list: len() runs no program code)."""
    unfinished, items = introspect.field(queue, "unfinished_tasks"), introspect.field(queue, "queue")
    if type(unfinished) is not int or type(items) not in (list, _DEQUE):
        return ""
    return ", %d unfinished, %d queued" % (unfinished, len(items))


def _join_lines(thread):
    ident = introspect.field(thread, "_ident")
    if type(ident) is not int:
        return []
    return [grammar.joins(introspect.thread_name(thread, ident), ident)]


def name_of(frame, obj, anywhere=False):
    """The expression at the frame's current call (any call at its line: holders.calls_at) that is
    obj (by identity), or None."""
    if frame is None:
        return None
    for expr, _attr, text in holders.calls_at(frame, anywhere):
        found, value = introspect.resolve(expr, frame)
        if found and value is obj:
            return text
    return None
