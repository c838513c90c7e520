"""Who holds a lock, and the source analysis that tells it. For a thread waiting on a lock or
semaphore, the `held by:` lines (written through grammar/notes.py): an RLock's owner; a thread
whose frames sit inside a `with` block on it, or past an `acquire()` with no `release()` since;
not a thread inside Condition.wait(), which gave it back. It owns the reading of the program's
source for that: the calls, `with` items and `acquire()` statements of the functions on the
stacks (where they are, by line and column: _Source), the expression a frame's current call is
made on (calls_at, and call_at's `time.sleep` for runtime/aio.py), and what each frame holds
(held_in, also read for greenlets by runtime/greenlets.py).
It runs in the watchdog thread at dump time only. It must never run the program's code: values
are read only through runtime/introspect.py (objects by identity and exact type), and source
through linecache from the file (runtime/fds.py: no import hook or loader runs). It never
blocks and never raises; what cannot be known is left out. Its cost falls on dumps only: the
first one parses the functions on the stacks (runtime/syntax.py: `ast`'s pieces on `_ast`); what
the sources say is kept for the next dumps (line and column numbers only, never a syntax tree)."""
import sys

from earlylog.grammar import notes as grammar
from earlylog.runtime import introspect, syncs, threads as our_threads

MAX_FRAMES = 40       # frames looked at per thread, as in the dump itself
MAX_SOURCE = 2000000  # characters: a larger file is parsed a function at a time only
MAX_FILES = 64        # source files whose findings are kept between dumps
MAX_EXPRS = 512       # expression texts whose syntax trees are kept between dumps
MAX_HOLDERS = 5       # `held by:` lines for one semaphore

_POSITIONS = sys.version_info >= (3, 11)        # code objects know each instruction's columns
_files = {}  # (filename, function's first line or 0) -> _Source, or None when it cannot be parsed
_exprs = {}  # expression source text -> (syntax tree, one-line text, names)
_memo = [None, None]  # the last dump's stacks (as ids) and what each thread holds


# --- who holds a lock ------------------------------------------------------------------------

def holder_lines(ident, obj, frames, threads):
    """`held by:` lines for a lock or semaphore this thread waits for."""
    targets = {id(obj)}
    if syncs.is_condition(obj):
        targets.add(id(introspect.field(obj, "_lock")))
    owner = syncs.rlock_owner(introspect.field(obj, "_lock") if syncs.is_condition(obj) else obj)
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
            who = grammar.thread(introspect.thread_name(threads.get(tid), tid), tid)
        elif type(obj) is syncs.LOCK or type(introspect.field(obj, "_lock")) is syncs.LOCK:
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
        _memo[:] = [signature, {tid: (held_in(top), _released_in_wait(top)) for tid, top in frames.items()
                                if tid != me}]
    return _memo[1]


def _released_in_wait(frame):
    """A thread inside Condition.wait() has given the condition's lock back, though the `with`
    block around the call is still open: the ids of that condition and its lock."""
    while frame is not None:
        seen = syncs.sync_frame(frame)
        if seen is None:
            break
        kind, this = seen
        if kind == "condition":
            return {id(this), id(introspect.field(this, "_lock"))}
        frame = frame.f_back
    return set()


def held_in(frame, depth=MAX_FRAMES):
    """[(`; with block at FILE:LINE in FUNC` text, ids held)] for each frame holding something, of
    the `depth` frames from frame outwards."""
    out = []
    for _ in range(depth):
        if frame is None:
            break
        for how, expr, line in _held_at(frame):
            found, value = introspect.resolve(expr[0], frame) if expr else (False, None)
            if found:
                ids = {id(value)} | ({id(introspect.field(value, "_lock"))} if syncs.is_condition(value) else set())
                out.append((_where_text(how, frame, line), ids))
        frame = frame.f_back
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
            if isinstance(child, (ast.With, ast.AsyncWith)) and child.body:
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
        from earlylog.runtime import syntax as ast
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
        from earlylog.runtime import syntax as ast
        if len(_exprs) >= MAX_EXPRS:
            _exprs.clear()
        try:
            node = ast.parse("(%s)" % text, mode="eval").body
        except (SyntaxError, ValueError):  # the file changed since it was read
            return None
        names = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                          if isinstance(n, (ast.Name, ast.Attribute)))
        found = _exprs[text] = (node, ast.unparse(node) or " ".join(text.split()), names)
    return found


def calls_at(frame, anywhere=False):
    """(expression, attr, its text) of the call or `with` the frame is executing: the candidates
    at its line whose names the code object knows (a changed source file gives none) and, where
    the interpreter tells, whose columns are the current instruction's (any of its line's when
    `anywhere`: a suspended coroutine's instruction is its await's, not its call's)."""
    src = _source(frame)
    if src is None:
        return []
    from earlylog.runtime import fds
    code = frame.f_code
    lines = fds.getlines(code.co_filename)
    known = set(code.co_names) | set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    here = None if anywhere else _instruction(frame)
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
        found = [(text, attr) for _expr, attr, text in calls_at(frame) if attr != "with"]
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
