"""Who can still change the object a thread waits on: the program's other live threads whose stack
refers to it (a variable of one of their frames, an attribute of their `self`, a global or closure
their code names, and the program's own functions that code names, a few calls deep), written as
the `can change it:` note under `waits for:` (grammar/notes.py). A queue nothing can fill, an
event nothing can set, a barrier whose last party never comes, a condition nothing can notify, a
semaphore nothing can release: the reader's causes from a waited object's state
(read/object_causes.py) rest on it.
It owns that search and what it may conclude. "No other thread" only when every other thread was
read within the search's bounds, none refers to the object, and none can be handed new work that
might (a pool's idle worker, a server, an event loop, a greenlet hub, a consumer waiting on a
queue): where one can, or the bounds run out, the answer is unknown and it writes nothing. A thread
waiting on the same object, or joining a thread that is, cannot change it before the wait ends
and is not counted.
It runs in the watchdog thread at dump time only (waits.py calls it), reads through
runtime/introspect.py (its contract: no program code runs; containers are read only when they are
an exact dict, list, tuple, set or deque, copied by C in one step, a bounded number of items),
never blocks, never raises."""
import _collections
import os
import sys

from earlylog.grammar import notes as grammar, parked, places
from earlylog.runtime import introspect, threads as our_threads

_FUNCTION = type(lambda: None)
_CODE = type(_FUNCTION.__code__)


class _Any:
    def method(self):
        pass


_METHOD = type(_Any().method)
_BUILTIN_METHOD = type([].append)  # a C object's bound method: a C Future's set_result
_CELL = type((lambda value: lambda: value)(0).__closure__[0])  # what a closure keeps a variable in
# The methods a waiter calls (a bound one lives on its caller's stack during the wait): not a callback.
_WAITING = ("wait", "wait_for", "acquire", "get", "join", "result", "exception", "__enter__", "__exit__", "_wait")
MAX_BLOCKS = 20000000  # allocated blocks past which the collector's referrers are not walked
_MODULE = type(os)
_CONTAINERS = (dict, list, tuple, set, frozenset, _collections.deque)
# Where a thread can be handed work that may refer to anything: a library's worker loop
# (grammar/parked.py's WORK), an event loop, a greenlet hub.
_TAKES_WORK = tuple((suffix, function) for suffix, function, _words in parked.WORK) + (
    ("asyncio/base_events.py", "_run_once"), ("gevent/hub.py", "run"), ("eventlet/hubs/hub.py", "run"))
_WAIT_FILES = tuple(os.sep + name for name in ("threading.py", "queue.py", os.path.join("futures", "_base.py")))
MAX_FRAMES = 64  # of one thread's stack
MAX_CODES = 400  # code objects one search reads, over all threads
MAX_ITEMS = 256  # of an event loop's callbacks, timers and watched files
MAX_READS = 200000  # objects one search reads, over all threads (a few ms in the watchdog thread)
DEPTH = 3        # calls followed from a frame's code into the program's functions it names


class _Unknown(Exception):
    """The search cannot conclude: a thread may be handed work, or its bounds ran out."""


class _Budget:
    """What is left of one search's bounds."""
    __slots__ = ("codes", "reads", "read", "called")

    def __init__(self):
        self.codes, self.reads = MAX_CODES, MAX_READS
        self.read = {}    # id() of each container or instance read for the object -> the depth read to
        self.called = {}  # ... and read for the program's code to call (_calls_back)


def lines(ident, kind, obj, frames, threads, waited, reached=None):
    """The `can change it:` note for the object `obj` thread `ident` waits on (a wait of `kind`), or
    [] where that cannot be known or the wait is a library's own (a multiprocessing Queue's feeder
    thread on its condition: the objects around it are the library's, deeper than this reads).
    frames: sys._current_frames(); threads: {ident: threading.Thread}; waited: waits._waited (frame
    -> (kind, object, name, method) or None); reached: one dump's {(id of obj, kind): its note
    lines}, which every waiter on it shares (the search and its walk of the heap, once)."""
    try:
        caller = next((f for f in introspect.outward(frames[ident], MAX_FRAMES)
                       if not f.f_code.co_filename.endswith(_WAIT_FILES)), None)
        if caller is None or places.foreign(caller.f_code.co_filename):
            return []
        key = (id(obj), kind)  # obj lives while its waiters wait: its id is its own for the dump
        if reached is None or key not in reached:
            found = _changed_by(ident, kind, obj, frames, threads, waited)
            if reached is None:
                return found
            reached[key] = found
        return reached[key]
    except Exception:  # a frame or object not foreseen: no note rather than a wrong one
        return []


def _changed_by(ident, kind, obj, frames, threads, waited):
    try:
        return [grammar.can_change(*_changers(ident, kind, obj, frames, threads, waited))]
    except _Unknown:
        return []


def _changers(ident, kind, obj, frames, threads, waited):
    waiters, others = {ident}, []
    for other, frame in frames.items():
        if other == ident or our_threads.name_of(other) is not None:
            continue
        found = waited(frame)
        if found is not None and found[1] is obj and found[0] == kind:
            waiters.add(other)  # (one entering a condition's `with` block waits for its lock, not its notify)
        else:
            others.append((other, frame, found))
    if _handled(obj) or _registered(obj):
        # a signal handler of the program's can change it, whenever the signal comes; or a callback
        # the program stored away can (a library's native thread, a finalizer may call it)
        raise _Unknown()
    budget, named, after = _Budget(), [], []
    for other, frame, found in others:
        name = (introspect.thread_name(threads.get(other), other), other)
        if found is not None and found[0] == "join" and introspect.field(found[1], "_ident") in waiters:
            # it waits for a waiter to end: it can change it only after, which is a wait cycle (a
            # sentinel sent after the join), told as the join it is
            if _after(frame, obj, budget):
                after.append(name)
            continue
        if found is not None and found[0] == "queue" and found[3] == "get" or _takes_work(frame):
            raise _Unknown()
        if _refers(frame, obj, budget):
            named.append(name)
        elif _calls_back(frame, budget):
            raise _Unknown()
    return named, len(others), after


def _calls_back(frame, budget):
    """Is this a library's thread (no frame of the program's on its stack) that holds the program's
    code to call (a file watcher's handler, a client's callback), two levels into its frames'
    variables? What that code may do when called is not on any stack yet."""
    stack = list(introspect.outward(frame, MAX_FRAMES))
    if any(not places.foreign(f.f_code.co_filename) for f in stack):
        return False  # the program's own frames: what they can call was read
    return any(_program_code(v, 3, budget) for f in stack for v in _locals(f, budget))


def _locals(frame, budget):
    scope = introspect.frame_locals(frame)
    return _items(scope if type(scope) is dict else dict(scope), budget)


def _program_code(value, depth, budget):
    """Is value (or what it holds, depth deep) a function, a bound method or an instance of a class
    the program defined (not a library)?"""
    if type(value) is _METHOD:
        value = value.__func__
    if type(value) is _FUNCTION:
        return not places.foreign(value.__code__.co_filename)
    if type(value) is _MODULE or introspect.isa(value, type):
        return False
    module = introspect.class_dict(type(value)).get("__module__")
    path = introspect.module_dict(module).get("__file__") if type(module) is str else None
    if type(path) is str and not places.foreign(path):
        return True
    if depth == 0 or budget.called.get(id(value), -1) >= depth:
        return False
    budget.called[id(value)] = depth
    return any(_program_code(item, depth - 1, budget) for item in _items(value, budget))


def _registered(obj):
    """Does a callable hold obj where no thread's stack shows it: a closure over it, a bound method
    that changes it (`fut.add_done_callback(lambda f: done.set())`, `weakref.finalize(res,
    done.set)`, a C library's callback that its own threads call), a functools.partial? Read from
    the collector's referrers of obj (a walk of the heap: about 15 ms a million objects, at dump
    time only); a heap too large to walk is an unknown answer."""
    import gc
    if sys.getallocatedblocks() > MAX_BLOCKS:
        return True
    partial = sys.modules.get("functools")
    partial = vars(partial).get("partial") if partial is not None else None
    cells = []
    for ref in gc.get_referrers(obj):
        kind = type(ref)
        if kind is _CELL:
            cells.append(ref)
        elif (kind is _METHOD or kind is _BUILTIN_METHOD) and ref.__self__ is obj and _name(ref) not in _WAITING:
            return True
        elif partial is not None and kind is partial and any(arg is obj for arg in ref.args):
            return True
    # A closure over it: the program's own function's (a library's, threading's Barrier's lambda over
    # itself, is the library's business). One more walk, for all the cells at once.
    return bool(cells) and any(type(ref) is _FUNCTION and not places.foreign(ref.__code__.co_filename)
                               for ref in gc.get_referrers(*cells[:MAX_ITEMS]))


def _name(method):
    """A bound method's name, read from C only: a Python one's function (not any callable the
    program bound, whose __getattr__ would run), a C one's own."""
    if type(method) is _METHOD:
        func = method.__func__
        return func.__name__ if type(func) is _FUNCTION else None
    return method.__name__


def _handled(obj):
    """Does a Python signal handler the program installed refer to obj?"""
    import signal
    budget = _Budget()
    for number in signal.valid_signals():
        handler = signal.getsignal(number)  # C: the handler object as installed
        if (type(handler) is _FUNCTION or type(handler) is _METHOD) and \
                _value_refers(handler, obj, budget, set(), DEPTH, []):
            return True
    return False


def _after(frame, obj, budget):
    """Does the code after the current line of a frame of this stack (the program's, from the
    innermost out) name obj, or a function of the program's that does?"""
    import dis
    seen = set()
    for f in introspect.outward(frame, MAX_FRAMES):
        if places.foreign(f.f_code.co_filename):
            continue
        scope, spaces = introspect.frame_locals(f), [f.f_globals] if type(f.f_globals) is dict else []
        this = scope["self"] if f.f_code.co_name != "<module>" and "self" in scope else None
        for ins in dis.get_instructions(f.f_code):
            if ins.offset <= f.f_lasti or not ins.opname.startswith("LOAD_") or type(ins.argval) is not str:
                continue
            name = ins.argval
            values = [scope[name]] if ins.opname in ("LOAD_FAST", "LOAD_DEREF") and name in scope else []
            values += [space[name] for space in spaces if name in space] if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") \
                else []
            if this is not None and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                found, value = introspect.attribute(this, name)
                values += [value] if found else []
            if any(_value_refers(v, obj, budget, seen, DEPTH, spaces) for v in values):
                return True
    return False


def alone(loop, pending, frames):
    """The names of the tasks of `loop` (pending: [(task, name, its coroutine frames)]) each awaiting
    a bare Future that nothing else refers to: no other task's frames, no callback or timer the loop
    holds, no reader or writer it watches (a transport's protocol a reply would reach), no other
    thread's stack. [] where that cannot be known; never raises."""
    try:
        return _alone(loop, pending, frames)
    except Exception:
        return []


def _alone(loop, pending, frames):
    waits = _waits(pending)
    return [name for task, name, _frames, target in waits
            if target is not None and _none_refers(loop, task, target, waits, frames)]


def task_alone(loop, task, pending, frames):
    """Is what `task` awaits in its own code something nothing else can complete (as alone(), with
    the same `pending`)? The watchdog asks once, of a task that stood at an asyncio Event's or
    Queue's wait for a whole stall (runtime/stuck.py: such a wait is a service's otherwise). Never
    raises."""
    try:
        waits = _waits(pending)
        target = next((theirs for t, _n, _f, theirs in waits if t is task), None)
        return target is not None and _none_refers(loop, task, target, waits, frames)
    except Exception:
        return False


def _waits(pending):
    """[(task, name, its coroutine frames, what it awaits that another must complete, or None)]."""
    return [(task, name, coro_frames, _awaited(task, coro_frames)) for task, name, coro_frames in pending]


def _none_refers(loop, task, target, waits, frames):
    if _registered(target):
        return False
    budget = _Budget()
    # (the tasks that await the same object cannot end one another's wait)
    return not any(_refers_frames(other, target, budget) for t, _n, other, theirs in waits
                   if t is not task and theirs is not target) and \
        not any(_holds(handle, target, 4, budget) for handle in _handles(loop)) and \
        not any(_refers(frame, target, budget) for ident, frame in frames.items()
                if our_threads.name_of(ident) is None and not _runs(frame, loop))


def _awaited(task, coro_frames):
    """What a task awaits in the program's own code, that another task, callback or thread must
    complete: a bare Future (not chained to another, named by a variable of the frame that awaits
    it), or an asyncio Event, Condition or Queue (get) the frame awaits the method of; else None."""
    import asyncio
    # asyncio's own Task keeps what it awaits in a C slot (a getset: reading it runs no program code)
    fut = getattr(task, "_fut_waiter", None) if type(task) in (asyncio.Task, asyncio.tasks._PyTask) else None
    if fut is None or not coro_frames or introspect.isa(fut, asyncio.Task) or \
            type(fut) not in (asyncio.Future, asyncio.futures._PyFuture):
        return None
    inner = len(coro_frames)
    target = None
    for i in range(len(coro_frames) - 1, -1, -1):  # asyncio's frames, innermost first
        code = coro_frames[i].f_code
        if not code.co_filename.endswith(_ASYNC_FILES):
            break
        this = introspect.frame_locals(coro_frames[i]).get("self")
        if code.co_name in ("wait", "wait_for", "get") and type(this) in _async_syncs(asyncio):
            target = this
        inner = i
    user = coro_frames[inner - 1] if inner else None
    if user is None or places.foreign(user.f_code.co_filename):
        return None  # a sleep's, a lock's, a stream read's, a library's own wait
    if target is not None:
        return target
    if inner < len(coro_frames) or len(getattr(fut, "_callbacks", None) or ()) > 1:
        return None  # inside asyncio (a semaphore, a queue's join), or chained to another future
    if not any(v is fut for v in list(introspect.frame_locals(user).values())):
        return None  # `await asyncio.Future()`, named by nothing: parked until cancelled, on purpose
    return fut


_ASYNC_FILES = tuple(os.sep + os.path.join("asyncio", name) for name in ("locks.py", "queues.py", "tasks.py",
                                                                        "futures.py"))


def _async_syncs(asyncio):
    return (asyncio.Event, asyncio.Condition, asyncio.Queue, asyncio.PriorityQueue, asyncio.LifoQueue)


def _handles(loop):
    """The loop's callbacks and timers due, and the readers and writers it watches: the objects
    they call and with what (a transport: its protocol)."""
    own = introspect.instance_dict(loop) or {}
    out = []
    for field in ("_ready", "_scheduled"):
        queue = own.get(field)
        if type(queue) in _CONTAINERS:
            out += list(tuple(queue))
    signals = own.get("_signal_handlers")  # loop.add_signal_handler's: a signal may come at any time
    if type(signals) is dict:
        out += list(signals.values())
    selector = own.get("_selector")
    fds = introspect.field(selector, "_fd_to_key") if selector is not None else None
    if type(fds) is dict:
        for key in list(fds.values()):
            # a SelectorKey (a namedtuple): its `data`, asyncio's (reader Handle, writer Handle)
            data = tuple.__getitem__(key, 3) if isinstance(key, tuple) and type(key).__module__ == "selectors" else None
            out += [h for h in data if h is not None] if type(data) is tuple else []
    if len(out) > MAX_ITEMS:
        raise _Unknown()
    return [_called(h) for h in out]


def _called(handle):
    """(callback's object, args) of an asyncio Handle, read from its slots."""
    callback = introspect.attribute(handle, "_callback")[1]
    this = callback.__self__ if type(callback) is _METHOD or type(callback) is _BUILTIN_METHOD else callback
    return this, introspect.attribute(handle, "_args")[1]


def _runs(frame, loop):
    """Is this thread the one running `loop` (its tasks are read as tasks)?"""
    return any(f.f_code.co_name == "run_forever" and introspect.frame_locals(f).get("self") is loop
               for f in introspect.outward(frame, MAX_FRAMES))


def _refers_frames(coro_frames, obj, budget):
    seen = set()
    return any(_frame_refers(f, obj, budget, seen) for f in coro_frames)


def _takes_work(frame):
    for f in introspect.outward(frame, MAX_FRAMES):
        path = f.f_code.co_filename.replace("\\", "/")
        if any(f.f_code.co_name == function and path.endswith(suffix) for suffix, function in _TAKES_WORK):
            return True
    return False


def _refers(frame, obj, budget):
    """Does a frame of this stack hold obj, or name it in its code or the functions that code names?"""
    return _refers_frames(introspect.outward(frame, MAX_FRAMES), obj, budget)


def _frame_refers(f, obj, budget, seen):
    scope = introspect.frame_locals(f)
    this = None
    if f.f_code.co_name != "<module>":  # (a module's locals are its globals: read through its code's names)
        if any(_holds(v, obj, 2, budget) for v in _locals(f, budget)):
            return True
        this = scope["self"] if "self" in scope else None
    return _code_refers(f.f_code, f.f_globals, this, obj, budget, seen, DEPTH)


def _holds(value, obj, depth, budget):
    """Is value obj, or does it hold obj (an exact container's item, an instance's attribute), depth deep?"""
    if value is obj:
        return True
    if depth == 0 or type(value) is _MODULE or type(value) is _FUNCTION or introspect.isa(value, type):
        return False
    if budget.read.get(id(value), -1) >= depth:
        return False  # read already, as deep (one table that many frames name is read once)
    budget.read[id(value)] = depth
    return any(_holds(item, obj, depth - 1, budget) for item in _items(value, budget))


def _items(value, budget):
    """Every item value holds: an exact container's items (a dict's values), else an instance's
    attributes; copied by C in one step, never iterated while another thread changes it. A
    container larger than what is left of the search's bounds makes the answer unknown (an object
    at its far end would otherwise be missed)."""
    kind = type(value)
    if kind in _CONTAINERS:
        size = len(value)
    else:
        value = introspect.instance_dict(value)
        if value is None:
            return ()
        kind, size = dict, len(value)
    budget.reads -= size
    if budget.reads < 0:
        raise _Unknown()
    return tuple(value.values()) if kind is dict else tuple(value)


def _code_refers(code, scope, this, obj, budget, seen, depth):
    """Does code name obj: a global of `scope` or an attribute of `this` (its `self`) that holds it,
    or, depth calls deep, a function of the program's that does?"""
    if id(code) in seen:
        return False
    seen.add(id(code))
    budget.codes -= 1
    if budget.codes < 0:
        raise _Unknown()
    spaces = [scope] if type(scope) is dict else []
    for name in code.co_names:
        for space in spaces:
            if name in space and _value_refers(space[name], obj, budget, seen, depth, spaces):
                return True
        if this is not None:
            found, value = introspect.attribute(this, name)
            if not found:
                value = introspect.lookup(type(this), name)  # a method: the class's function
            if value is not None and _value_refers(value, obj, budget, seen, depth, spaces, this):
                return True
    return any(type(const) is _CODE and _code_refers(const, scope, this, obj, budget, seen, depth)
               for const in code.co_consts)


def _value_refers(value, obj, budget, seen, depth, spaces, this=None):
    """Does a value that code names hold obj, or run code that names it: a function of the
    program's, a bound method (its object too: `Timer(5, ready.set)`), a table of those (handlers
    by key)? A program module's namespace joins `spaces`, for the names the code reads from it."""
    if type(value) is _MODULE:
        own = introspect.instance_dict(value)
        path = own.get("__file__") if own is not None else None
        if type(path) is str and not places.foreign(path) and not any(own is space for space in spaces):
            spaces.append(own)  # the program's own module: `helpers.notify()` names notify in it
        return False
    if _holds(value, obj, 1, budget):
        return True
    if type(value) is _METHOD or type(value) is _BUILTIN_METHOD:
        bound = value.__self__
        held = _holds(bound, obj, 1, budget)  # once: asked again, the budget says it was read, and no
        if held or type(value) is _BUILTIN_METHOD:
            return held
        value, this = value.__func__, bound
    if type(value) is _FUNCTION:
        if depth == 0 or places.foreign(value.__code__.co_filename):
            return False
        # its closure's variables (`lambda: event.set()` made in a function), then its code's names
        return any(_holds(_contents(cell), obj, 1, budget) for cell in value.__closure__ or ()) or \
            _code_refers(value.__code__, value.__globals__, this, obj, budget, seen, depth - 1)
    if depth > 0 and (type(value) is dict or type(value) is list or type(value) is tuple):
        return any((type(item) is _FUNCTION or type(item) is _METHOD) and
                   _value_refers(item, obj, budget, seen, depth - 1, spaces) for item in _items(value, budget))
    return False


def _contents(cell):
    try:
        return cell.cell_contents  # C: a cell's value, or ValueError while it is empty
    except ValueError:
        return None
