"""What a blocked thread waits for, read from the live objects at dump time, as extra dump lines:
the lock, queue, event, barrier, future or thread it waits on, named as the code names it
(`cache_lock`, `self._lock`), and for a lock the thread holding it where that can be known (an
RLock's owner; a thread whose frames sit inside a `with` block on it, or past an `acquire()` with
no `release()` since), as `waits for:`, `held by:`, `joins:`, `set by:` and `in signal handler:`
lines, written through runtime/notes.py (their grammar, and the reader's parser of them).
It runs in the watchdog thread at dump time only. It must never run the program's code: objects
are told apart by exact type and identity, and values read from frame, instance and class dicts,
never through getattr, __repr__, __eq__, properties or __getattr__ (the one repr taken is the C
RLock's own). It never blocks and never raises; what cannot be known is left out. Its cost
falls on dumps only: nothing is imported before the first one, which imports ast and linecache
and parses the functions on the stacks; what the sources say is kept for the next dumps."""
import _collections
import _thread
import sys

from earlylog.runtime import notes as grammar, records, threads as our_threads

MAX_FRAMES = 40       # frames looked at per thread, as in the dump itself
MAX_SOURCE = 2000000  # characters: a larger file is parsed a function at a time only
MAX_FILES = 64        # source files whose findings are kept between dumps
MAX_EXPRS = 512       # expression texts whose syntax trees are kept between dumps
MAX_HOLDERS = 5       # `held by:` lines for one semaphore

_LOCK = type(our_threads.allocate_lock())  # the real one: _thread's may be monkey-patched by now
_RLOCK = getattr(_thread, "RLock", None)
_MODULE = type(sys)
_MEMBER = type(type.__dict__["__basicsize__"])  # a __slots__ field's descriptor
_GETSET = type(type.__dict__["__dict__"])       # the standard __dict__ descriptor
_POSITIONS = sys.version_info >= (3, 11)        # code objects know each instruction's columns
_FUNCTION = type(lambda: None)
_DEQUE = _collections.deque


class _Probe:
    def method(self):
        pass


_METHOD = type(_Probe().method)

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
# (label, module, class) of the objects a wait can be on, most derived first.
_KNOWN = (("threading.BoundedSemaphore", "threading", "BoundedSemaphore"),
          ("threading.Semaphore", "threading", "Semaphore"),
          ("threading.Condition", "threading", "Condition"), ("threading.Event", "threading", "Event"),
          ("threading.Barrier", "threading", "Barrier"), ("threading.RLock", "threading", "_PyRLock"),
          ("queue.PriorityQueue", "queue", "PriorityQueue"), ("queue.LifoQueue", "queue", "LifoQueue"),
          ("queue.Queue", "queue", "Queue"), ("queue.SimpleQueue", "queue", "SimpleQueue"),
          ("concurrent.futures.Future", "concurrent.futures._base", "Future"))
_files = {}  # (filename, function's first line or 0) -> _Source, or None when it cannot be parsed
_exprs = {}  # expression source text -> (syntax tree, one-line text, names)
_memo = [None, None]  # the last dump's stacks (as ids) and what each thread holds


def notes(ident, frame, frames, threads):
    """Dump lines for thread `ident` whose innermost frame is `frame`; frames is
    sys._current_frames(), threads {ident: threading.Thread}."""
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
            out += _holder_lines(ident, obj, frames, threads)
            out += [grammar.in_signal_handler(*pair) for pair in _interrupted_by(frame)]
        elif kind == "event":
            out += [grammar.set_by(*pair) for pair in handlers(obj)]
        elif kind == "import":
            owner = _field(obj, "owner")
            if type(owner) is int and owner:
                # A thread that is gone: in a child of fork(), one of the parent's, importing at the fork.
                # Its ident can be a running thread's again (a thread the child started may reuse
                # the gone thread's stack, and so its ident): that one holds the lock only while
                # it imports the module.
                if owner == ident:
                    out.append(grammar.held_by(grammar.ITSELF))
                elif _importing(frames.get(owner), _field(obj, "name")):
                    out.append(grammar.held_by(grammar.thread(_thread_name(threads.get(owner), owner), owner)))
                else:
                    out.append(grammar.held_by(grammar.gone_thread(owner)))
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
        seen = _sync_frame(caller)
        if seen is None:
            break
        kind, obj = seen
        call = caller.f_code.co_name
        caller = caller.f_back
    if obj is not None:
        if kind == "lock" and not _locked(obj):
            return None  # entering a free condition: it is getting it now
        return kind, obj, _name_of(caller, obj), call
    module_lock = _import_lock(frame)
    if module_lock is not None:
        return module_lock
    if _module_of(frame) == "threading" or frame.f_code.co_filename.endswith("/gevent/_threading.py"):
        # its own locks (a finished program waiting in _shutdown): the reader tells those; gevent's
        # copy of threading's Condition for its thread pool takes a waiter lock twice, by design
        return None
    # No stdlib frame: blocked in C, in a lock's acquire() (`with lock:` too) or SimpleQueue.get().
    waits = []
    for expr, attr, text in _calls_at(frame):
        found, value = _resolve(expr, frame)
        if found and _c_wait(value, attr):
            waits.append(("queue" if _is_simple_queue(value) else "lock", value, text, attr))
    # `with a, b:` before 3.13 cannot tell its items apart: the ones entered first are held
    # (locked) by this very thread, so the last locked one is the one it waits for.
    return waits[-1] if waits else None


def _import_lock(frame):
    """("import", lock, module name, "acquire") when frame is importlib waiting for a module's
    import lock: another thread is importing that module (imports run under a lock per module)."""
    if frame.f_code.co_name != "acquire" or frame.f_code.co_filename != "<frozen importlib._bootstrap>":
        return None
    this = _local(frame, "self")
    if not _is_module_lock(this):
        return None
    name = _field(this, "name")
    return "import", this, name if type(name) is str else None, "acquire"


def _importing(frame, name):
    """Is the stack ending in frame inside the import (or importlib.reload) of module `name`?"""
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>" and _local(frame, "name") == name:
            return True
        frame = frame.f_back
    return False


def _is_module_lock(obj):
    """Is obj exactly importlib's lock for one module's import?"""
    bootstrap = sys.modules.get("_frozen_importlib")
    cls = vars(bootstrap).get("_ModuleLock") if bootstrap is not None else None
    return cls is not None and type(obj) is cls


def _sync_frame(frame):
    """(kind, self) when frame is a stdlib synchronisation method a thread waits in, else None."""
    module = _module_of(frame)
    if module is None:
        return None
    name = frame.f_code.co_name
    this = _local(frame, "self")
    for kind, module_name, cls_name, methods in _WAITS:
        if module_name == module and name in methods:
            cls = _stdlib(module, cls_name)
            if cls is not None and _isa(this, cls):
                return kind, this
    return None


def _module_of(frame):
    """`threading`, `queue` or `concurrent.futures._base` when frame runs in that loaded module."""
    path = frame.f_code.co_filename
    module = _MODULES.get(path.rpartition("/")[2])
    return module if module is not None and path == _module_dict(module).get("__file__") else None


def _c_wait(value, attr):
    """True for a call that blocks in C: entering or acquiring a Lock/RLock someone holds, or
    reading a SimpleQueue."""
    if _is_simple_queue(value):
        return attr == "get"
    return attr in ("with", "acquire") and (type(value) is _LOCK or type(value) is _RLOCK) and _locked(value)


def _is_simple_queue(value):
    cls = _stdlib("queue", "SimpleQueue")
    return cls is not None and type(value) is cls


def _locked(lock):
    """Is this Lock, RLock or Condition's lock held now? False when that cannot be told."""
    if _is_condition(lock):
        lock = _field(lock, "_lock")
    if type(lock) is _LOCK:
        return lock.locked()
    return _rlock_owner(lock) is not None


def _rlock_owner(lock):
    """The ident of the thread owning an RLock, or None (not an RLock, or not held)."""
    if _RLOCK is not None and type(lock) is _RLOCK:
        text = repr(lock)  # the C type's own: `<locked _thread.RLock object owner=N count=1 at ...>`
        owner = text.partition("owner=")[2].split(" ", 1)[0]
        return int(owner) if owner.isdigit() and int(owner) else None
    py_rlock = _stdlib("threading", "_PyRLock")
    if py_rlock is not None and type(lock) is py_rlock:
        owner = _field(lock, "_owner")
        return owner if type(owner) is int else None
    return None


def _label(obj):
    """`threading.Lock at 0x7f..[, detail]`."""
    addr = "0x%x" % id(obj)
    if _is_module_lock(obj):
        return "importlib._ModuleLock at " + addr
    if type(obj) is _LOCK:
        return "threading.Lock at " + addr
    if _RLOCK is not None and type(obj) is _RLOCK:
        return "threading.RLock at " + addr
    for label, module, name in _KNOWN:
        cls = _stdlib(module, name)
        if cls is not None and _isa(obj, cls):
            return "%s at %s%s" % (label, addr, _detail(obj, name))
    return "object at " + addr


def _detail(obj, name):
    if name in ("Semaphore", "BoundedSemaphore"):
        value = _field(obj, "_value")
        return ", %d free" % value if type(value) is int else ""
    if name == "Barrier":
        count, parties = _field(obj, "_count"), _field(obj, "_parties")
        return ", %d of %d arrived" % (count, parties) if type(count) is int and type(parties) is int else ""
    if name == "Future":
        # No worker has picked it up: a pool whose workers all wait for such futures never will.
        return ", not started" if _field(obj, "_state") == "PENDING" else ""
    return ""


def _unfinished(queue):
    """`, 2 unfinished, 0 queued`: what Queue.join() waits for (items got without task_done()) and
    what is still in the queue, read from its fields (a deque or list: len() runs no program code)."""
    unfinished, items = _field(queue, "unfinished_tasks"), _field(queue, "queue")
    if type(unfinished) is not int or type(items) not in (list, _DEQUE):
        return ""
    return ", %d unfinished, %d queued" % (unfinished, len(items))


def _join_lines(thread):
    ident = _field(thread, "_ident")
    if type(ident) is not int:
        return []
    return [grammar.joins(_thread_name(thread, ident), ident)]


# --- signal handlers -------------------------------------------------------------------------

# The signals a program handles to be told to stop or reload, or to run something on a timer or a
# child's end (SIGINT's own default handler, which raises KeyboardInterrupt, is Python's, not the
# program's: it is a builtin, never a handler here).
_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGWINCH")


def handlers(target=None):
    """[(signal name, `FUNC at FILE:LINE`)] of the program's Python signal handlers; with a target,
    only those that reach it: it is among the names the handler's code reads (its globals, closure
    or bound instance), or those of a function of the module it calls, one level down. Read from
    the handlers' dicts and cells, never by calling them."""
    return [(name, where) for name, where, function, handler in _handler_functions()
            if target is None or _reaches(function, handler, target, 2)]


def _handler_functions():
    """(signal name, `FUNC at FILE:LINE`, function, handler) of each Python handler in place."""
    import _signal
    found = []
    for name in _SIGNALS:
        number = getattr(_signal, name, None)
        try:
            handler = _signal.getsignal(number) if number is not None else None
        except (ValueError, OSError):
            continue
        function = _function_of(handler)
        if function is None:
            continue
        code = function.__code__
        found.append((name, records.place(code.co_name, code.co_filename, code.co_firstlineno), function, handler))
    return found


def _interrupted_by(frame):
    """[(signal, handler)] for the program's signal handler this stack waits in, if any: Python runs
    a handler on top of whatever the main thread was doing, which may hold the very lock it wants."""
    codes = {}
    for name, where, function, _handler in _handler_functions():
        codes.setdefault(function.__code__, (name, where))
    for f in outward(frame, MAX_FRAMES):
        if f.f_code in codes:
            return [codes[f.f_code]]
    return []


def outward(frame, limit):
    """frame and its callers, innermost first, at most limit of them."""
    while frame is not None and limit > 0:
        yield frame
        frame = frame.f_back
        limit -= 1


def _function_of(handler):
    """The Python function behind a handler (a function, or a bound method's), else None."""
    if type(handler) is _METHOD:
        handler = handler.__func__  # exact type: a C member, no program code
    return handler if type(handler) is _FUNCTION else None


def _reaches(function, handler, target, depth):
    """Does the handler's code name the target object (or, depth permitting, call a function that does)?"""
    code, scope = function.__code__, function.__globals__
    values = [scope[n] for n in code.co_names if type(scope) is dict and n in scope]
    values += [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
    own = _instance_dict(handler.__self__) if type(handler) is _METHOD else None
    values += [own[n] for n in code.co_names if own is not None and n in own]
    if any(value is target for value in values):
        return True
    return depth > 1 and any(_reaches(value, value, target, depth - 1) for value in values
                             if type(value) is _FUNCTION)


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


# --- who holds a lock ------------------------------------------------------------------------

def _holder_lines(ident, obj, frames, threads):
    """`held by:` lines for a lock or semaphore this thread waits for."""
    targets = {id(obj)}
    if _is_condition(obj):
        targets.add(id(_field(obj, "_lock")))
    owner = _rlock_owner(_field(obj, "_lock") if _is_condition(obj) else obj)
    if owner == ident:  # an RLock never blocks its owner: the owner ended and its ident was reused
        return [grammar.held_by(grammar.gone_thread(owner))]
    found = []
    for tid, (held, released) in _holdings(frames).items():
        if owner is not None and tid != owner or targets & released:
            continue
        where = next((w for w in held if w[1] & targets), None)
        if where is not None or tid == owner:
            found.append((tid, where))
    if owner is not None and not found:
        return [grammar.held_by(grammar.gone_thread(owner))]
    out = []
    for tid, where in found[:MAX_HOLDERS]:
        if tid != ident:
            who = grammar.thread(_thread_name(threads.get(tid), tid), tid)
        elif type(obj) is _LOCK or type(_field(obj, "_lock")) is _LOCK:
            who = grammar.ITSELF
        else:
            continue  # re-entrant: holding it does not block its own thread
        out.append(grammar.held_by(who, where[0] if where else ""))
    return out or [grammar.held_by(grammar.UNKNOWN_HOLDER)]


def _holdings(frames):
    """{thread ident: ([(text, ids of what it holds)], ids of locks it gave back in a
    Condition.wait)}, worked out once per dump: a dump of N threads waiting on one lock reads
    each stack once, not N times. Only ids and text are kept, never the program's objects."""
    me = our_threads.get_ident()  # the dumping thread holds none of the program's locks
    signature = tuple((tid, id(top), top.f_lasti) for tid, top in frames.items() if tid != me)
    if _memo[0] != signature:
        _memo[:] = [signature, {tid: (_held_in(top), _released_in_wait(top)) for tid, top in frames.items()
                                if tid != me}]
    return _memo[1]


def _released_in_wait(frame):
    """A thread inside Condition.wait() has given the condition's lock back, though the `with`
    block around the call is still open: the ids of that condition and its lock."""
    while frame is not None:
        seen = _sync_frame(frame)
        if seen is None:
            break
        kind, this = seen
        if kind == "condition":
            return {id(this), id(_field(this, "_lock"))}
        frame = frame.f_back
    return set()


def _held_in(frame):
    """[(`; with block at FILE:LINE in FUNC` text, ids held)] for each frame holding something."""
    out = []
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        for how, expr, line in _held_at(frame):
            found, value = _resolve(expr[0], frame) if expr else (False, None)
            if found:
                ids = {id(value)} | ({id(_field(value, "_lock"))} if _is_condition(value) else set())
                out.append((_where_text(how, frame, line), ids))
        frame = frame.f_back
        depth += 1
    return out


def _where_text(how, frame, line):
    return grammar.held_where(how, frame.f_code.co_filename, line, frame.f_code.co_name)


# --- source: the expressions at a line, and the blocks open around it ------------------------

class _Source:
    """Where the calls, `with` items and `X.acquire()` statements of one function (or module) are,
    as line and column numbers only (never its syntax tree, which would hold megabytes in the host
    for as long as it runs; the text comes from the source lines when a line is asked about).
    Functions are keyed as code objects are: co_firstlineno, 0 for module code."""

    def __init__(self, ast, tree, shift=0):
        self.ast, self.shift = ast, shift  # shift: columns the parsed text was dedented by
        self.calls = {}     # line -> [(expr span, attr or "with", site span)]
        self.blocks = {}    # key -> [(first body line, last line, `with` line, [expr spans])]
        self.acquires = {}  # key -> [(line, expr span, [(first, last) of statements it holds X for], [its release lines])]
        self._statements(tree, 0)
        self._walk(tree, 0)
        del self.ast

    def _span(self, node):
        return node.lineno, node.col_offset + self.shift, node.end_lineno, node.end_col_offset + self.shift

    def _walk(self, node, key):
        ast = self.ast
        for child in ast.iter_child_nodes(node):
            inner = key
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.decorator_list[0].lineno if child.decorator_list else child.lineno
            elif isinstance(child, ast.Lambda):
                inner = child.lineno
            if isinstance(child, ast.With) and child.body:
                exprs = [self._span(item.context_expr) for item in child.items]
                self.blocks.setdefault(key, []).append((child.body[0].lineno, child.end_lineno, child.lineno, exprs))
                for expr in exprs:
                    for line in {child.lineno, expr[0]}:
                        self.calls.setdefault(line, []).append((expr, "with", self._span(child)))
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                for line in {child.lineno, child.func.end_lineno}:
                    self.calls.setdefault(line, []).append((self._span(child.func.value), child.func.attr,
                                                            self._span(child)))
            if isinstance(child, ast.stmt):
                self._statements(child, inner)
            self._walk(child, inner)

    def _statements(self, node, key):
        """`X.acquire()` as a statement holds X for the statements after it in its block; an
        `if X.acquire(...):` test holds it for the if's body."""
        ast = self.ast
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                call = stmt.value if isinstance(stmt, ast.Expr) else None
                if _is_acquire(ast, call) and not call.args and not call.keywords:
                    self._acquire(key, stmt.lineno, call.func.value, body[i + 1:])
                elif isinstance(stmt, ast.If) and _is_acquire(ast, stmt.test):
                    self._acquire(key, stmt.lineno, stmt.test.func.value, stmt.body)

    def _acquire(self, key, line, expr, after):
        ast = self.ast
        name = ast.dump(expr)
        releases, todo = [], list(after)
        while todo:  # `X.release()` calls in what follows, nested functions aside
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "release" and ast.dump(node.func.value) == name:
                releases.append(node.lineno)
            todo.extend(ast.iter_child_nodes(node))
        spans = [(s.lineno, s.end_lineno) for s in after]
        self.acquires.setdefault(key, []).append((line, self._span(expr), spans, releases))

    def held(self, key, line):
        """[(how, expression span, line it was taken at)] for what function `key` holds at `line`."""
        out = []
        for first, last, header, exprs in self.blocks.get(key, ()):
            if first <= line <= last and line != header:  # a thread on the `with` line is entering it
                out += [("with", e, header) for e in exprs]
        for taken, expr, spans, releases in self.acquires.get(key, ()):
            started = [span for span in spans if span[0] <= line]
            if started and line <= started[-1][1] and not any(started[0][0] <= r < line for r in releases):
                out.append(("acquire", expr, taken))
        return out


def _segment(lines, span):
    """The source text of a span; columns count UTF-8 bytes, as the compiler's do."""
    first, col, last, end = span
    if not 0 < first <= last <= len(lines):
        return None
    if first == last:
        return lines[first - 1].encode("utf-8")[col:end].decode("utf-8", "replace")
    parts = [lines[first - 1].encode("utf-8")[col:]] + [line.encode("utf-8") for line in lines[first:last - 1]]
    return b"".join(parts + [lines[last - 1].encode("utf-8")[:end]]).decode("utf-8", "replace")


def _is_acquire(ast, call):
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "acquire"


def _source(frame):
    """What the source of the function a frame runs says (module code: its whole file), or None
    (no source, too large, or it does not parse). Read from the file itself (linecache without
    the module's loader: no import hook runs). Only the function is parsed where it can be cut
    out by its indentation, so a large file costs what one of its functions costs."""
    code = frame.f_code
    key = (code.co_filename, 0 if code.co_name == "<module>" else code.co_firstlineno)
    if key in _files:
        return _files[key]
    src = None
    try:
        import ast
        from earlylog.runtime import fds
        lines = fds.getlines(code.co_filename)  # linecache's, read through a high descriptor
        if key[1]:
            src = _parse(ast, _function_lines(lines, key[1]), key[1] - 1)
        if src is None and sum(len(line) for line in lines) <= MAX_SOURCE:
            src = _parse(ast, lines, 0)
    except Exception:  # a file changed under us, an odd encoding: nothing to add
        src = None
    if len(_files) >= MAX_FILES:
        _files.clear()
    _files[key] = src
    return src


def _function_lines(lines, first):
    """The lines of the function (or class) starting at line `first` (its decorator or `def`),
    or [] when its end cannot be told by indentation alone."""
    head = lines[first - 1] if 0 < first <= len(lines) else ""
    indent = head[:len(head) - len(head.lstrip(" \t"))]
    out, i, body = [head], first, False
    while i < len(lines):
        line, text = lines[i], lines[i].strip()
        deeper = line.startswith(indent) and len(line) - len(line.lstrip(" \t")) > len(indent)
        if text and not text.startswith("#") and not deeper:
            if body or not (text.startswith(("@", "def ", "async def ", "class ", ")", "]")) or
                            not out[-1].rstrip().endswith(":")):
                break
        body = body or (deeper and out[-1].rstrip().endswith(":"))
        out.append(line)
        i += 1
    return out if body else []


def _parse(ast, lines, offset):
    """_Source of these lines, which start at line offset + 1 and share their first line's
    indentation (dropped for the parse, added back to every column); None if they do not parse."""
    if not lines:
        return None
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip(" \t"))] if offset else ""
    if any(line.strip() and not line.startswith(indent) for line in lines):
        return None
    try:
        tree = ast.parse("".join(line[len(indent):] if line.strip() else "\n" for line in lines))
    except (SyntaxError, ValueError):
        return None
    if offset:
        ast.increment_lineno(tree, offset)
    return _Source(ast, tree, len(indent))


def _expr(lines, span):
    """(syntax tree, one-line text, names used) of the expression at a span, or None. Kept for the
    next dumps by its source text."""
    text = _segment(lines, span)
    if text is None:
        return None
    found = _exprs.get(text)
    if found is None:
        import ast
        if len(_exprs) >= MAX_EXPRS:
            _exprs.clear()
        try:
            node = ast.parse("(%s)" % text, mode="eval").body
        except (SyntaxError, ValueError):  # the file changed since it was read
            return None
        names = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                          if isinstance(n, (ast.Name, ast.Attribute)))
        found = _exprs[text] = (node, ast.unparse(node), names)
    return found


def _calls_at(frame):
    """(expression, attr, its text) of the call or `with` the frame is executing: the candidates
    at its line whose names the code object knows (a changed source file gives none) and, where
    the interpreter tells, whose columns are the current instruction's."""
    src = _source(frame)
    if src is None:
        return []
    from earlylog.runtime import fds
    code = frame.f_code
    lines = fds.getlines(code.co_filename)
    known = set(code.co_names) | set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    here = _instruction(frame)
    out = []
    for span, attr, site in src.calls.get(frame.f_lineno, ()):
        found = _expr(lines, span) if _at(here, span, attr, site) else None
        if found is not None and found[2] <= known:
            out.append((found[0], attr, found[1]))
    return out


def _instruction(frame):
    """(line, end line, col, end col) of the current instruction on 3.11+, its opcode name before."""
    code = frame.f_code
    try:
        if _POSITIONS:
            import itertools
            return next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
        import opcode
        return opcode.opname[code.co_code[frame.f_lasti]]
    except Exception:
        return None


def _at(here, span, attr, site):
    """Is the instruction `here` the call or `with` entry of this candidate?"""
    if here is None:
        return True
    if isinstance(here, str):
        return here == "SETUP_WITH" if attr == "with" else here.startswith("CALL")
    if None in here:
        return True
    start, end = (here[0], here[2]), (here[1], here[3])
    if attr == "with":  # 3.11-3.12: the whole statement; 3.13+: the item
        return start == site[:2] or span[:2] <= start and end <= span[2:]
    return start == site[:2] and end == site[2:]


def call_at(frame):
    """`time.sleep`, `sock.recv`: the attribute call the frame is executing, as its source writes
    it, or None (no source, or not such a call: `sleep(1)`, a `with` entry). Never raises."""
    try:
        found = [(text, attr) for _expr, attr, text in _calls_at(frame) if attr != "with"]
    except Exception:
        return None
    return "%s.%s" % found[-1] if found else None


def _held_at(frame):
    """What the frame holds at its current line. A function with no `with` or `acquire` between
    its start and that line holds nothing, and is not parsed at all (most library frames)."""
    from earlylog.runtime import fds
    code = frame.f_code
    key = 0 if code.co_name == "<module>" else code.co_firstlineno
    region = fds.getlines(code.co_filename)[max(key, 1) - 1:frame.f_lineno]
    if not any("with" in line or "acquire" in line for line in region):
        return []
    src = _source(frame)
    lines = fds.getlines(code.co_filename)
    return [(how, _expr(lines, span), line) for how, span, line in (src.held(key, frame.f_lineno) if src else ())]


def _name_of(frame, obj):
    """The expression at the frame's current call that is obj (by identity), or None."""
    if frame is None:
        return None
    for expr, _attr, text in _calls_at(frame):
        found, value = _resolve(expr, frame)
        if found and value is obj:
            return text
    return None


# --- reading values without running the program's code ----------------------------------------

def _resolve(expr, frame):
    """(True, value) of a name, attribute chain or constant/name-indexed subscript, read from
    dicts only; (False, None) when it cannot be read that way."""
    import ast
    if isinstance(expr, ast.Name):
        for scope in (frame_locals(frame), frame.f_globals, frame.f_builtins):
            if expr.id in scope:
                return True, scope[expr.id]
        return False, None
    if isinstance(expr, ast.Attribute):
        found, base = _resolve(expr.value, frame)
        return _attribute(base, expr.attr) if found else (False, None)
    if isinstance(expr, ast.Subscript):
        found, base = _resolve(expr.value, frame)
        if isinstance(expr.slice, ast.Constant):
            found_key, key = True, expr.slice.value
        else:
            found_key, key = _resolve(expr.slice, frame)
        if found and found_key and (type(key) is str or type(key) is int) and \
                (type(base) is dict or type(base) is list or type(base) is tuple):
            try:
                return True, base[key]
            except (KeyError, IndexError):
                pass
    return False, None


def frame_locals(frame):
    """A frame's locals, or {} when reading them fails (never raises)."""
    try:
        scope = frame.f_locals
    except Exception:
        return {}
    return scope if scope is not None else {}


def _local(frame, name):
    scope = frame_locals(frame)
    return scope[name] if name in scope else None


def _attribute(obj, name):
    """(True, value) of obj.name from its own dict, else a class's plain (non-descriptor) value or
    a __slots__ field; (False, None) for anything that would run code (property, __getattr__)."""
    if _isa(obj, type):
        owners = _mro(obj)
    else:
        own = _instance_dict(obj)
        if own is not None and name in own:
            return True, own[name]
        owners = _mro(type(obj))
    for klass in owners:
        space = _class_dict(klass)
        if name in space:
            value = space[name]
            if type(value) is _MEMBER and not _isa(obj, type):
                try:
                    return True, value.__get__(obj, type(obj))  # C: reads the slot
                except AttributeError:
                    return False, None
            return (False, None) if _lookup(type(value), "__get__") is not None else (True, value)
    return False, None


def _field(obj, name):
    """An object's own attribute from its instance dict, or None."""
    own = _instance_dict(obj)
    return own.get(name) if own is not None else None


def _instance_dict(obj):
    """obj's __dict__ through the standard descriptor only (never a class's own __dict__ property)."""
    descr = _lookup(type(obj), "__dict__")
    if type(descr) is not _GETSET and not (type(descr) is _MEMBER and _isa(obj, _MODULE)):
        return None
    try:
        own = descr.__get__(obj, type(obj))
    except Exception:
        return None
    return own if type(own) is dict else None


def _mro(cls):
    try:
        return type.__dict__["__mro__"].__get__(cls)
    except Exception:
        return ()


def _class_dict(cls):
    try:
        return type.__dict__["__dict__"].__get__(cls)
    except Exception:
        return {}


def _lookup(cls, name):
    for klass in _mro(cls):
        space = _class_dict(klass)
        if name in space:
            return space[name]
    return None


def _isa(obj, cls):
    """isinstance by identity in the MRO: never asks the object's __class__ or a metaclass's __eq__."""
    return any(k is cls for k in _mro(type(obj)))


def _stdlib(module, name):
    """A class of a stdlib module the program imported, or None (this module never imports them)."""
    cls = _module_dict(module).get(name)
    return cls if _isa(cls, type) else None


def _module_dict(name):
    return _instance_dict(sys.modules.get(name)) or {}


def _is_condition(obj):
    cls = _stdlib("threading", "Condition")
    return cls is not None and _isa(obj, cls)


def _thread_name(thread, ident):
    name = _field(thread, "_name") if thread is not None else None
    return name if type(name) is str else "0x%x" % ident



# What runtime/aio.py reads tasks with.
field, module_dict, isa, lookup, instance_dict = _field, _module_dict, _isa, _lookup, _instance_dict
