"""Reads a folder of earlylog logs, streaming, into one small model per process (host, pid).
It only reads: it must never write into the folder, hold a whole file in memory, or raise on bad input."""
import os
import re
import time
from collections import deque, namedtuple

from earlylog import __version__
from earlylog.read import files as folder_files
from earlylog.read.frames import call_name, cells, user_frame
from earlylog.read.model import Crash, Exit, Frame, GilHeld, Record, Retry, Stall, to_json
from earlylog.grammar import bound, stalls
from earlylog.grammar import notes, records

# `File "path", line N[,] in function`: faulthandler's raw crash output and Python tracebacks (a
# dump's frames are notes.frame_line()'s). A SyntaxError's place is a frame with no function
# (`File "x.py", line 2`): shown as <source>.
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+)(?:,? in (\S+))?\s*$')
_UNRECORDED = ("start-up failed", "hooks failed")  # earlylog's own failures that lose the exit record
# This reader's own package folder; each log's start line names the folder of the copy that wrote it.
OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FAULT_IDENT = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")  # faulthandler's thread heads
_REPEATED = re.compile(r"^\[Previous line repeated (\d+) more times?\]$")
_TIMEOUT = re.compile(r"^Timeout \((\d+):(\d\d):(\d\d(?:\.\d+)?)\)!")
_TITLE = "process title: "
# asyncio's own report of a task freed with an exception nobody retrieved, on stderr: this line,
# then `future: <Task finished name='Task-2' coro=<producer() done, ...> exception=ValueError(...)>`
# and the task's traceback (a task the program kept no reference to is freed as it fails).
_UNRETRIEVED = "Task exception was never retrieved"
_FUTURE = re.compile(r"^future: <Task finished name='(.*?)' coro=<(\S+?)\(\) done\b.*? exception=(.*)>$")
# A supervisor's own words, in a process's output, that it killed another process by pid: who killed,
# and the pattern (one group: the pid). Ray's memory monitor names the worker it killed in the
# OutOfMemoryError its driver gets ("Selected to kill: (Task: ..., pid=N, ...)" in Ray 2.60; older
# releases wrote "where the task (task ID: ..., name=..., pid=N, ...) was running").
KILLERS = (("Ray's memory monitor", re.compile(r"(?:Selected to kill: |where the task )\(.*?\bpid=(\d+)")),
           # torch's DataLoader, whose workers' own signal handlers replace faulthandler's
           ("a signal", re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal")))
_NAME = re.compile(r"^\d{8}-\d{6}-(.+)$")

PROBE_LINES = 20        # a file with no earlylog line among its first lines is someone else's
MAX_PROBE_LINE = 65536  # ... and a binary file's "lines" are read only this far while probing
MAX_BLOCK = 600         # continuation lines kept per event (a dump of 40 threads fits)
_HEAD = 100             # of which the first: a traceback's outermost frames, a dump's first threads
MAX_KEPT = 30           # warnings and closed phases kept per process (the newest)
FAILURES = 5            # the program's output lines that report a failure kept per process (the newest)
# An output line that reports a failure: an exception's name, or `failed`/`failure` as a word.
_FAILURE = re.compile(r"[A-Z]\w*(?:Error|Exception)\b|(?i:\bfail(?:ed|ure)\b)")
# Kinds that are the process itself doing something; the watchdog's own lines are not.
HANDLED = "handled "  # an `exception` line the process went on after (runtime/hooks.py)
LIFE = ("start", "exit", "exec", "exception", "phase", "out", "err", "mark", "fork", "probe")
_RAW_KINDS = ("fatal", "gil", "signal")


class Proc:
    """What one process's lines say; `first`/`last` are epoch seconds (None if no timed line)."""

    def __init__(self, host, pid):
        self.host, self.pid = host, pid
        self.ppid = self.tag = self.argv = self.version = None
        self.grandparent = None  # its parent's parent, when the start line names it
        self.place = {}         # rank, local_rank, node_rank, world_size (ints) and job, as the start line says
        self.title = None       # the process title it set after start (Ray: `ray::TASK`), from a note
        self.starting = True    # nothing in its log yet beyond its own start-up (probes, imports)
        self.own = None         # the folder of the earlylog copy that wrote this log
        self.files = []
        self.first = self.last = self.activity = None
        self.exit = Exit()      # model.Exit: how it ended (its fields None until its exit record)
        self.retrying = {}      # thread name -> its newest model.Retry
        self.exception = None   # Raised
        self.repeated = 0       # that traceback's "[Previous line repeated N more times]", summed
        self.deaths = []        # Died: threads that ended with an exception
        self.failed_tasks = []  # Died: executor tasks that raised (the exception kept in their Future)
        self.forked = False     # started by fork() without exec: it holds copies of its parent's locks
        self.fork_threads = None  # (how many, their names) of the other threads at its last `fork:` warning
        self.fork_native = 0    # ... and how many threads with no Python stack it counted (a native pool's)
        self.stall_after = None  # the watchdog's stall threshold (EARLYLOG_STALL), from its note
        self.gil = None         # faulthandler's Timeout: a model.GilHeld
        self.signal = None      # Signalled
        self.crash = None       # model.Crash: the fatal error that ended it
        self.stall = None       # model.Stall: the stall it was last in (ended or not)
        self.dumped_at = None   # when its last `dump:` came (a stall line's dump follows it)
        self.left_out = None    # [lines, MiB] of its output the log's bound left out (EARLYLOG_MAX_LOG)
        # Its waits for peer ranks in a collective that ended (a slower rank, most often): how many,
        # the longest (seconds), and the collective of that one (`all_reduce #3 on group 0`).
        self.peer_waits = None
        self.phases = []        # closed Phases; open ones in self.open
        self.open = []
        self.mem = []           # the first and the newest `mem:` texts
        self.warnings = []
        self.unrecorded = None  # earlylog's own failure that leaves the process with no exit record
        self.output = None      # the last line the program printed: (time, text), from `out:`/`err:`
        self.stdout = None      # ... of which the last on stdout
        self.failures = deque(maxlen=FAILURES)  # (time, text): its last output lines that report a failure
        self.failed = 0         # ... how many such lines it printed in all
        # The last traceback the program printed on its stderr (Raised), and one being read: a
        # multiprocessing child reports its error that way and ends by os._exit(1), with no
        # `exception:` record of ours.
        self.printed = None
        self.printing = None    # a Block
        self.task_deaths = []   # TaskDied: asyncio's "Task exception was never retrieved" reports
        self.unretrieved = None  # the _Unretrieved report being read
        self.block = None       # the Block whose `| ` lines are being read
        # (call, argv words) of an exec record with nothing of the program after it: os.exec*
        # replaced the program with one that writes nothing here (a shell, a binary).
        self.exec = None

    @property
    def rank(self):
        if self.place.get("rank") is not None:
            return self.place["rank"]
        tag = self.tag or ""
        if tag.startswith("rank") and tag[4:].isdigit():
            return int(tag[4:])
        _, _, r = tag.rpartition(".r")
        return int(r) if r.isdigit() else None


# The exception that ended a thread (its `exception:` line and frames, innermost first).
Raised = namedtuple("Raised", "text frames cut")  # cut: lines of its traceback not kept
# A thread that ended with an exception (`exception: in thread NAME: ...`): name, what, where, when.
Died = namedtuple("Died", "thread text frames time")
# An asyncio task freed with an exception nobody retrieved: its name, coroutine function, exception
# (`ValueError('bad row')`), traceback frames (innermost first) and when asyncio said so.
TaskDied = namedtuple("TaskDied", "task coro text frames time")
# A signal's stack (faulthandler's bare block at SIGTERM): what happened, when, which threads.
Signalled = namedtuple("Signalled", "text time threads after_exit")  # after_exit: it came after the exit record


class Block:
    """An event with continuation lines (a dump, an exception, a crash) while it is being read. Of
    a longer one it keeps the first lines and the newest: a traceback ends with where it was raised."""
    __slots__ = ("kind", "time", "text", "head", "tail", "cut", "threads", "thread")

    def __init__(self, kind, when, text):
        self.kind, self.time, self.text = kind, when, text
        self.head, self.tail, self.cut = [], deque(maxlen=MAX_BLOCK - _HEAD), 0
        self.threads = set()  # of faulthandler's blocks: the threads whose frames came so far (idents)
        self.thread = None    # ... and the thread whose head came last

    def add(self, line):
        if len(self.head) < _HEAD:
            self.head.append(line)
        else:
            self.cut += len(self.tail) == self.tail.maxlen
            self.tail.append(line)

    @property
    def lines(self):
        cut = ["  [%d lines not kept]" % self.cut] if self.cut else []
        return self.head + cut + list(self.tail)


class Phase(Record):
    """A phase of a process: name, begin and end (epoch seconds; end None while open), and its
    outcome: "open", "ok" or "error: <exception>"."""
    __slots__ = ("name", "begin", "end", "outcome")

    def __init__(self, name, begin):
        super().__init__(name=name, begin=begin, outcome="open")


class Thread:
    """One thread of a dump or crash: its header, frames (innermost first) and plain-words notes;
    the judged model's thread (read/model.py): what its notes say is read as fields (state, wait,
    joins, holders...), and json() is its --json form (THREAD in docs/json-schema.md)."""

    def __init__(self, header):
        self.header = header
        self.head = notes.head(header)  # the dump's head line as a notes.Head; None for faulthandler's, a traceback's
        self.frames = []
        self.notes = []
        self.code = {}  # frame index -> its source line, where the dump wrote it (faulthandler does not)

    @property
    def name(self):
        head = self.head
        if head is not None:
            return head.name
        if self.header.startswith(("Current thread 0x", "Thread 0x")):  # faulthandler writes no names
            return "MainThread" if self._module_code() else self.ident
        return self.header

    @property
    def main(self):
        # faulthandler names no thread: the one whose outermost frame is module code is the main one
        head = self.head
        return head.main if head is not None else self.header.startswith("Current thread") or (
            self.header.startswith("Thread 0x") and self._module_code())

    @property
    def ident(self):
        """The thread's ident as written (`0x7f...`), from a dump's or faulthandler's header, or None."""
        head = self.head
        if head is not None:
            return head.ident
        m = _FAULT_IDENT.match(self.header)
        return "0x%x" % int(m.group(1), 16) if m else None

    @property
    def daemon(self):
        """True or False from a dump's header; None where it is not written (faulthandler)."""
        head = self.head
        return head.daemon if head is not None else None

    def _module_code(self):
        return bool(self.frames) and self.frames[-1].function == "<module>"

    # What the runtime's notes under it say (grammar/notes.py parses each note once).
    @property
    def state(self):
        """Its kernel state in words (`blocked: sleeping (clock_nanosleep)`, `busy: ...`), or None."""
        state = notes.first(self.notes, notes.State)
        return state.text if state else None

    @property
    def doing(self):
        """What a blocked thread does, in a few words: `sleeping`, `waiting to read from a pipe`."""
        state = notes.first(self.notes, notes.State)
        return state.doing if state else ""

    @property
    def busy(self):
        return bool(self.state and self.state.startswith("busy:"))

    @property
    def sleeping(self):
        return bool(self.state and self.state.startswith("blocked: sleeping"))

    @property
    def phase(self):
        phase = notes.first(self.notes, notes.Phase)
        return phase and phase.text

    @property
    def wait(self):
        """What it waits for (a notes.WaitsFor: a lock, queue, event, import...), or None."""
        return notes.first(self.notes, notes.WaitsFor)

    @property
    def joins(self):
        """The thread it waits for in join() (a notes.Joins: name, ident), or None."""
        return notes.first(self.notes, notes.Joins)

    @property
    def holders(self):
        """Who holds the lock it waits for (notes.HeldBy), as many as the notes name."""
        return list(notes.every(self.notes, notes.HeldBy))

    @property
    def handler(self):
        """`SIGALRM, flush at m.py:6`: the program's signal handler it waits inside, or None."""
        handler = notes.first(self.notes, notes.InSignalHandler)
        return handler.text if handler else None

    @property
    def wakeable(self):
        """A signal handler of the program's could wake it: one that sets the Event it waits on, or
        any handler the main thread's notes list."""
        return notes.first(self.notes, notes.SetBy) is not None or notes.first(self.notes, notes.Handles) is not None

    @property
    def collective(self):
        """The collective of torch.distributed it waits in (a notes.Collective), or None."""
        return notes.first(self.notes, notes.Collective)

    @property
    def frame(self):
        """The innermost frame of the user's own code, else the innermost."""
        return user_frame(self.frames)

    @property
    def call(self):
        """The library call the user's code is inside (`subprocess.run`, `barrier`), or None."""
        return call_name(self.frames)

    def json(self):
        frames = [to_json(f) for f in self.frames]
        for i, code in self.code.items():
            if code is not None and i < len(frames):
                frames[i]["code"] = code  # the source line, where the dump wrote one
        return {"name": self.name, "main": self.main, "state": self.state, "phase": self.phase,
                "frame": to_json(self.frame), "call": self.call, "frames": frames, "notes": list(self.notes)}


class Folder:
    """Every process found in one folder, plus one sentence per problem met while reading it."""

    def __init__(self, path):
        self.path = path
        self.procs = {}
        self.problems = []
        self.foreign = []
        self.unknown = 0        # lines of kinds this earlylog does not know
        self.half_lines = 0
        self.newer = None
        self.epoch = Clock()
        self.kills = {}         # (host of the line, pid) -> (who killed it, the line that says so): KILLERS

    def proc(self, host, pid):
        key = (host, pid)
        p = self.procs.get(key)
        if p is None:
            p = self.procs[key] = Proc(host, pid)
        return p


class Clock:
    """Epoch seconds of a record: its `ts` (JSON), else its local time text (parsed once per second)."""

    def __init__(self):
        self.seconds = {}

    def __call__(self, record):
        if record.get("ts") is not None:
            try:
                return float(record["ts"])
            except (TypeError, ValueError):
                return None
        stamp = record["time"]
        base = self.seconds.get(stamp[:19])
        if base is None:
            try:
                base = self.seconds[stamp[:19]] = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S"))
            except (ValueError, OverflowError):
                return None
        return base + int(stamp[20:23]) / 1000.0 if stamp[20:23].isdigit() else base


def _started(path):
    """A file's order among the others: its first line's time to the millisecond, else its name.
    One pid may write two files in the same second (a program that execs another: Ray's
    setup_worker becomes default_worker), and the older program must be read first."""
    try:
        with open(path, "rb") as f:
            head = f.read(200).decode("utf-8", "replace")
    except OSError:
        head = ""
    record = records.parse(head.partition("\n")[0]) if head else None
    return (os.path.basename(path)[:15], record["time"] if record else "", os.path.basename(path))


def read(path, progress=None):
    """Read every file of a folder into a Folder; progress(done, total) is called as files finish."""
    folder = Folder(path)
    files = sorted(folder_files.log_files(path), key=_started)
    for i, name in enumerate(files):
        try:
            _read_file(folder, name)
        except OSError as exc:
            folder.problems.append("%s: cannot read it (%s)" % (os.path.basename(name), exc.strerror or exc))
        except Exception as exc:  # input we did not foresee: keep what was read, say where it stopped
            folder.problems.append("%s: stopped reading it (%r); the report shows what came before"
                                   % (os.path.basename(name), exc))
        if progress is not None:
            progress(i + 1, len(files))
    for p in folder.procs.values():
        _close_block(p)
    if folder.foreign:
        folder.problems.append("%d file%s not earlylog logs, skipped: %s" % (
            len(folder.foreign), " is" if len(folder.foreign) == 1 else "s are",
            ", ".join(folder.foreign[:3]) + (", ..." if len(folder.foreign) > 3 else "")))
    if folder.half_lines:
        folder.problems.append("%d file%s end%s in a half-written line (a process killed mid-write); "
                               "read what is there" % (folder.half_lines, "" if folder.half_lines == 1 else "s",
                                                       "s" if folder.half_lines == 1 else ""))
    if folder.unknown:
        folder.problems.append("%d line%s of kinds this earlylog does not know, skipped"
                               % (folder.unknown, "" if folder.unknown == 1 else "s"))
    if folder.newer:
        folder.problems.append("written by earlylog %s, newer than this earlylog %s: lines it does not "
                               "know are skipped; upgrade earlylog to read everything" % (folder.newer, __version__))
    return folder


def read_one(path):
    """A Folder of one log file (a process's own log, which its watchdog's judge reads)."""
    folder = Folder(os.path.dirname(path) or ".")
    _read_file(folder, path)
    for p in folder.procs.values():
        _close_block(p)
    return folder


def host_from_name(path, pid):
    """The host part of `<time>-<host>-<pid>-<role>.log` (safe_name form), or None."""
    m = _NAME.match(os.path.basename(path))
    if not m:
        return None
    host, sep, _ = m.group(1).rpartition("-%d-" % pid)
    return host if sep and host else None


def _read_file(folder, path):
    base = os.path.basename(path)
    with open(path, "rb") as f:
        head, ours = [], False
        while len(head) < PROBE_LINES:
            line = f.readline(MAX_PROBE_LINE)
            if not line:
                break
            head.append(line)
            if parse(line.decode("utf-8", "replace")) is not None:
                ours = True
                break
        if not ours:
            folder.foreign.append(base)
            return
        state = {"proc": None, "hosts": {}}
        last = b""
        for lines in (head, f):
            for line in lines:
                last = line
                _line(folder, path, state, line.decode("utf-8", "replace"))
        if last and not last.endswith(b"\n"):
            folder.half_lines += 1


def parse(line):
    """records.parse, refusing JSON lines whose fields have the wrong types (not ours, or damaged)."""
    record = records.parse(line)
    if record is None or not all(isinstance(record[k], str) for k in ("time", "tag", "kind", "msg")):
        return None
    return record


def _line(folder, path, state, line):
    record = parse(line)
    if record is None:
        p = state["proc"]
        if p is not None and line.strip():
            _raw(p, line.rstrip("\r\n"))
        return
    pid = record["pid"]
    host = record.get("host")
    if host is None:
        hosts = state["hosts"]
        if pid not in hosts:
            hosts[pid] = host_from_name(path, pid)
        host = hosts[pid]
    else:
        host = records.safe_name(host)
    p = folder.proc(host, pid)
    state["proc"] = p
    if path not in p.files:
        p.files.append(path)
    kind = record["kind"]
    when = folder.epoch(record)
    if kind == "|":
        if p.block is not None:
            p.block.add(record["msg"])
        return
    _close_block(p)
    if when is not None:
        if p.first is None:
            p.first = when
        p.last = when
    if p.tag is None or kind == "start":
        p.tag = record["tag"]  # a second start line is the same pid after exec: the new program's tag
    if kind in LIFE:
        p.exec = None  # an exec that failed (the program went on), or a Python with earlylog after it
    # The phase reminder's `waiting X: still waiting` line is the watchdog's kind: no sign of life.
    if kind in LIFE and when is not None and not (kind == "phase" and record["msg"].startswith("waiting ")):
        if kind == "exit":
            p.exit.before = p.activity  # a stall that lasted until the exit (verdict._cut_short)
        p.activity = when
        if p.stall is not None and p.stall.resumed is None and p.stall.time is not None and \
                when >= p.stall.time:
            p.stall.resumed = when  # its wait ended then: a child it waited for ended about then
        # An exec is no work of the program's: Ray's setup_worker execs its worker while starting.
        if kind not in ("start", "probe", "exec") and \
                not (kind == "phase" and record["msg"].split(" ", 2)[1:2] == ["import"]):
            p.starting = False
    _event(folder, p, kind, when, record["msg"])


def _event(folder, p, kind, when, text):
    if kind in ("out", "err"):
        p.output = (when, text)
        if _FAILURE.search(text):
            p.failures.append((when, text))
            p.failed += 1
        if kind == "out":
            p.stdout = p.output
        if kind == "err":
            _printed_traceback(p, text)
            _unretrieved(p, when, text)
        if "pid" in text:
            _kill_notice(folder, p, text)
    elif kind == "start":
        if p.argv is not None:
            _exec(p)
        start = records.parse_start(text)
        if start["argv"] is not None:
            p.ppid, p.argv = start["ppid"], start["argv"]
        p.forked = start["origin"] == "fork"
        p.grandparent = start["grandparent"]
        p.place = start["place"] or p.place
        p.own = start["package"] or p.own
        if start["version"]:
            p.version = start["version"]
            if _newer(p.version) and (folder.newer is None or _tuple(p.version) > _tuple(folder.newer)):
                folder.newer = p.version
    elif kind == "exit":
        _exit(p.exit, when, records.parse_exit(text))
    elif kind == "exec":
        p.exec = records.parse_exec(text)
    elif kind in ("exception", "stall", "dump", "signal", "fatal"):
        p.block = Block(kind, when, text)
    elif kind == "phase":
        _phase(p, when, text)
    elif kind == "fork":
        p.fork_threads = records.parse_fork_threads(text) or p.fork_threads
        p.fork_native = records.parse_fork_native(text)
    elif kind == "mem":
        p.mem[1:] = [text] if p.mem else []
        if not p.mem:
            p.mem.append(text)
    elif kind == "note" and text.startswith("retrying: "):
        retry = records.parse_retrying(text)
        if retry:
            p.retrying[retry[0]] = Retry(when, *retry[1:])
    elif kind == "note" and text.startswith(_TITLE):
        p.title = text[len(_TITLE):].strip() or None
    elif kind == "note" and text.startswith("watchdog: "):  # fault.py's note at start: its EARLYLOG_STALL
        p.stall_after = records.parse_stacks_after(text)
    elif kind == "note" and text.startswith(bound.LEFT_OUT):
        found = bound.parse_left_out(text)
        if found:
            p.left_out = [(p.left_out or [0, 0.0])[0] + found[0], round((p.left_out or [0, 0.0])[1] + found[1], 1)]
    elif kind == "earlylog" and text.startswith(_UNRECORDED):
        p.unrecorded = text  # `start-up failed: ...`: no exit record will come
    elif kind == "WARNING":
        if text not in p.warnings:
            p.warnings = (p.warnings + [text])[-MAX_KEPT:]
    elif kind not in records.KINDS:
        folder.unknown += 1


def _kill_notice(folder, p, text):
    """A line of the program's output in which a supervisor says it killed a process (KILLERS)."""
    for who, pattern in KILLERS:
        m = pattern.search(text)
        if m:
            folder.kills.setdefault((p.host, int(m.group(1))), (who, text))


def _exec(p):
    """The pid ran a new program (exec: Ray's setup_worker becomes default_worker): what the old
    program was doing, its stall and open phases, is not the new one's, and the new one is starting."""
    _close_block(p)
    p.stall, p.open, p.title, p.starting = None, [], None, True


def _phase(p, when, text):
    word, _, rest = text.partition(" ")
    if word == "begin":
        p.open.append(Phase(rest, when))
    elif word in ("end", "error"):
        name, _, after = rest.partition(" after ")
        for i in range(len(p.open) - 1, -1, -1):
            if p.open[i].name == name or p.open[i].name.startswith(name + " "):
                entry = p.open.pop(i)
                entry.end = when
                entry.outcome = "ok" if word == "end" else "error: " + after.partition(": ")[2]
                p.phases = (p.phases + [entry])[-MAX_KEPT:]
                break


def _raw(p, line):
    """A line not in our format: faulthandler writing straight to the file (crash, SIGTERM, GIL)."""
    raw_block = p.block is not None and p.block.kind in _RAW_KINDS
    if line.startswith("Fatal Python error: "):
        _close_block(p)
        p.block = Block("fatal", p.last, line[len("Fatal Python error: "):].strip())
    elif line.startswith("Timeout ("):
        _close_block(p)
        p.block = Block("gil", p.last, line)
    elif line.startswith(("Current thread 0x", "Thread 0x")):
        # The watchdog's note: a bare faulthandler block with no header is the stack at SIGTERM,
        # also right after another block (C code holding the GIL is where a timeout's SIGTERM finds
        # it): a dump shows each thread's frames once, so a thread whose frames came already
        # begins a block of its own. (Its ident alone may come twice: a thread just started,
        # `<no Python frame>`, bears its starter's ident until it runs.)
        ident = _FAULT_IDENT.match(line).group(1)
        if not raw_block or ident in p.block.threads:
            _close_block(p)
            p.block = Block("signal", p.last, "received SIGTERM")
        p.block.thread = ident
        p.block.add(line)
    elif raw_block:
        if line.startswith("  File ") and p.block.thread is not None:
            p.block.threads.add(p.block.thread)
        p.block.add(line)


def _printed_traceback(p, line):
    """Follow a traceback printed on stderr line by line: its frames are indented, and the first
    line after them that is not is the exception."""
    if line.startswith("Traceback (most recent call last):"):
        p.printing = Block("printed", None, None)
        p.printing.add(line)
    elif p.printing is not None:
        if line.startswith(" "):
            p.printing.add(line)
            return
        if line.strip():
            threads = _without_own_frames(p, parse_threads(p.printing.lines))
            p.printed = _raised(line.strip()[:300], threads, p.printing.cut)
        p.printing = None


class _Unretrieved:
    """asyncio's report being read: when it began, the task's name, coroutine and exception (from
    its `future:` line; None before), and the traceback printed before it (not the task's own)."""
    __slots__ = ("when", "task", "before")

    def __init__(self, when, before):
        self.when, self.task, self.before = when, None, before


def _unretrieved(p, when, line):
    """Follow asyncio's "Task exception was never retrieved" report: its `future:` line names the
    task, and the traceback after it (read by _printed_traceback) is where the task died."""
    seen = p.unretrieved
    if line == _UNRETRIEVED:
        p.unretrieved = _Unretrieved(when, p.printed)
    elif seen is not None and seen.task is None:
        m = _FUTURE.match(line)
        if m:
            seen.task = m.groups()
        else:
            p.unretrieved = None
    elif seen is not None and p.printing is None:
        if p.printed is not seen.before:
            died = TaskDied(*seen.task, p.printed.frames, seen.when)
            p.task_deaths = (p.task_deaths + [died])[-MAX_KEPT:]
        p.unretrieved = None


def _raised(text, threads, cut):
    """The exception a traceback ends with: of a chained exception's tracebacks, the last is the
    one raised."""
    return Raised(text, threads[-1].frames if threads else [], cut)


def _close_block(p):
    block, p.block = p.block, None
    if block is None:
        return
    kind, when, text, lines = block.kind, block.time, block.text, block.lines
    threads = _without_own_frames(p, parse_threads(lines))
    if kind == "exception" and text.startswith(HANDLED):
        return  # the interactive prompt (or the program) went on after it: not how the process ended
    if kind == "exception" and records.parse_in_task(text):
        # An executor's task: not how the process ended, and kept in its Future, not printed.
        thread, words = records.parse_in_task(text)
        frames = _raised(text, threads, block.cut).frames
        p.failed_tasks = (p.failed_tasks + [Died(thread, words, frames, when)])[-MAX_KEPT:]
    elif kind == "exception":
        p.exception = _raised(text, threads, block.cut)
        frames = p.exception.frames
        p.repeated = sum(int(m.group(1)) for m in map(_REPEATED.match, threads[-1].notes if threads else []) if m)
        died = records.parse_in_thread(text)
        if died:
            p.deaths = (p.deaths + [Died(died[0], died[1], frames, when)])[-MAX_KEPT:]
    elif kind == "stall":
        _stall(p, when, text)
    elif kind == "gil":
        _gil(p, when, text, threads)
    elif kind == "dump":
        p.dumped_at = when
        if threads and p.stall is not None and not p.stall.dumped and p.stall.over is None:
            p.stall.threads, p.stall.dumped = threads, True
    elif kind == "fatal":
        p.crash = Crash(text, when, threads, p.exit.status is not None)
    elif kind == "signal":
        p.signal = Signalled(text, when, threads, p.exit.status is not None)


def _stall(p, when, text):
    line = stalls.parse(text)
    shape = line.shape if line is not None else None
    if shape == "over":
        if p.stall is not None and p.stall.over is None:
            p.stall.over = when
            _peer_wait(p, when)
    elif shape == "gil":  # the watchdog ran again: the GIL stall before it is over
        if p.gil is not None and p.gil.over is None:
            p.gil.over = when
        if p.stall is not None and p.stall.gil and p.stall.over is None:
            p.stall.over = when
    else:
        # Its dump is written a moment after this line: a report read in between keeps the
        # stacks of the stall before, rather than none.
        earlier = p.stall.threads if p.stall is not None and p.stall.over is None else []
        p.stall = Stall(when, text, earlier)
        if shape == "noisy" and when is not None:
            # Output goes on during such a stall: only its `over` line ends it; it began
            # `seconds` before its line (the last step, or the thread's last move).
            p.stall.noisy, p.stall.since = True, when - line.seconds
            p.stall.stuck, p.stall.steps, p.stall.task, p.stall.greenlet = line.thread, line.steps, line.task, \
                line.greenlet


def _peer_wait(p, when):
    """An ended stall of a thread waiting for peer ranks in a collective: kept in p.peer_waits."""
    line = stalls.parse(p.stall.text)
    began = p.stall.since or p.stall.time
    if line is None or line.collective is None or when is None or began is None:
        return
    count, longest, where = p.peer_waits or (0, 0.0, None)
    seconds = when - began if line.shape == "noisy" else when - p.stall.time + line.seconds
    p.peer_waits = (count + 1, max(longest, seconds), line.collective if seconds >= longest else where)


def _gil(p, when, text, threads):
    """faulthandler's `Timeout (H:MM:SS)!` block: the watchdog thread could not run that long
    because C code held the GIL. With no stall open, it is the stall, and its stacks the only ones."""
    m = _TIMEOUT.match(text)
    seconds = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else 0.0
    threads = [t for t in threads if t.frames]  # `<no Python frame>`: a native thread, nothing to show
    p.gil = GilHeld(when, seconds, threads)
    if when is not None and seconds:
        # The timer fired `seconds` after the watchdog's last beat, and that beat came at most a
        # third of the timeout (at most 5 s) before the last line: the process was there then.
        p.last = max(p.last, when + seconds - min(seconds / 3.0, 5.0))
    if p.stall is None or p.stall.over is not None:
        p.stall = Stall(when, "the GIL was held (faulthandler's %s)" % text.rstrip("!"), threads, dumped=True, gil=True)
    elif not p.stall.dumped:
        p.stall.threads, p.stall.dumped = threads, True


def own(p, path):
    """Is this frame earlylog's own code? Known by the folder it was loaded from, never by a name."""
    return any(path.startswith(folder + os.sep) for folder in (OWN, p.own) if folder)


def _without_own_frames(p, threads):
    """earlylog's frames never stand as the program's: drop them, and threads made only of them."""
    kept = []
    for t in threads:
        at = [i for i, f in enumerate(t.frames) if not own(p, f.file)]
        if at or not t.frames:
            t.code = {new: t.code[old] for new, old in enumerate(at) if old in t.code}
            t.frames = [t.frames[i] for i in at]
            kept.append(t)
    return kept


def parse_threads(lines):
    """Threads of a stack block (earlylog dump, faulthandler output or a traceback)."""
    threads, cur, last_first = [], None, {}
    for line in lines:
        m = _FRAME.match(line)
        ours = None if m or line.startswith("thread ") else notes.parse_frame_line(line)
        if m or ours:
            if cur is None:
                cur = Thread("thread")
                threads.append(cur)
            if m:
                cur.frames.append(Frame(m.group(1), int(m.group(2)), m.group(3) or "<source>"))
            else:
                if ours[3]:
                    cur.code[len(cur.frames)] = ours[3]
                cur.frames.append(Frame(*ours[:3]))
            continue
        text = line.strip()
        if not text:
            continue
        if (line.startswith(("thread ", "Thread 0x", "Current thread 0x", "Traceback (most recent call last)"))
                or text.startswith("Stack (most recent call")):
            cur = Thread(text.rstrip(":"))
            threads.append(cur)
            last_first[id(cur)] = "most recent call last" in text
        elif cur is not None and line.startswith(notes.INDENT) and (line.startswith(notes.TASK) or
                                                                    not (cur.frames and line.startswith("    "))):
            cur.notes.append(text)  # kernel state, phase, asyncio's pending tasks and their await chains
    for t in threads:
        if last_first.get(id(t)):
            t.frames.reverse()
            t.code = {len(t.frames) - 1 - i: code for i, code in t.code.items()}
    cells(threads)  # a notebook's cells by their In[N] names
    return threads


def _tuple(version):
    return tuple(int(x) for x in version.split("."))


def _newer(version):
    try:
        return _tuple(version) > _tuple(__version__)
    except ValueError:
        return False


def _exit(e, when, record):
    """An exit record into model.Exit; a later one (the last flush's status 120) keeps the call and
    who made it, and replaces the status and time."""
    e.status, e.time, e.flush = record["status"], when, record["flush"]
    e.daemons = record["daemons"] or e.daemons
    if record["call"] is not None:
        e.call = record["call"]
        e.at, e.outer = _frame(record["at"]), _frame(record["outer"])
    if record["by"] is not None:
        e.by, e.main_at = record["by"], _frame(record["main_at"])


def _frame(place):
    """records' (function, file name, line) as a model.Frame."""
    return Frame(place[1], place[2], place[0]) if place is not None else None
