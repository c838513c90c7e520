"""The reader's typed model. What one process's log says: a frame of a stack (Frame), the stall
it was last in (Stall), the crash (Crash) or exit record (Exit) that ended it; logread builds them
as it reads. And what the report judged (Report, Process, StallRecord, Raised, Memory, Retrying,
WaitedBy; a dump's threads are logread.Thread): verdict.py fills them, the causes and the passes
read them by field name, and `to_json` is the one way they become the --json schema
(docs/json-schema.md). It owns only these shapes and their field meanings: it never reads files,
parses lines or judges."""
from collections import namedtuple

# One frame of a stack, innermost first in a list: file path, line number, function (`<module>`,
# or `<source>` for a SyntaxError's place). A tuple still, so `path, line, func = frame` works.
Frame = namedtuple("Frame", "file line function")


def as_frames(frames):
    """Frames of (file, line, function) tuples (the runtime's notes write plain ones)."""
    return [Frame(*f) for f in frames]


class Stall:
    """The stall a process was last in, from the watchdog's `stall` line and the dump after it (or
    faulthandler's `Timeout` block when C code held the GIL)."""
    __slots__ = ("time", "text", "threads", "over", "dumped", "gil", "noisy", "since", "stuck", "steps", "task",
                 "greenlet", "resumed")

    def __init__(self, when, text, threads, dumped=False, gil=False):
        self.time = when          # epoch seconds of its `stall` line (None if the line had no time)
        self.text = text          # the line's words (`silent for 30 s; ...`)
        self.threads = threads    # logread.Thread list of its dump; until the dump, the stall before's
        self.over = None          # when its `over` line (or the watchdog's next run, for a GIL stall) came
        self.dumped = dumped      # its own dump was read (a later dump is not this stall's)
        self.gil = gil            # C code held the GIL: the watchdog could not run (faulthandler's Timeout)
        self.noisy = False        # told while other threads printed: only its `over` line ends it
        self.since = None         # for a noisy one: when it began (the last step, the thread's last move)
        self.stuck = None         # for a noisy one: the name of the thread it names as stuck, if any
        self.task = None          # for a noisy one: the asyncio task it names as stuck (`Task-2 (fetch)`),
        #                           on thread `stuck`, whose event loop ran on
        self.greenlet = None      # ... or the gevent or eventlet greenlet (`loader`), whose hub ran on
        self.steps = None         # for a noisy one: the training heartbeat's words, `steps came every ~0.2 s
        #                           before; last step 5`, when the steps stopped
        self.resumed = None       # when the process next did something after it (its wait ended then)


# faulthandler's words for a fatal signal, and the signal
_CRASHES = {"Segmentation fault": "SIGSEGV", "Floating point exception": "SIGFPE", "Aborted": "SIGABRT",
            "Bus error": "SIGBUS", "Illegal instruction": "SIGILL"}


class Crash:
    """A fatal error faulthandler wrote (`Fatal Python error: Segmentation fault` and the stacks)."""
    __slots__ = ("what", "time", "threads", "after_exit")

    def __init__(self, what, when, threads, after_exit=False):
        self.what = what          # its words: `Segmentation fault`, `Aborted`
        self.time = when          # epoch seconds of the last line before it (faulthandler writes no time)
        self.threads = threads    # logread.Thread list of its stacks
        self.after_exit = after_exit  # written after the exit record: during the interpreter's shutdown

    @property
    def signal(self):
        """`SIGSEGV` for faulthandler's `Segmentation fault`; None for a fatal error of Python's own."""
        return _CRASHES.get(self.what)

    def json(self):
        return {"what": self.what, "signal": self.signal, "threads": to_json(self.threads)}


class Exit:
    """How a process ended, from its `exit` record(s); every field is None until one is read (a
    process still running, or one killed without a record). A later record (the last flush's
    status 120) overrides the status and keeps the call."""
    __slots__ = ("status", "time", "call", "at", "outer", "by", "main_at", "flush", "daemons", "before")

    def __init__(self):
        self.status = None        # its exit status (int), or None when the record names none
        self.time = None          # epoch seconds of the exit record
        self.call = None          # what ended it: `sys.exit(3) in main at a.py:5`, `os._exit(1) ...`,
        #                           `ended by earlylog: ...` (EARLYLOG_STALL_EXIT), or None
        self.at = None            # the Frame of that call (a file's base name), or None
        self.outer = None         # for a call in a library: the program's own Frame that led there
        self.by = None            # who called os._exit: `thread loader` or `the main thread`
        self.main_at = None       # the main thread's Frame then, when another thread called it
        self.flush = None         # (stream, error, whether its reader went away): the last flush failed (120)
        self.daemons = None       # the daemon threads still at work then, which Python stopped without a
        #                           word: `saver in save at ckpt.py:4, ...`
        self.before = None        # when it last did something before the exit record (verdict._cut_short)


class GilHeld:
    """faulthandler's `Timeout (H:MM:SS)!` block: C code held the GIL, so the watchdog could not run."""
    __slots__ = ("time", "seconds", "threads", "over")

    def __init__(self, when, seconds, threads):
        self.time = when          # epoch seconds of the last line before it (faulthandler writes no time)
        self.seconds = seconds    # how long the watchdog had not run (the timer's timeout)
        self.threads = threads    # logread.Thread list of its stacks (native threads left out)
        self.over = None          # when the watchdog ran again (`stall: the GIL ...`)


# A thread failing again and again between sleeps, from the watchdog's `retrying:` line
# (records.retrying): when, how many failures in how many seconds, and the `handling:` words.
Retry = namedtuple("Retry", "time count seconds handling")


# --- what the report judged -----------------------------------------------------------------

def to_json(value):
    """The --json form of a judged value: a Frame as {"file", "line", "function"}, a shape by its
    own json(), lists and dicts item by item; anything else as it is."""
    if isinstance(value, Frame):
        return {"file": value.file, "line": value.line, "function": value.function}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    json = getattr(value, "json", None)
    return json() if json is not None else value


class Record:
    """A judged shape: its fields are its __slots__, in the order --json writes them, each None
    until set; json() is its --json object. A pass of the verdict changes one by update()."""
    __slots__ = ()

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.pop(name, None))
        if fields:
            raise TypeError("%s has no field %s" % (type(self).__name__, ", ".join(fields)))

    def update(self, change):
        for name, value in change.items():
            setattr(self, name, value)

    def json(self):
        return {name: to_json(getattr(self, name)) for name in self.__slots__}


class Report(Record):
    """The whole report: `processes` (Process, oldest first), `causes` (causes.Cause, most
    important first), `verdict` (its lines), `problems` (what could not be read), `counts` by state."""
    __slots__ = ("schema", "earlylog", "folder", "generated", "host", "hosts", "counts", "verdict", "problems",
                 "processes", "causes")


class Process(Record):
    """One process as the report judged it: what it is, how it ended (or stands), and where;
    each field's meaning is in docs/json-schema.md. `where` is a Frame; `stall` a StallRecord,
    `crash` a Crash, `exception` a Raised, `memory` a Memory, `retrying` a Retrying, `waited_by` a
    WaitedBy (each or None); `phases` logread.Phase."""
    __slots__ = ("host", "pid", "ppid", "grandparent", "tag", "title", "rank", "local_rank", "node_rank",
                 "world_size", "restart", "job", "command", "idle", "checked_here", "kernel_state", "killed_by",
                 "still_starting", "files", "start", "last_seen", "end", "state", "status", "summary", "where",
                 "phase", "stall", "crash", "exception", "memory", "warnings", "phases", "children", "waited_by",
                 "retrying", "earlylog", "exit_call", "exit_note", "exit_next", "peer_waits", "output_left_out")


class PeerWaits(Record):
    """The waits of a rank for its peer ranks in collectives that ended (it went on after each):
    how many were told, the longest in seconds, and its collective (`all_reduce #3 on group 0`)."""
    __slots__ = ("count", "longest", "collective")


class StallRecord(Record):
    """The stall a process is (or was) in at its end: since when, its `stall` line's words, its
    dump's threads (logread.Thread), the one it names as stuck (else the main thread: `main`),
    and, once judged, how long (`seconds`) and the sentence (`summary`)."""
    __slots__ = ("since", "text", "threads", "main", "seconds", "summary")


class Raised(Record):
    """The exception that ended a process: its text, the user's Frame it was raised in, and
    whether it was read from a traceback the program printed (not from earlylog's hook)."""
    __slots__ = ("text", "frame", "printed")


class Memory(Record):
    """What the `mem:` breadcrumbs say: the first and last, whether the cgroup's oom_kill count
    rose, and whether use was at 90% of the limit."""
    __slots__ = ("first", "last", "oom_kill_rose", "near_limit")


class Retrying(Record):
    """A thread sleeping between failures of one operation: the handling note's words, the error,
    where it was raised, the address a connect failed on, how many failures in how many seconds
    (None when one dump shows it), the thread's Frame (None from the `retrying:` line), and that
    line's time (None from a dump)."""
    __slots__ = ("thread", "handling", "error", "raised_in", "address", "count", "seconds", "frame", "time")


class WaitedBy(Record):
    """The parent that waited for a child when it was killed: its pid, thread, Frame, that line's
    source, the library call, the child's command, the signal, and when that wait ended."""
    __slots__ = ("pid", "thread", "frame", "code", "call", "command", "signal", "until")
