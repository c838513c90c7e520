"""The grammar of a dump's notes: the plain-words lines the runtime writes under a thread (`waits
for:`, `held by:`, `joins:`, `child:`, `pipe:`, `socket:`, `file lock:`, ...) and the reader reads
back. It owns each kind's words: its writer (formats the line, indented as a dump's notes are) and
its parser (the line, stripped as the reader keeps it, to a small typed value), side by side, one
entry per kind, so a reworded note is reworded on both sides at once (tests/test_notes.py).
Most writers give the whole note; those whose words are also used elsewhere give the words, and
a `*_line` writer (or INDENT) the note: busy()/blocked() (the stall line quotes them), child(),
socket(). A parsed value is shared by every reader of the same text (parse() keeps them by text):
read it, never change it. It must never look at the program, read a file or raise from a writer,
and must stay cheap to import: the runtime loads it at its first dump only, never on the start path
nor at the watchdog's beats; `re` is compiled on the reader's first parse. Standard library only.

The kinds, their lines, and who writes them:
  state (kstate.py)        blocked: WHAT[ [kernel: WCHAN]] | busy: running on a CPU[ (N% of a core)]
  waits for (waits.py)     waits for: KIND NAME (TYPE at 0xADDR[, DETAIL])
  held by (holders.py)     held by: WHO[; with block at FILE:LINE in FUNC | ; acquire() at FILE:LINE in FUNC,
                           not released since]   WHO: thread NAME (ident 0xID) | this thread itself |
                           an unknown thread | a thread no longer running (ident 0xID)
  joins (waits.py)         joins: thread NAME (ident 0xID)
  set by (waits.py)        set by: the SIGNAL handler FUNC at FILE:LINE
  in signal handler        in signal handler: SIGNAL, FUNC at FILE:LINE
  handles (stacks.py)      handles: SIGNAL with FUNC at FILE:LINE[; ...]
  phase (stacks.py)        phase: TEXT
  terminal (terminal.py)   terminal: waiting for input at the terminal (WHAT)
  cell (cells.py)          cell: In[N] is PATH
  handling (retries.py)    handling: ERROR[: TEXT][, raised in FUNC at FILE:LINE][, connecting to ADDRESS]
  retries (retries.py)     retries: N failures seen in the last S s
  asyncio (stacks.py)      asyncio: N pending task(s) on this thread's event loop[; it serves ADDRESSES]
  task (stacks.py)         task NAME: FILE:LINE in CORO > ... > awaiting WHAT   (indented four spaces;
                           WHAT for asyncio's own lock, event, semaphore or queue: awaits_sync())
  running (aio.py)         running task: NAME (CORO): FILE:LINE in FUNC[; calls CALL] | running callback: FILE:LINE
                           in FUNC[; calls CALL]
  dead task (aio.py)       dead task: NAME (CORO): FILE:LINE in FUNC > ...; raised EXC[; waited on by task A, task B]
  greenlets (greenlets.py) greenlets: N waiting on this thread's LIB hub[, M listed] | greenlets: not listed (WHY)
  greenlet (greenlets.py)  greenlet: NAME: FILE:LINE in FUNC > ... > waits on KIND[ `EXPR`][ (TYPE)][; held by
                           greenlet NAME; with block at FILE:LINE in FUNC | ; socket: SOCKET'S WORDS]
  child (children.py)      child: pid N (COMMAND), state S (WORDS)[REST] | child: pid N[ (COMMAND)]: gone (it exited)
  pipe (peers.py)          pipe: fd N (STREAM), LINK[, full|not full (Q of C bytes)]; OTHER END
  stdin (peers.py)         stdin: fd 0, LINK; OTHER END[; unfinished output line: "TEXT"]
  reads (peers.py)         reads: fd N[ (STREAM)], LINK; OTHER END
  socket (peers.py)        socket: fd N CALL, TCP LOCAL -> REMOTE, STATE, client|server[; DETAIL]
  file lock (filelocks.py) file lock: PATH (flock|fcntl|filelock|sqlite); HOLDERS
  nothing completes        nothing completes: what task NAME awaits (no other task, callback, reader or thread
    (reach.py)             refers to it)
  can change it (reach.py) can change it: thread NAME (ident 0xID)[, ...] | no other thread (N read, none
                           refers to it)[; after its join: thread NAME (ident 0xID)[, ...]]
  OTHER END: `other end held by pid N (COMMAND)[, pid M (COMMAND)]`, `... by this process`, `no process found
      holding the other end`, `other end not known`; ` (search cut short)` when the search stopped early
  HOLDERS: `held by pid N (COMMAND)[, ...]`, `... by this process`, `no process holds a lock on it`,
      `held by an open file description lock (no pid)`, `holders not known (WHY)`
  A socket's CALL: connecting, receiving, sending, waiting (in poll); STATE as /proc/net/tcp names it;
  an asyncio task's client read ends `; awaited in FUNC at FILE:LINE`. A child's REST: see child()."""

from earlylog.grammar.patterns import Patterns

INDENT = "  "
SERVER_READ = "a request on a connection its server accepted"  # what an idle server's handler awaits

ITSELF = "this thread itself"
UNKNOWN_HOLDER = "an unknown thread"
_STREAMS = {0: "stdin", 1: "stdout", 2: "stderr"}


class Note:
    """A parsed note: its fields, in __slots__ order; equal when of one kind with equal fields."""
    __slots__ = ()
    __hash__ = None

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def astuple(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def asdict(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __eq__(self, other):
        return type(self) is type(other) and self.astuple() == other.astuple()

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % pair for pair in self.asdict().items()))


# --- the words shared by several kinds ---------------------------------------------------------

def thread(name, ident):
    """`thread worker (ident 0x7f..)`: a thread as `held by:` and `joins:` name it."""
    return "thread %s (ident 0x%x)" % (name, ident)


def gone_thread(ident):
    return "a thread no longer running (ident 0x%x)" % ident


def fd_name(fd):
    """`fd 1 (stdout)`, `fd 7`."""
    return "fd %d%s" % (fd, " (%s)" % _STREAMS[fd] if fd in _STREAMS else "")


def fill(used, size):
    """`, full (65536 of 65536 bytes)`: how much of a pipe's buffer waits to be read ('' unknown)."""
    return ", %s (%d of %d bytes)" % ("full" if used >= size * 0.9 else "not full", used, size)


def quote(text):
    """A program's unfinished output line, quoted, the last 120 characters."""
    text = text if len(text) <= 120 else "..." + text[-117:]
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


# --- state: the kernel's words for a thread (kstate.py) ------------------------------------------

class State(Note):
    """`blocked: WHAT [kernel: WCHAN]` or `busy: ...`; text: the whole note, as readers quote it."""
    __slots__ = ("busy", "what", "kernel", "text")

    @property
    def doing(self):
        """What a blocked thread does, in a few words, without its parenthesis: `sleeping`."""
        return "" if self.busy else _re("parenthesis").sub("", self.what)

    @property
    def in_kernel(self):
        """A busy thread's share of its CPU time spent in the kernel (percent), where busy() named it."""
        m = _re("in kernel").search(self.what) if self.busy else None
        return int(m.group(1)) if m else None


def busy(share=None, in_kernel=None):
    """`busy: running on a CPU (100% of a core, 86% of its time in the kernel)`: in_kernel, the
    share of the thread's CPU time spent in system calls, where it is large: a spin on sched_yield
    or a poll loop looks so, arithmetic does not."""
    parts = [] if share is None else ["%d%% of a core" % round(share * 100)]
    if in_kernel is not None:
        parts.append("%d%% of its time in the kernel" % round(in_kernel * 100))
    return "busy: running on a CPU%s" % (" (%s)" % ", ".join(parts) if parts else "")


def blocked(what, wchan=""):
    return "blocked: %s%s" % (what, " [kernel: %s]" % wchan if wchan and wchan != "0" else "")


def _state(text):
    if text.startswith("busy:"):
        return State(True, text[len("busy:"):].strip(), None, text)
    what, _, kernel = text[len("blocked:"):].strip().partition(" [kernel")
    return State(False, what, kernel[2:-1] if kernel else None, text)


# --- waits.py: what a thread waits for ------------------------------------------------------------

class WaitsFor(Note):
    """kind: lock, semaphore, condition, event, queue, barrier, future, import; name: as the code
    names it (None: `?`); type: `threading.Lock`; detail: `get`, `2 free`, `join, 2 unfinished, 0 queued`."""
    __slots__ = ("kind", "name", "type", "address", "detail")

    @property
    def unfinished(self):
        """N of a Queue.join() detail `join, N unfinished, 0 queued` (an empty queue), else None."""
        parts = (self.detail or "").split(", ")
        if len(parts) == 3 and parts[0] == "join" and parts[2] == "0 queued" and parts[1].endswith(" unfinished"):
            count = parts[1][:-len(" unfinished")]
            return int(count) if count.isdigit() else None
        return None


def waits_for(kind, name, label, detail=None):
    """label: `TYPE at 0xADDR[, DETAIL OF THE OBJECT]`; detail: more after it (a queue's call)."""
    return "%swaits for: %s %s (%s%s)" % (INDENT, kind, name or "?", label, ", " + detail if detail else "")


class HeldBy(Note):
    """Who holds the lock a thread waits for: name and ident (a thread), self (this thread itself),
    gone (the ident of an ended thread); how (`with block`, `acquire()`), file, line, func: where."""
    __slots__ = ("name", "ident", "self", "gone", "how", "file", "line", "func")


def held_by(who, where=""):
    """who: thread(), ITSELF, UNKNOWN_HOLDER or gone_thread(); where: held_where() or ''."""
    return "%sheld by: %s%s" % (INDENT, who, where)


def held_where(how, filename, line, function):
    """How and where a holder took the lock: how is `with` or `acquire`."""
    if how == "with":
        return "; with block at %s:%d in %s" % (filename, line, function)
    return "; acquire() at %s:%d in %s, not released since" % (filename, line, function)


class Joins(Note):
    __slots__ = ("name", "ident")


def joins(name, ident):
    return "%sjoins: %s" % (INDENT, thread(name, ident))


class SetBy(Note):
    """An event one of the program's signal handlers sets: `the SIGTERM handler stop at a.py:3`."""
    __slots__ = ("signal", "handler")

    @property
    def text(self):
        return "the %s handler %s" % (self.signal, self.handler)


def set_by(signal, handler):
    return "%sset by: %s" % (INDENT, SetBy(signal, handler).text)


class InSignalHandler(Note):
    """A lock wait inside a handler of the program's: text `SIGALRM, flush at m.py:6`."""
    __slots__ = ("signal", "handler")

    @property
    def text(self):
        return "%s, %s" % (self.signal, self.handler)


def in_signal_handler(signal, handler):
    return "%sin signal handler: %s" % (INDENT, InSignalHandler(signal, handler).text)


class Handles(Note):
    """A main thread waiting for a signal and the handlers it has: [(signal, handler)]."""
    __slots__ = ("handlers",)

    @property
    def text(self):
        return "; ".join("%s with %s" % pair for pair in self.handlers)


def handles(pairs):
    return "%shandles: %s" % (INDENT, Handles(pairs).text)


# --- stacks.py, terminal.py, cells.py, retries.py: a thread's other notes -------------------------

class Phase(Note):
    __slots__ = ("text",)


def phase(text):
    return "%sphase: %s" % (INDENT, text)


class Terminal(Note):
    """text: `waiting for input at the terminal (input())`."""
    __slots__ = ("text",)


def terminal(words, what):
    return "%sterminal: %s (%s)" % (INDENT, words, what)


class Cell(Note):
    """A notebook cell on the stack: name `In[3]`, the path IPython compiled it under."""
    __slots__ = ("name", "path")


def cell(number, path):
    return "%scell: In[%d] is %s" % (INDENT, number, path)


class Handling(Note):
    """The exception a thread handles now: error (`ConnectionRefusedError`), text, raised
    (`connect at client.py:14`), target (the address a failed connect was for); words: all of it."""
    __slots__ = ("error", "text", "raised", "target", "words")


def handling(words):
    """words: retries.describe()'s `ERROR[: TEXT][, raised in PLACE][, connecting to ADDRESS]`."""
    return "%shandling: %s" % (INDENT, words)


class Retries(Note):
    __slots__ = ("count", "seconds")


def retries(count, seconds):
    return "%sretries: %d failures seen in the last %.1f s" % (INDENT, count, seconds)


class Asyncio(Note):
    """count: the loop's pending tasks (None when the list changed while read); serves: addresses."""
    __slots__ = ("count", "serves")


def asyncio(count, serving=()):
    return "%sasyncio: %d pending task%s on this thread's event loop%s" % (
        INDENT, count, "" if count == 1 else "s", "; it serves " + " ".join(serving) if serving else "")


ASYNCIO_CHANGED = INDENT + "asyncio: the task list changed while being read"


class Task(Note):
    """A pending task: name, frames innermost first [(file, line, coroutine)], awaiting (or None)."""
    __slots__ = ("name", "frames", "awaiting")


TASK = INDENT + "  task "  # how a task's line starts: under the asyncio note, four spaces in


def task(name, chain):
    """chain: `FILE:LINE in CORO` texts outermost first, then `awaiting WHAT`."""
    return "%s%s: %s" % (TASK, name, " > ".join(chain))


THIS_TASK = "this task"


def awaits_sync(kind, name, holder=None, where="", detail=None):
    """An await chain's WHAT when its bare Future is asyncio's own lock, event, condition, semaphore
    or queue: `asyncio.Lock `lock`[, held by this task|task NAME[WHERE]][, DETAIL]`; WHERE as
    held_where() writes it; DETAIL: `N free` (a semaphore), `empty`, `full` or `join, N unfinished,
    M queued` (a queue)."""
    text = "asyncio.%s `%s`" % (kind, name or "?")
    if holder:
        text += ", held by %s%s" % (holder, where)
    return text + (", " + detail if detail else "")


class AwaitsSync(Note):
    """What parse_awaits_sync() reads: kind (`Lock`), name (`self._lock`, None if not known),
    holder (THIS_TASK, `task NAME`, or None), how (`with` or `acquire`), file, line, func: where
    the holder took it; detail (`empty`, `0 free`, ...) or None; unfinished, a Queue.join's count."""
    __slots__ = ("kind", "name", "holder", "how", "file", "line", "func", "detail", "unfinished")


def parse_awaits_sync(what):
    """An AwaitsSync of an await chain's WHAT, or None for any other."""
    m = _re("awaits sync").match(what or "")
    if m is None:
        return None
    how = m.group("how") and ("with" if m.group("how") == "with block" else "acquire")
    return AwaitsSync(m.group("kind"), None if m.group("name") == "?" else m.group("name"), m.group("holder"), how,
                      m.group("file"), _int(m.group("line")), m.group("func"), m.group("detail"),
                      _int(m.group("unfinished")))


def frame(filename, line, function):
    """`FILE:LINE in FUNC`: one frame of an await chain, a greenlet's chain, a running task's place."""
    return "%s:%d in %s" % (filename, line, function)


# --- a dump's frame of structure (stacks.py): each thread's head line, then its notes and frames ---

class Head(Note):
    """A dump's thread head: name, tid (int, or None where it was not known), ident (`0x7f..`),
    daemon (True or False) and main (True for the main thread)."""
    __slots__ = ("name", "tid", "ident", "daemon", "main")


def thread_head(name, tid, ident, daemon, main):
    """`thread NAME (tid N, ident 0xID, daemon|not daemon[, main])`: the first line of a thread's
    part of a dump (a name may hold spaces and brackets; tid `?` where it is not known)."""
    return "thread %s (tid %s, ident 0x%x, %s%s)" % (name, tid or "?", ident, "daemon" if daemon else "not daemon",
                                                      ", main" if main else "")


def head(text):
    """thread_head()'s line as a Head, else None (faulthandler's heads and tracebacks are not ours)."""
    m = _re("head").match(text)
    if m is None:
        return None
    tid = m.group("tid")
    return Head(m.group("name"), int(tid) if tid != "?" else None, m.group("ident"), m.group("daemon") == "daemon",
                m.group("main") is not None)


def frame_line(filename, line, function, source=""):
    """One frame under a thread's head, innermost first: `  FILE:LINE in FUNC[: SOURCE]`."""
    return "%s%s%s" % (INDENT, frame(filename, line, function), ": " + source if source else "")


def parse_frame_line(line):
    """(file, line, function, source or None) of frame_line()'s line, else None. A note's line
    (`  held by: ... at a.py:3 in f`) and a task's are not frames, whatever their words hold."""
    if _re("note line").match(line) or line.startswith(TASK):
        return None
    m = _re("frame line").match(line)
    return (m.group(1), int(m.group(2)), m.group(3), m.group(4)) if m else None


# --- aio.py: what an event loop's thread runs, and its tasks that died unheard ---------------------

class Running(Note):
    """The loop is inside a task's step (how `task`: task, coro) or a callback's (how `callback`):
    file, line, func of its innermost coroutine frame; call: the call it makes there, or None."""
    __slots__ = ("how", "task", "coro", "file", "line", "func", "call")


def running_task(name, coro, place, call=None):
    """place: frame()'s words; call: `time.sleep`, as the source writes it."""
    return "%srunning task: %s (%s): %s%s" % (INDENT, name, coro, place, "; calls " + call if call else "")


def running_callback(place, call=None):
    return "%srunning callback: %s%s" % (INDENT, place, "; calls " + call if call else "")


class DeadTask(Note):
    """A task that died with an exception nobody retrieved: task, coro, frames of its traceback
    outermost first [(file, line, function)], exc (`ValueError('bad row')`), waiters (task names)."""
    __slots__ = ("task", "coro", "frames", "exc", "waiters")


def dead_task(name, coro, places, exc, waiters=()):
    """places: frame()'s words, outermost first; waiters: the names of the tasks waiting on it."""
    return "%sdead task: %s (%s): %s; raised %s%s" % (
        INDENT, name, coro, " > ".join(places) or "?", exc,
        "; waited on by " + ", ".join("task " + w for w in waiters) if waiters else "")


# --- greenlets.py: a hub's waiting greenlets --------------------------------------------------------

class Greenlets(Note):
    """count: greenlets waiting on the hub (None: not listed, for reason), lib (gevent, eventlet)."""
    __slots__ = ("count", "lib", "reason")


def greenlets(count, lib, listed=None):
    return "%sgreenlets: %d waiting on this thread's %s hub%s" % (
        INDENT, count, lib, ", %d listed" % listed if listed is not None else "")


def greenlets_unlisted(reason):
    return "%sgreenlets: not listed (%s)" % (INDENT, reason)


class Greenlet(Note):
    """One waiting greenlet: name, frames innermost first, wait (`waits on lock `self.lock`
    (gevent.lock.Semaphore)`), its kind (`queue get`), expr and type (or None), holder and how
    (the greenlet holding a lock it waits on, and `with block at ...`), socket (socket()'s words)."""
    __slots__ = ("name", "frames", "wait", "kind", "expr", "type", "holder", "how", "socket")


def greenlet(name, places, wait, more=""):
    """places: frame()'s words, outermost first; wait: `waits on KIND ...`; more: greenlet_holder()
    or greenlet_socket()."""
    return "%sgreenlet: %s: %s%s" % (INDENT, name, " > ".join(list(places) + [wait]), more)


def waits_on(kind, expr=None, label=None):
    """A greenlet's wait: `waits on lock `self.lock` (gevent.lock.Semaphore)`, `waits on sleep (gevent)`."""
    return "waits on %s%s%s" % (kind, " `%s`" % expr if expr is not None else "", " (%s)" % label if label else "")


def waits_in(function):
    """A greenlet's wait whose kind is not known: the function its innermost frame runs."""
    return "waits in " + function


def greenlet_holder(name, where):
    """where: held_where()'s words."""
    return "; held by greenlet %s%s" % (name, where)


def greenlet_socket(text):
    return "; socket: " + text


# --- peers.py, children.py, filelocks.py: the process at the other end ---------------------------

class Child(Note):
    """A child a thread waits for: pid, command, state letter and words (None: gone), rest (`, blocked
    writing to ...`, `; its stdout pipe is still held open by ...`); writes: (stream, `full` or `not
    full`, bytes, capacity, only) when it is blocked writing to a pipe this process reads; reads_stdin:
    None, or `only` when it is blocked reading a stdin this process writes; held_open: [(`stdout pipe
    is`..., holders text)]."""
    __slots__ = ("pid", "command", "state", "words", "rest", "writes", "reads_stdin", "held_open")


def child(pid, command, state, words, rest=""):
    """The words after `child: `; rest: `, exited: ...`, `, blocked writing to fd 1 (stdout), pipe:[9],
    full (Q of C bytes), which only this process reads`, `, WHAT [kernel: WCHAN]`, `; its stdout pipe
    is still held open by ...`."""
    return "pid %d (%s), state %s (%s)%s" % (pid, command, state, words, rest)


def child_gone(pid, given=""):
    return "pid %d%s: gone (it exited)" % (pid, " (%s)" % given if given else "")


def child_line(words):
    """The note of child()'s or child_gone()'s words."""
    return "%schild: %s" % (INDENT, words)


def child_fd(name, fd, link, used_size=None, only=None):
    """A child's blocked read or write: `, blocked writing to fd 1 (stdout), pipe:[9][, full (...)]
    [, which only this process reads]`; only: None when this process holds no end of that pipe."""
    text = ", blocked %s %s, %s" % ("writing to" if name == "write" else "reading", fd_name(fd), link or "a closed fd")
    if only is None:
        return text
    if used_size:
        text += fill(*used_size)
    return text + ", which %sthis process %s" % ("only " if only else "", "reads" if name == "write" else "writes")


def held_open(held):
    """`; its stdout pipe is still held open by pid 812 (sleep 3600)`; held: [(stream, holders text)]."""
    if len(held) == 2 and held[0][1] == held[1][1]:
        return "; its stdout and stderr pipes are still held open by " + held[0][1]
    return "".join("; its %s pipe is still held open by %s" % one for one in held)


class Pipe(Note):
    """A write to a pipe or socket: fd, stream (`stdout`, `stderr`, or None for another fd), link kind
    (`pipe`, `socket`), fullness (`full`, `not full` or None), used (`Q of C bytes` or None), other
    (the other end's words)."""
    __slots__ = ("fd", "stream", "link", "fullness", "used", "other")


def pipe(fd, link, used_size, other):
    return "%spipe: %s, %s%s; %s" % (INDENT, fd_name(fd), link, fill(*used_size) if used_size else "", other)


class Stdin(Note):
    """A read from stdin: link kind, other (the other end's words), prompt (quoted, or None)."""
    __slots__ = ("link", "other", "prompt")


def stdin(link, other, prompt=None):
    return "%sstdin: fd 0, %s; %s%s" % (INDENT, link, other, "; unfinished output line: " + quote(prompt)
                                        if prompt else "")


class Reads(Note):
    __slots__ = ("other",)


def reads(fd, link, other):
    return "%sreads: %s, %s; %s" % (INDENT, fd_name(fd), link, other)


def other_end(holders, complete=True):
    """OTHER END: holders are `pid N (COMMAND)` or `this process` texts (empty: none found)."""
    cut = "" if complete else " (search cut short)"
    if not holders:
        return "no process found holding the other end" + cut
    return "other end held by %s%s" % (", ".join(holders), cut)


def who(pid, command):
    return "pid %d (%s)" % (pid, command or "?")


class Socket(Note):
    """call (`connecting`, `receiving`, `sending`, `waiting`), local, remote, state (`SYN_SENT`),
    role (`client`, `server`), detail (`SYN sent 4 times`, `N bytes received unread, M unsent`, ...)."""
    __slots__ = ("call", "local", "remote", "state", "role", "detail")

    @property
    def unread(self):
        """(bytes received unread, bytes unsent) from the detail, or None."""
        m = _re("unread").match(self.detail or "")
        return (int(m.group(1)), int(m.group(2))) if m else None


def socket(fd, call, local, remote, state, role, detail=None):
    """The words after `socket: ` (stacks.py adds `; awaited in ...` to an asyncio client's)."""
    return "fd %d %s, TCP %s -> %s, %s, %s%s" % (fd, call, local, remote, state, role, "; " + detail if detail else "")


def socket_line(text):
    return "%ssocket: %s" % (INDENT, text)


def awaited(text, place):
    """socket()'s words for an asyncio task's client read, and where the task awaits it."""
    return "%s; awaited in %s" % (text, place)


def syn_sent(retries):
    return "SYN sent %d time%s" % (retries + 1, "" if retries == 0 else "s")


def queued(unread, unsent):
    return "%d bytes received unread, %d unsent" % (unread, unsent)


class FileLock(Note):
    """path, how (flock, fcntl, filelock, sqlite), who (the holders' words)."""
    __slots__ = ("path", "how", "who")


def file_lock(path, how, holders):
    return "%sfile lock: %s (%s); %s" % (INDENT, path, how, holders)


# --- the reader's side: one parse per note text ----------------------------------------------------

_PATTERNS = {
    "waits for": r"^(?P<kind>[a-z]+) (?P<name>.+?) \((?P<type>[\w.]+) at (?P<address>0x[0-9a-f]+)"
                 r"(?:, (?P<detail>[^)]*))?\)$",
    "held by": r"^(?:thread (?P<name>.+?) \(ident (?P<ident>0x[0-9a-f]+)\)|(?P<self>this thread "
               r"itself)|a thread no longer running \(ident (?P<gone>0x[0-9a-f]+)\)|an unknown thread)"
               r"(?:; (?P<how>with block|acquire\(\)) at (?P<file>.+):(?P<line>\d+) in (?P<func>\S+?)"
               r"(?:, not released since)?)?$",
    "joins": r"^thread (?P<name>.+?) \(ident (?P<ident>0x[0-9a-f]+)\)$",
    "set by": r"^the (\S+) handler (.+)$",
    "cell": r"^(In\[\d+\]) is (.+)$",
    "handling": r"^(?P<error>[\w.]+)(?:: (?P<text>.*?))?(?:, raised in (?P<raised>\S+ at \S+:\d+))?"
                r"(?:, connecting to (?P<target>\S+))?$",
    "retries": r"^(\d+) failures seen in the last ([\d.]+) s$",
    "asyncio": r"^(\d+) pending task.*?(?:; it serves (.+))?$",
    "head": r"^thread (?P<name>.*) \(tid (?P<tid>\d+|\?), ident (?P<ident>0x[0-9a-f]+), "
            r"(?P<daemon>daemon|not daemon)(?P<main>, main)?\)$",
    # INDENT, then a kind's words and `: `: a note, never a frame (stripped, as parse() reads it)
    "note line": r"^  [a-z][a-z ]*: ",
    "frame line": r"^\s*(\S.*?):(\d+) in (\S+?)(?:: (.*))?\s*$",
    "task": r"^task (\S+): (.*)$",
    "awaits sync": r"^asyncio\.(?P<kind>\w+) `(?P<name>[^`]*)`(?:, held by (?P<holder>this task|task \S+)"
                   r"(?:; (?P<how>with block|acquire\(\)) at (?P<file>.+?):(?P<line>\d+) in (?P<func>\S+?)"
                   r"(?:, not released since)?)?)?(?:, (?P<detail>(?:join, (?P<unfinished>\d+) unfinished, \d+ queued|.+)))?$",
    "frame": r"^(.*):(\d+) in (\S+)$",
    "running": r"^(?P<task>\S+) \((?P<coro>[^)]*)\): (?P<file>.+):(?P<line>\d+) in (?P<func>\S+?)(?:; calls (?P<call>.+))?$",
    "callback": r"^(?P<file>.+):(?P<line>\d+) in (?P<func>\S+?)(?:; calls (?P<call>.+))?$",
    "dead task": r"^(?P<task>\S+) \((?P<coro>[^)]*)\): (?P<chain>.*?); raised (?P<exc>.*?)"
                 r"(?:; waited on by (?P<waiters>task \S+(?:, task \S+)*))?$",
    "greenlets": r"^(\d+) waiting on this thread's (\w+) hub",
    "greenlet": r"^(?P<name>[^:]+): (?:(?P<chain>.*?) > )?(?P<wait>waits (?:on|in) .*?)"
                r"(?:; held by greenlet (?P<holder>\S+); (?P<how>.*)|; socket: (?P<socket>.*))?$",
    "greenlet wait": r"^waits on (?P<kind>[a-z]+(?: (?:get|put|join|recv\w*|send\w*|accept|connect\w*|\w+))?)"
                     r"(?: `(?P<expr>[^`]*)`)?(?: \((?P<type>[^)]*)\))?$",
    "child": r"^pid (\d+) \((.*?)\), state (\S) \(([^)]*)\)(.*)$",
    "child gone": r"^pid (\d+)(?: \((.*)\))?: gone \(it exited\)$",
    "child writes": r"blocked writing to fd \d+ \((stdout|stderr)\), pipe:\[\d+\], (full|not full) "
                    r"\((\d+) of (\d+) bytes\), which (only )?this process reads",
    "child stdin": r"blocked reading fd 0 \(stdin\), pipe:\[\d+\], which (only )?this process writes",
    "held open": r"; its (stdout pipe is|stderr pipe is|stdout and stderr pipes are) still held open by "
                 r"(.*?)(?=; its |$)",
    "pipe": r"^fd (\d+)(?: \((\w+)\))?, (pipe|socket):\[\d+\](?:, (full|not full) \((\d+ of \d+ bytes)\))?; (.*)$",
    "stdin": r'^fd 0, (pipe|socket):\[\d+\]; (.*?)(?:; unfinished output line: (".*"))?$',
    "reads": r"^fd \d+(?: \(\w+\))?, pipe:\[\d+\]; (.*)$",
    "socket": r"^fd \d+ (\w+), TCP (\S+) -> (\S+), (\w+), (client|server)(?:; (.*))?$",
    "file lock": r"^(?P<path>.+) \((?P<how>flock|fcntl|filelock|sqlite)\); (?P<who>.*)$",
    "holder": r"pid (\d+) \((.*?)\)(?:, |$| \()",
    "parenthesis": r" \([^)]*\)$",
    "in kernel": r"(\d+)% of its time in the kernel",
    "unread": r"(\d+) bytes received unread, (\d+) unsent",
}
_re = Patterns(_PATTERNS)
_parsed = {}  # note text -> its value: a dump of 40 threads is read by several causes
MAX_PARSED = 4096


def _int(text):
    return int(text) if text is not None else None


def _waits_for(body):
    m = _re("waits for").match(body)
    if m is None:
        return None
    g = m.groupdict()
    return WaitsFor(g["kind"], g["name"], g["type"], g["address"], g["detail"])


def _held_by(body):
    m = _re("held by").match(body)
    if m is None:
        return None
    g = m.groupdict()
    return HeldBy(g["name"], g["ident"], bool(g["self"]), g["gone"], g["how"], g["file"], _int(g["line"]), g["func"])


def _joins(body):
    m = _re("joins").match(body)
    return Joins(m.group("name"), m.group("ident")) if m else None


def _set_by(body):
    m = _re("set by").match(body)
    return SetBy(m.group(1), m.group(2)) if m else None


def _in_signal_handler(body):
    signal, sep, handler = body.partition(", ")
    return InSignalHandler(signal, handler) if sep else None


def _handles(body):
    return Handles([tuple(part.split(" with ", 1)) if " with " in part else (part, "")
                    for part in body.split("; ")])


def _cell(body):
    m = _re("cell").match(body)
    return Cell(m.group(1), m.group(2)) if m else None


def _handling(body):
    m = _re("handling").match(body)
    if m is None:
        return Handling(body.partition(":")[0], None, None, None, body)
    return Handling(m.group("error"), m.group("text"), m.group("raised"), m.group("target"), body)


def _retries(body):
    m = _re("retries").match(body)
    return Retries(int(m.group(1)), float(m.group(2))) if m else None


def _asyncio(body):
    m = _re("asyncio").match(body)
    return Asyncio(int(m.group(1)), m.group(2)) if m else Asyncio(None, None)


def chain_frames(parts):
    """[(file, line, function)] of `FILE:LINE in FUNC` texts (an await chain's, a greenlet's)."""
    return [(f.group(1), int(f.group(2)), f.group(3)) for f in map(_re("frame").match, parts) if f]


def _task(text):
    m = _re("task").match(text)
    if m is None:
        return None
    parts = m.group(2).split(" > ")
    awaiting = parts.pop()[len("awaiting "):] if parts[-1].startswith("awaiting ") else None
    return Task(m.group(1), chain_frames(parts)[::-1], awaiting)


def _running(how, body):
    m = _re("running" if how == "task" else "callback").match(body)
    if m is None:
        return None
    g = m.groupdict()
    return Running(how, g.get("task"), g.get("coro"), g["file"], int(g["line"]), g["func"], g["call"])


def _dead_task(body):
    m = _re("dead task").match(body)
    if m is None:
        return None
    found = []
    for part in m.group("chain").split(" > "):
        path, _, rest = part.rpartition(":")
        line, _, func = rest.partition(" in ")
        if path and line.isdigit():
            found.append((path, int(line), func))
    waiters = [w[len("task "):] for w in (m.group("waiters") or "").split(", ") if w]
    return DeadTask(m.group("task"), m.group("coro"), found, m.group("exc"), waiters)


def _greenlets(body):
    m = _re("greenlets").match(body)
    if m is not None:
        return Greenlets(int(m.group(1)), m.group(2), None)
    return Greenlets(None, None, body[len("not listed ("):-1]) if body.startswith("not listed (") else None


def _greenlet(body):
    m = _re("greenlet").match(body)
    if m is None:
        return None
    w = _re("greenlet wait").match(m.group("wait"))
    return Greenlet(m.group("name"), chain_frames((m.group("chain") or "").split(" > "))[::-1], m.group("wait"),
                    w.group("kind") if w else None, w.group("expr") if w else None, w.group("type") if w else None,
                    m.group("holder"), m.group("how"), m.group("socket"))


def _child(body):
    m = _re("child").match(body)
    if m is None:
        gone = _re("child gone").match(body)
        return Child(int(gone.group(1)), gone.group(2), None, None, "", None, None, []) if gone else None
    rest = m.group(5)
    out, into = _re("child writes").search(rest), _re("child stdin").search(rest)
    writes = (out.group(1), out.group(2), int(out.group(3)), int(out.group(4)), bool(out.group(5))) if out else None
    reads_stdin = bool(into.group(1)) if into else None
    held = [(h.group(1), h.group(2)) for h in _re("held open").finditer(rest)]
    return Child(int(m.group(1)), m.group(2), m.group(3), m.group(4), rest, writes, reads_stdin, held)


def _pipe(body):
    m = _re("pipe").match(body)
    return Pipe(int(m.group(1)), *m.groups()[1:]) if m else None


def _stdin(body):
    m = _re("stdin").match(body)
    return Stdin(m.group(1), m.group(2), m.group(3)) if m else None


def _reads(body):
    m = _re("reads").match(body)
    return Reads(m.group(1)) if m else None


def _socket(body):
    m = _re("socket").match(body)
    return Socket(*m.groups()) if m else None


def _file_lock(body):
    m = _re("file lock").match(body)
    return FileLock(m.group("path"), m.group("how"), m.group("who")) if m else None


def holders(text):
    """[(pid, command)] of `held by pid 456 (node gui.js), pid 7 (x)` or `other end held by ...`."""
    return [(int(pid), command) for pid, command in _re("holder").findall(text)]


_KINDS = {"waits for": _waits_for, "held by": _held_by, "joins": _joins, "set by": _set_by,
          "in signal handler": _in_signal_handler, "handles": _handles, "phase": Phase,
          "terminal": Terminal, "cell": _cell, "handling": _handling, "retries": _retries,
          "asyncio": _asyncio, "child": _child, "pipe": _pipe, "stdin": _stdin, "reads": _reads,
          "socket": _socket, "file lock": _file_lock, "running task": lambda body: _running("task", body),
          "running callback": lambda body: _running("callback", body), "dead task": _dead_task,
          "greenlets": _greenlets, "greenlet": _greenlet}


def parse(text):
    """The typed value of one note as the reader keeps it (stripped: `waits for: lock ...`), or
    None for a line of no kind this grammar knows or one whose words do not parse."""
    if text in _parsed:
        return _parsed[text]
    if text.startswith(("blocked:", "busy:")):
        value = _state(text)
    elif text.startswith("task "):
        value = _task(text)
    else:
        word, sep, body = text.partition(": ")
        value = _KINDS[word](body) if sep and word in _KINDS else None
    if len(_parsed) >= MAX_PARSED:
        _parsed.clear()
    _parsed[text] = value
    return value


def every(notes, kind):
    """The values of one kind (a class above) among a thread's notes, in their order."""
    return [v for v in map(parse, notes) if type(v) is kind]


def first(notes, kind):
    """The first value of one kind among a thread's notes, or None."""
    return next((v for v in map(parse, notes) if type(v) is kind), None)


# --- collectives.py: the collective of torch.distributed a thread waits in (one block: the kind's
# class, writer, pattern and parser) ---------------------------------------------------------------

class Collective(Note):
    """op (`all_reduce`, `barrier`, `recv`), seq (its ordinal in its group, or for a send or recv its
    count with that peer; None where not known), group (the group's name, `0` for the default one),
    desc (`default_pg`), backend (`gloo`), ranks (`0,1`), seconds (in flight), pending (collectives
    issued after it), done (the group's last completed ordinal), peer (a send's or recv's rank),
    other (the sends to, or receives from, that peer), step (training steps so far), ran_out (its
    DataLoader ran out since its last step: its loop ended)."""
    __slots__ = ("op", "seq", "group", "desc", "backend", "ranks", "seconds", "pending", "done", "peer", "other",
                 "step", "ran_out")

    @property
    def where(self):
        """`all_reduce #11 on group 0`, `recv #3 from rank 0`: the words a report names it by."""
        return "%s%s%s%s" % (self.op, " #%d" % self.seq if self.seq is not None else "",
                             " %s rank %s" % ("from" if self.op == "recv" else "to", self.peer) if self.peer else "",
                             " on group %s" % self.group if self.group is not None and not self.peer else "")


def collective(op, seq, group, desc, backend, ranks, seconds, pending, done, peer, other, step, ran_out):
    """`collective: OP[ #SEQ][ from|to rank P][ on group G][ (DESC)][, BACKEND][, ranks R][; in flight S s]
    [; N more issued after it][; last completed #D][; sent|received K to|from rank P][; at step N]
    [; its DataLoader ran out]`."""
    text = Collective(op, seq, group, desc, backend, ranks, None, 0, None, peer, None, None, False).where
    if peer and group is not None:
        text += " on group %s" % group
    text += "".join(part for part in (" (%s)" % desc if desc else "", ", " + backend if backend else "",
                                      ", ranks " + ranks if ranks else "") if part)
    if seconds is not None:
        text += "; in flight %.1f s" % seconds
    if pending:
        text += "; %d more issued after it" % pending
    if done is not None:
        text += "; last completed #%d" % done
    if peer and other is not None:
        text += "; %s %d %s rank %s" % ("sent" if op == "recv" else "received", other,
                                         "to" if op == "recv" else "from", peer)
    if step is not None:
        text += "; at step %d" % step
    if ran_out:
        text += "; its DataLoader ran out"
    return "%scollective: %s" % (INDENT, text)


_PATTERNS["collective"] = (
    r"^(?P<op>\w+)(?: #(?P<seq>\d+))?(?: (?:from|to) rank (?P<peer>\S+))?(?: on group (?P<group>\S+))?"
    r"(?: \((?P<desc>[^)]*)\))?(?:, (?P<backend>[a-z]\w*))?(?:, ranks (?P<ranks>[\d,]+))?"
    r"(?:; in flight (?P<seconds>[\d.]+) s)?(?:; (?P<pending>\d+) more issued after it)?"
    r"(?:; last completed #(?P<done>-?\d+))?(?:; (?:sent|received) (?P<other>\d+) (?:to|from) rank \S+)?"
    r"(?:; at step (?P<step>\d+))?(?P<ran_out>; its DataLoader ran out)?$")


def _collective(body):
    m = _re("collective").match(body)
    if m is None:
        return None
    g = m.groupdict()
    return Collective(g["op"], _int(g["seq"]), g["group"], g["desc"], g["backend"], g["ranks"],
                      float(g["seconds"]) if g["seconds"] else None, int(g["pending"] or 0), _int(g["done"]),
                      g["peer"], _int(g["other"]), _int(g["step"]), bool(g["ran_out"]))


_KINDS["collective"] = _collective


# --- reach.py: who can still change the object a thread waits on (one block: the kind's class,
# writer, pattern and parser) -----------------------------------------------------------------------

class CanChange(Note):
    """threads: ((name, ident `0x..`), ...) of the other live threads whose stack refers to the
    waited object (empty: none does); others: how many other threads were read; after: those of
    the threads joining a waiter whose code after the join refers to it (a wait cycle: the join's)."""
    __slots__ = ("threads", "others", "after")

    @property
    def none(self):
        return not self.threads


def can_change(named, others, after=()):
    """`can change it: thread a (ident 0x1), thread b (ident 0x2)` or `can change it: no other
    thread (2 read, none refers to it)[; after its join: thread c (ident 0x3)]`; named, after: [(name, ident)]."""
    tail = "; after its join: %s" % ", ".join(thread(name, ident) for name, ident in after) if after else ""
    if named:
        return "%scan change it: %s%s" % (INDENT, ", ".join(thread(name, ident) for name, ident in named), tail)
    return "%scan change it: no other thread (%d read, none refers to it)%s" % (INDENT, others, tail)


_PATTERNS["can change it"] = r"thread (.+?) \(ident (0x[0-9a-f]+)\)(?:, |$)"
_PATTERNS["can change none"] = r"^no other thread \((\d+) read, none refers to it\)$"


def _can_change(body):
    body, _, tail = body.partition("; after its join: ")
    after = tuple(_re("can change it").findall(tail))
    m = _re("can change none").match(body)
    if m:
        return CanChange((), int(m.group(1)), after)
    named = tuple(_re("can change it").findall(body))
    return CanChange(named, len(named), after) if named else None


_KINDS["can change it"] = _can_change


class NothingCompletes(Note):
    """task: the name of a task of this thread's event loop that awaits, in the program's own code, a
    bare Future or an asyncio Event, Condition or Queue that nothing else refers to."""
    __slots__ = ("task",)


def nothing_completes(task):
    """`nothing completes: what task Task-1 awaits (no other task, callback, reader or thread refers
    to it)`, under a thread's `task` lines."""
    return "%snothing completes: what task %s awaits (no other task, callback, reader or thread refers to it)" % (
        INDENT, task)


_PATTERNS["nothing completes"] = r"^what task (\S+) awaits \("


def _nothing_completes(body):
    m = _re("nothing completes").match(body)
    return NothingCompletes(m.group(1)) if m else None


_KINDS["nothing completes"] = _nothing_completes
