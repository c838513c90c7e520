"""What an asyncio event loop's thread is really doing, read from its frames and the live tasks at
dump time, as extra dump lines under that thread (their grammar: grammar/notes.py):
  running task: NAME (CORO): FILE:LINE in FUNC[; calls CALL]
      the loop is inside one task's step, not in its selector: FUNC at FILE:LINE is the innermost
      coroutine frame of task NAME (whose coroutine function is CORO), and CALL the call it makes
      there (`time.sleep`, `sock.recv`, as the source writes it), when the source says. A loop
      whose thread is blocked there runs no other task until that call returns.
  running callback: FILE:LINE in FUNC[; calls CALL]
      the same for a plain callback (call_soon, a protocol's data_received)
  dead task: NAME (CORO): FILE:LINE in FUNC > ...; raised EXC[; waited on by task A, task B]
      a task of this loop that ended with an exception nobody has retrieved yet (no await, no
      result() or exception() call): its traceback outermost first, the exception as
      `ValueError('bad row')`, and the pending tasks that wait on an object the dead task's own
      frames held, in a local or a local's field (`self.queue`): a queue it was to fill, an event
      it was to set, a future it was to resolve
It runs in the watchdog thread at dump time only, and never runs the program's code: a task's
fields are read through the C Task type's own descriptors (a subclass cannot change what they
do), frames through their C attributes, locals as runtime/introspect.py reads them, and an exception
by its type's name and its arguments' built-in reprs, never its own __repr__ or __str__. The task
sets are copied by one C call (no Python code runs in it, so no other thread changes them
meanwhile) and at most MAX_TASKS of them are looked at. It never raises; what cannot be read is
left out."""
import _weakref

from earlylog.grammar import notes
from earlylog.runtime import holders, introspect

MAX_TASKS = 10000   # tasks looked at per loop: a copy of their set costs well under a millisecond
MAX_DEAD = 5        # `dead task:` lines per loop
MAX_TRACEBACK = 12  # frames of a dead task's traceback, the innermost ones
MAX_LOCALS = 200    # locals of a dead task's frame, and fields of each, looked at for what it held
MAX_DEPTH = 200     # frames walked from a stack's innermost frame to the loop's own
# CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: an `async def`, a @types.coroutine, an
# `async for` over an async generator; their frames are steps of the task, not calls it waits in
_COROUTINE = 0x80 | 0x100 | 0x200
_GETSET = type(type.__dict__["__dict__"])  # a C type's field
_METHOD = type(str.join)  # a C type's own method
_classes = [None, None]  # the Task classes of this dump (lines() sets them)
_descriptors = {}  # (Task class, field) -> its C descriptor, or None: looked up once
_PLAIN = (str, int, float, bool, bytes, type(None))  # arguments whose repr is the interpreter's own


def lines(frame, loop):
    """The dump lines for a thread whose stack (innermost frame `frame`) runs event loop `loop`."""
    out = []
    _load_classes()
    for part in (lambda: _running(frame), lambda: _dead(loop)):
        try:
            out += part()
        except Exception:  # a frame or an object we did not foresee: the dump goes on without it
            pass
    return out


def pending_chains(loop):
    """For each pending task of event loop `loop`: ([(file, function) of its coroutine frames,
    outermost first], its innermost coroutine frame or None), read as lines() reads tasks (the
    watchdog asks at a stall whether every task waits for work: runtime/stuck.py)."""
    return [([(f.f_code.co_filename, f.f_code.co_name) for f in frames], frames[-1] if frames else None)
            for _task, frames, _waiter in pending(loop)]


def pending(loop):
    """(task, the frames of its await chain outermost first, the object its step waits for or
    None) of each pending task of event loop `loop`: what the watchdog compares between its looks
    to see a task move (runtime/stuck.py), read as lines() reads tasks."""
    _load_classes()
    return [(task, _await_frames(task), _get(task, "_fut_waiter")) for task in _tasks_of(loop)
            if _get(task, "_state") == "PENDING"]


def awaits_tasks(obj):
    """Is obj, what a task's step waits for, another task or a gather of tasks? Such a wait moves
    when they do, and each of them is judged by its own moves (runtime/stuck.py)."""
    if obj is None:
        return False
    gathering = _tasks_module().get("_GatheringFuture")
    return _task_type(obj) is not None or gathering is not None and type(obj) is gathering


def describe(task):
    """`Task-2 (fetch)`: a task's name and its coroutine function's."""
    return "%s (%s)" % _names(task)


def _load_classes():
    """The Task classes, looked up once a look: the C one, and the pure-Python one it stands for."""
    _classes[:] = [introspect.module_dict("_asyncio").get("Task"), _tasks_module().get("_PyTask")]


# --- the task a loop is running ----------------------------------------------------------

def in_step(frame):
    """The frames inside the asyncio Handle._run that the stack ending in `frame` runs (a task's
    step or a callback), innermost first; None when the thread runs no loop's handle (a loop
    parked in its selector, or no loop at all). A healthy loop comes back to its selector between
    steps, so a thread found in the same step for seconds blocks its loop: a time.sleep there is
    no poll loop. Cheap (a walk of the stack's frames), never raises."""
    inner = []
    try:
        while frame is not None and len(inner) < MAX_DEPTH:
            code = frame.f_code
            back = frame.f_back
            if code.co_name == "_run" and _asyncio_file(code.co_filename, "events.py") and back is not None and \
                    back.f_code.co_name == "_run_once":
                return inner
            inner.append(frame)
            frame = back
    except Exception:
        pass
    return None


def _running(frame):
    """`running task:` or `running callback:` when the stack is inside a handle the loop runs."""
    inner = in_step(frame)
    if inner is None:
        return []
    # A pure-Python Task steps through its own frames (tasks.py) before the coroutine's.
    while inner and _asyncio_file(inner[-1].f_code.co_filename, "tasks.py") and \
            not inner[-1].f_code.co_flags & _COROUTINE:
        inner.pop()
    if not inner:
        return []
    coros = 0  # the coroutine frames the task's step runs, from the outermost inward
    while coros < len(inner) and inner[-1 - coros].f_code.co_flags & _COROUTINE:
        coros += 1
    if not coros:
        return [notes.running_callback(_frame_text(inner[-1]), _calls(inner, len(inner) - 1))]
    task = _task_of(inner[-1])
    name, coro = _names(task) if task is not None else ("?", inner[-1].f_code.co_name)
    at = len(inner) - coros  # the innermost coroutine frame's index
    return [notes.running_task(name, coro, _frame_text(inner[at]), _calls(inner, at))]


def _calls(inner, at):
    """`time.sleep`: the call frame inner[at] makes, as its source writes it; for a call into
    Python code with no such text, the function it entered; or None."""
    text = holders.call_at(inner[at])
    if text is None and at > 0:
        code = inner[at - 1].f_code
        text = getattr(code, "co_qualname", code.co_name)
    return text or None


def _task_of(frame):
    """The task whose coroutine runs in `frame` (the outermost coroutine frame of a step): the
    current task of one of the running loops."""
    current = _tasks_module().get("_current_tasks")
    if type(current) is not dict:
        return None
    for task in list(current.values()):  # a copy made in C
        coro = _get(task, "_coro")
        if coro is not None and getattr(coro, "cr_frame", None) is frame and _is_coroutine(coro):
            return task
    return None


# --- tasks that died with nobody to hear it --------------------------------------------------

def _dead(loop):
    """`dead task:` lines for the finished tasks of this loop whose exception nobody retrieved."""
    if loop is None:
        return []
    tasks = _tasks_of(loop)
    dead = [t for t in tasks if _get(t, "_state") == "FINISHED" and _get(t, "_log_traceback") is True
            and _get(t, "_exception") is not None]
    if not dead:
        return []
    waited = _waited_objects([t for t in tasks if _get(t, "_state") == "PENDING"])
    out = []
    for task in dead[:MAX_DEAD]:
        name, coro = _names(task)
        exc = _get(task, "_exception")
        frames = _traceback(exc)
        held = _held(frames)
        waiters = []
        for obj_id, task in waited:
            who = _names(task)[0] if obj_id in held else None
            if who is not None and who not in waiters:
                waiters.append(who)
        out.append(notes.dead_task(name, coro, [_frame_text(f, line) for f, line in frames], _exception_text(exc),
                                   waiters[:5]))
    return out


def _held(frames):
    """The ids of what a dead task's frames held: their locals, and the fields of those (a
    method's `self.queue`), read from plain dicts."""
    held = set()
    for f, _line in frames:
        for value in list(introspect.frame_locals(f).values())[:MAX_LOCALS]:
            held.add(id(value))
            own = introspect.instance_dict(value)
            if own is not None:
                held.update(id(v) for v in list(own.values())[:MAX_LOCALS])
    return held


def _all_tasks():
    """The live tasks of every loop, at most MAX_TASKS: asyncio.tasks' registry of them (a WeakSet
    of tasks until 3.11, of scheduled ones from 3.12, beside a set of eager ones), copied in C."""
    import itertools
    space = _tasks_module()
    out = []
    for name in ("_all_tasks", "_scheduled_tasks", "_eager_tasks"):
        found = space.get(name)
        data = introspect.field(found, "data") if found is not None and type(found) is not set else found
        if type(data) is not set:
            continue
        for item in list(itertools.islice(data, MAX_TASKS - len(out))):
            task = item() if type(item) is _weakref.ref else item  # a WeakSet holds weak references
            if task is not None and _task_type(task) is not None:
                out.append(task)
    return out


def task_count():
    """How many live tasks asyncio knows of, every loop's (the sizes of its registries: no task is
    read)."""
    space = _tasks_module()
    total = 0
    for name in ("_all_tasks", "_scheduled_tasks", "_eager_tasks"):
        found = space.get(name)
        data = introspect.field(found, "data") if found is not None and type(found) is not set else found
        total += len(data) if type(data) is set else 0
    return total


def _tasks_of(loop):
    """The live tasks of event loop `loop` (_all_tasks' bound)."""
    return [t for t in _all_tasks() if _get(t, "_loop") is loop]


def _await_frames(task):
    """The frames of a task's await chain, outermost first: its native coroutines' frames, down
    to the first awaitable that is not one (a Future), at most MAX_DEPTH links."""
    frames, coro, depth = [], _get(task, "_coro"), 0
    while _is_coroutine(coro) and depth < MAX_DEPTH:
        if coro.cr_frame is not None:
            frames.append(coro.cr_frame)
        coro = coro.cr_await
        depth += 1
    return frames


def _waited_objects(pending):
    """[(id of an object, task)] for what each pending task waits on: the `self` of the innermost
    frame of its await chain (an asyncio.Queue in get(), an Event in wait()) and the future its
    step waits for."""
    out = []
    for task in pending:
        frames = _await_frames(task)
        last = frames[-1] if frames else None
        if last is not None:
            scope = introspect.frame_locals(last)
            if "self" in scope:
                out.append((id(scope["self"]), task))
        waiter = _get(task, "_fut_waiter")
        if waiter is not None:
            out.append((id(waiter), task))
    return out


def _traceback(exc):
    """[(frame, line)] of an exception's traceback, outermost first, its innermost MAX_TRACEBACK."""
    tb = _base_field(exc, "__traceback__")
    out = []
    while tb is not None and type(tb).__name__ == "traceback" and len(out) < 1000:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out[-MAX_TRACEBACK:]


def _exception_text(exc):
    """`ValueError('bad row')`: the type's name and the arguments' built-in reprs (`...` for any
    other argument), cut at 200 characters."""
    name = type.__dict__["__name__"].__get__(type(exc))
    args = _base_field(exc, "args")
    if type(args) is not tuple:
        return name
    parts = [repr(a) if type(a) in _PLAIN else "..." for a in args[:4]] + (["..."] if len(args) > 4 else [])
    text = "%s(%s)" % (name, ", ".join(parts))
    return text if len(text) <= 200 else text[:197] + "..."


def _base_field(exc, name):
    """An exception's field through BaseException's own descriptor, or None."""
    try:
        return BaseException.__dict__[name].__get__(exc)
    except Exception:
        return None


# --- reading tasks without running their code --------------------------------------------------

def _tasks_module():
    return introspect.module_dict("asyncio.tasks")


def _task_type(task):
    """The asyncio Task class obj is an instance of (the C one, or the pure-Python one), or None."""
    kind = type(task)
    if kind is _classes[0] or kind is _classes[1]:
        return kind
    return next((cls for cls in _classes if cls is not None and introspect.isa(task, cls)), None)


def _get(task, name):
    """A task's field: through the C Task's own descriptor, or from a pure-Python task's dict."""
    cls = _task_type(task)
    if cls is None:
        return None
    key = (cls, name)
    if key not in _descriptors:
        descr = introspect.lookup(cls, name)
        _descriptors[key] = descr if type(descr) is _GETSET else None
    descr = _descriptors[key]
    if descr is not None:
        try:
            return descr.__get__(task, cls)
        except Exception:
            return None
    if name == "_log_traceback":
        name = "_Future__log_traceback"  # the pure-Python Future keeps it behind a property
    return introspect.field(task, name)


def _names(task):
    """(the task's name, its coroutine function's name)."""
    name = None
    cls = _task_type(task)
    getter = introspect.lookup(cls, "get_name") if cls is not None else None
    if type(getter) is _METHOD:
        try:
            name = getter(task)  # the C Task's own method: it formats its number or returns its name
        except Exception:
            name = None
    if name is None:
        name = introspect.field(task, "_name")
    coro = _get(task, "_coro")
    coro_name = coro.__qualname__ if _is_coroutine(coro) else None
    return (name if type(name) is str else "?"), (coro_name if type(coro_name) is str else "?")


def _is_coroutine(obj):
    """Is obj exactly a native coroutine object (its attributes are the interpreter's own)?"""
    kind = introspect.module_dict("types").get("CoroutineType")
    return kind is not None and type(obj) is kind


def _asyncio_file(path, name):
    return path.endswith("/asyncio/" + name)


def _frame_text(frame, line=None):
    code = frame.f_code
    return notes.frame(code.co_filename, line or frame.f_lineno or 0, code.co_name)
