"""The log line format, written by the runtime and read back by `earlylog report` and `tail`.
It owns formatting and parsing only; it must never open, write or read a file itself."""
import time

PREFIX = "[earlylog]"
MAX_LINE = 4000
CONTINUATION = "| "
# Every event line's message is `<kind>: <text>`; the report keys on these kinds.
KINDS = ("start", "exit", "exec", "exception", "signal", "fatal", "stall", "dump", "phase", "probe",
         "WARNING", "out", "err", "mem", "fork", "mark", "note", "earlylog")

# The console's rule (docs/log-format.md#the-console): a healthy run shows one line, the first
# process's start line; a line reaches the console only where a person should act on it, and the
# log file holds them all. Kinds whose lines stay in the file whatever their writer offers: the
# work of a healthy run (phases, forks, notes, memory, probes, dumps, execs, the copy of the
# program's output). A stall line's writer applies grammar/stalls.py's rule; an exit reaches it
# only with a non-zero status; a phase only while it still waits (a rendezvous); the first
# process's start line only (boot.py). EARLYLOG_CONSOLE=all shows every line a writer offers.
FILE_ONLY = frozenset(("phase", "fork", "note", "mem", "probe", "dump", "exec", "out", "err"))
STILL_WAITING = "waiting "  # a phase's reminder (phases.py): `waiting barrier: still waiting for peers ...`


# The bounded log (EARLYLOG_MAX_LOG, sinks.Logger): the kept last part of the program's output is
# written (grammar/bound.py's note first) before one of these records.
KEEPS_TAIL = ("exit", "exception", "stall", "signal")


def needs_person(kind, text):
    """Does a line its writer offers the console belong there by the console's rule?"""
    if kind in FILE_ONLY:
        return kind == "phase" and text.startswith(STILL_WAITING)
    return kind != "exit" or not text.startswith("status 0 ")


# What the reader parses, each beside its writer below; compiled on first use (_re): the runtime
# only formats, and must not pay for `re` at start-up.
UNRAISABLE = "unraisable: "  # an `exception:` event's first words for an error Python could not raise (hooks.py)
CONSOLE_OFF = "console lines off: "  # a `note:`'s first words in a child whose console lines are off (boot.py)
ENDED_BY_US = "ended by earlylog: "  # an exit record's words for a process EARLYLOG_STALL_EXIT ended (act.py)
_PLACE = r"(\S+) at ([^:;]+):(\d+)"  # place()'s words: function, file, line
_REGEXES = {
    "line": r"^\[earlylog\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (\d+) (\S+) (.*)$",
    "kind": r"^([A-Za-z]+): ?",
    "start": r"^pid \d+ \(parent (\d+)\) (.*); log (.*) \(via ",
    "origin": r"\(via (\w+), earlylog ",
    "version": r"earlylog (\d+(?:\.\d+)+)",
    "package": r"earlylog \d+(?:\.\d+)+ at (/.*?), Python ",
    "grandparent": r"\(via [^;]*\); grandparent (\d+)",
    "place": r"; distributed ((?:\w+=\S+ ?)+)$",
    "stacks after": r"^watchdog: stacks after (\d+(?:\.\d+)?) s of silence",
    "oom": r"; oom_kill (\d+)",
    "share": r" \((\d+)%\)",
    "init rank": r"\binit_process_group\b.*?\brank=(\d+) world_size=(\d+)",
    "init master": r"\binit_process_group\b.*?\bmaster=(\S+)",
    "retrying": r"^retrying: thread (.+?): (\d+) failures seen in the last ([\d.]+) s; handling (.+)$",
    "fork": r"^fork\(\) while (\d+) other threads? runs? \((.*?)\)(?::| and \d+ threads? with no Python stack)",
    "fork native": r"^fork\(\) while (?:\d+ other threads? runs? \(.*?\) and )?(\d+) threads? with no Python stack",
    "in thread": r"^in thread (.+?): (\S.*)$",
    "in task": r"^in a task on thread (.+?) \(kept in its Future\): (\S.*)$",
    "status": r"status (-?\d+)",
    # An argument is a repr, which may hold "; ": the call ends where what may follow it begins.
    "call": r"; ((?:sys\.exit|exit|os\._exit|raise SystemExit)\(.*?\)(?: in %s(?:, from %s)?)?"
            r"|python could not open the script .*?)(?=; from (?:thread |the main thread)"
            r"|; daemon threads? still at work: |; \d+ console lines? dropped|$)" % (_PLACE, _PLACE),
    "daemons": r"; daemon threads? still at work: (.*?)(?=; \d+ console lines? dropped|$)",
    "ended": ENDED_BY_US + r"stuck for (\d+ s) in (.*) \(EARLYLOG_STALL_EXIT=([^)]*)\)",
    "by": r"; from (thread .+?|the main thread)(?: while the main thread was in %s)?(?:; |$)" % _PLACE,
    "flush": r"; flushing (stdout|stderr) at exit failed \((\w+)\)(; the reader of its \w+ went away)?",
}
_COMPILED = {}


def _re(name):
    pattern = _COMPILED.get(name)
    if pattern is None:
        import re
        pattern = _COMPILED[name] = re.compile(_REGEXES[name])
    return pattern



# Exceptions that say "nothing yet" rather than "failed": a loop that catches them and sleeps polls
# (a queue's get_nowait, a non-blocking socket), as an idle worker does. A timeout is a failure only
# for a connect (the traceback kept its address): else it is a timed wait for work or a result.
# runtime/retries.py counts the others at its beats; the reader tells a worker polling for work from
# one retrying a failure by the name a `handling:` note or a `retrying:` line gives.
POLLS = frozenset(("_queue.Empty", "queue.Empty", "asyncio.queues.QueueEmpty", "BlockingIOError", "InterruptedError",
                   "StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit"))
TIMEOUTS = frozenset(("TimeoutError", "socket.timeout", "concurrent.futures._base.TimeoutError",
                      "asyncio.exceptions.TimeoutError"))


def start_line(pid, ppid, argv, path, origin, version, package, python, grandparent=None, place=""):
    """The `start:` line (boot.py): argv as `argv WORDS`; path, the log file or None; origin, which
    hook started it (pth, start, sitecustomize, fork, ...); package, the runtime's folder (a reader
    knows earlylog's own frames by it); grandparent, for a supervisor behind a parent that does
    not log; place, identity.place()'s `rank=3 ... job=4711`."""
    return "pid %d (parent %d) %s; log %s (via %s, earlylog %s at %s, Python %s)%s%s" % (
        pid, ppid, argv, path or "unavailable", origin, version, package, python,
        "; grandparent %d" % grandparent if grandparent else "", "; distributed " + place if place else "")


def parse_start(text):
    """start_line()'s fields as a dict: ppid (int) and argv (the `argv ...` words), origin,
    version, package, grandparent (int), place ({"rank": 3, ..., "job": "4711"}); each None (place
    {}) where the line has no such part (an older earlylog's)."""
    out = {}
    m = _re("start").match(text)
    out["ppid"], out["argv"] = (int(m.group(1)), m.group(2)) if m else (None, None)
    for name in ("origin", "version", "package", "grandparent"):
        m = _re(name).search(text)
        out[name] = m.group(1) if m else None
    out["grandparent"] = int(out["grandparent"]) if out["grandparent"] else None
    m = _re("place").search(text)
    out["place"] = {k: int(v) if v.isdigit() and k != "job" else v  # a job id is a name: `4711`, `4711_3`
                    for k, _, v in (w.partition("=") for w in m.group(1).split())} if m else {}
    return out


def in_thread(name):
    """The first words of the `exception:` event of a thread that died of it (hooks.py)."""
    return "in thread %s: " % name


def parse_in_thread(text):
    """(the thread's name, the exception's words) of an `exception:` event in_thread() began, else None."""
    m = _re("in thread").match(text)
    return m.groups() if m else None


def in_task(name):
    """The first words of the `exception:` event of an executor's task that raised (hooks.py): the
    exception is kept in the task's Future and printed only where the program reads it."""
    return "in a task on thread %s (kept in its Future): " % name


def parse_in_task(text):
    """(the thread's name, the exception's words) of an `exception:` event in_task() began, else None."""
    m = _re("in task").match(text)
    return m.groups() if m else None


def init_words(backend, init, rank, world, master, timeout):
    """The detail of the `init_process_group` phase (marks.py): what it was given; rank and world
    size `?` where neither the call nor the environment says, master `-` where it is not known."""
    return "backend=%s init_method=%s rank=%s world_size=%s master=%s timeout=%s" % (
        backend, init, rank, world, master, timeout)


def parse_init(phase):
    """(rank, world size) or None, and the master's `HOST:PORT` (`-`) or None, from a phase's text
    (`init_process_group backend=gloo ... rank=1 world_size=2 master=10.0.0.5:29500 ...`)."""
    rank, master = _re("init rank").search(phase or ""), _re("init master").search(phase or "")
    return (int(rank.group(1)), int(rank.group(2))) if rank else None, master.group(1) if master else None


def mem_line(rss, used=None, limit=None, share=None, oom=None, was=None):
    """The `mem:` line (breadcrumbs.py): rss, and the cgroup's use and limit, as text (`812 MiB`);
    share, the use in % of the limit; oom, the cgroup's oom_kill count; was, the count on the line
    before when it rose since."""
    text = "rss %s" % rss
    if used is not None:
        text += "; cgroup %s" % used
        text += " of %s (%d%%)" % (limit, share) if limit else " (no limit)"
    if oom is not None:
        text += "; oom_kill %d" % oom
        if was is not None:
            text += " (up from %d: the kernel's OOM killer killed a process in this cgroup)" % was
    return text


def parse_mem(text):
    """(the oom_kill count or None, the cgroup's use in % of its limit or None, whether the count
    rose since the line before) from mem_line()'s text."""
    oom, share = _re("oom").search(text), _re("share").search(text)
    return int(oom.group(1)) if oom else None, int(share.group(1)) if share else None, " (up from " in text


DEFAULT_STALL = 30.0  # EARLYLOG_STALL's default (config.py), and the reader's for a log without the note below


def stacks_after(stall):
    """The watchdog's note at start (fault.py) begins `watchdog: ` and this: its EARLYLOG_STALL."""
    return "stacks after %g s of silence" % stall if stall else "stall dumps off"


def parse_stacks_after(text):
    """The stall threshold (seconds) a `watchdog:` note names, else None (stall dumps off)."""
    m = _re("stacks after").match(text)
    return float(m.group(1)) if m else None


def retrying(thread, count, seconds, handling):
    """The watchdog's `note: retrying: ...` line (retries.py): a thread failing again and again
    between sleeps; handling: the `handling:` note's words (notes.py parses them)."""
    return "retrying: thread %s: %d failures seen in the last %.1f s; handling %s" % (thread, count, seconds, handling)


def parse_retrying(text):
    """(thread, count, seconds, handling) from retrying()'s line, else None."""
    m = _re("retrying").match(text)
    return (m.group(1), int(m.group(2)), float(m.group(3)), m.group(4)) if m else None


def fork_threads(names, native=0):
    """The `fork:` line (fault.py, before a fork): the program's other threads by name, and how many
    threads with no Python stack ran (a native pool: OpenMP's, a BLAS's)."""
    ran = "%d other thread%s run%s (%s)" % (len(names), "" if len(names) == 1 else "s", "s" if len(names) == 1 else "",
                                            ", ".join(names)) if names else ""
    if native:
        ran += "%s%d thread%s with no Python stack%s (a native pool: OpenMP, BLAS, gRPC)" % (
            " and " if names else "", native, "" if native == 1 else "s",
            "" if names else " run" if native > 1 else " runs")
    return "fork() while %s: a lock any of them holds stays locked forever in the child, the classic " \
           "DataLoader-worker deadlock; the 'spawn' or 'forkserver' start method avoids it" % ran


def parse_fork_threads(text):
    """(how many, their names as one text) of the Python threads fork_threads() named, else None."""
    m = _re("fork").match(text)
    return (int(m.group(1)), m.group(2)) if m else None


def parse_fork_native(text):
    """How many threads with no Python stack a fork_threads() line counts (0 if none)."""
    m = _re("fork native").search(text)
    return int(m.group(1)) if m else 0


def polling(error, target):
    """Is an exception of this name (`queue.Empty`) a poll's "nothing yet", not a failure?"""
    return error in POLLS or error in TIMEOUTS and not target


def safe_name(text):
    """Text made safe for a file name and a record's host: letters, digits, '.', '_' and '-' only, 40 at most."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in text)
    return kept[:40] or "python"


def default_base():
    """The per-user folder that holds one sub-folder per run when EARLYLOG_DIR is unset (sinks.py
    makes the runs there; `earlylog report` reads the newest)."""
    import os
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, "earlylog-%d" % os.getuid())


def place(function, filename, line):
    """`main at train.py:12`: where a call was made, as the runtime writes it and the reader reads it."""
    return "%s at %s:%d" % (function, filename.rpartition("/")[2], line)


# --- The exit record: `exit: status N after S s; HOW[; FROM][; DAEMONS][; DROPPED]`, or a
# second one, `exit: status 120 after S s; FLUSH`. Its words are written (hooks.py, act.py) and read
# (parse_exit, for logread) here only. A place below is (function, filename, line).


def exit_line(status, seconds, how):
    """The exit record's words: `status N after S s; HOW`, HOW and what follows it below."""
    return "status %d after %.3f s; %s" % (status, seconds, how)


def exec_line(call, words):
    """The exec record's words, written just before os.exec* replaces the program (hooks.py): the
    call as exit_call writes one (`os.execvp('sh') in main at a.py:3`), then the program that
    replaces it, quoted and redacted as the start line's argv: `; argv sh -c 'exit 4'`."""
    return "%s; argv %s" % (call, words)


def parse_exec(text):
    """An exec record's (call, argv words)."""
    call, _, words = text.partition("; argv ")
    return call, words


def exit_call(how, arg, at=None, outer=None):
    """HOW for an exit call that was seen: `sys.exit(3)`, `sys.exit(3) in main at a.py:5`, and for a
    call in a library the program's own frame that led there: `exit(2) in exit at argparse.py:2633,
    from main at train.py:12`. how: sys.exit, exit, os._exit, raise SystemExit, or an os.exec* function."""
    text = "%s(%s)" % (how, arg)
    if at is not None:
        text += " in " + place(*at)
        if outer is not None:
            text += ", from " + place(*outer)
    return text


def exit_from(thread=None, main_at=None):
    """FROM, who called os._exit when the program's own code did: `; from the main thread` (thread
    None), `; from thread loader while the main thread was in main at a.py:9`."""
    if thread is None:
        return "; from the main thread"
    return "; from thread %s%s" % (thread, " while the main thread was in " + place(*main_at) if main_at else "")


def exit_flush(stream, error, gone):
    """FLUSH: the interpreter's last flush of stdout or stderr failed; gone: the reader went away."""
    return "flushing %s at exit failed (%s)%s" % (stream, error, "; the reader of its %s went away" % stream
                                                   if gone else "")


def exit_daemons(working):
    """The part of an exit record naming the daemon threads still at work (daemons.py), which Python
    stops at exit without a word: `; daemon thread still at work: saver in save at ckpt.py:4`.
    working: [(name, place())]."""
    return "; daemon thread%s still at work: %s" % ("" if len(working) == 1 else "s", ", ".join(
        "%s in %s" % pair for pair in working))


def exit_dropped(count):
    """The end of an exit record whose console lost lines."""
    return "; %d console line%s dropped (console full or gone)" % (count, "s" if count != 1 else "")


def ended_by_us(stuck_for, where, knob):
    """HOW of a process EARLYLOG_STALL_EXIT ended: `ended by earlylog: stuck for 6 s in f at a.py:5
    (EARLYLOG_STALL_EXIT=6)`."""
    return "%sstuck for %.0f s in %s (EARLYLOG_STALL_EXIT=%g)" % (ENDED_BY_US, stuck_for, where, knob)


def parse_exit(text):
    """An exit record's words as a dict: status (int or None); call, the exit call or the script
    Python could not open (`sys.exit(3) in main at a.py:5`, None if none was seen); at and outer,
    the places in it; by, who called os._exit (`thread loader`, `the main thread`) and main_at,
    where the main thread then was; flush, (stream, error, whether its reader went away); ended,
    (seconds, where, knob) of EARLYLOG_STALL_EXIT; daemons, the daemon threads still at work
    (`saver in save at ckpt.py:4, ...`) or None."""
    status, daemons = _re("status").search(text), _re("daemons").search(text)
    out = {"status": int(status.group(1)) if status else None, "call": None, "at": None, "outer": None,
           "by": None, "main_at": None, "flush": None, "ended": None, "daemons": daemons.group(1) if daemons else None}
    call = _re("call").search(text)
    if call:
        out["call"] = call.group(1)
        out["at"], out["outer"] = _place(call.group(2), call.group(3), call.group(4)), \
            _place(call.group(5), call.group(6), call.group(7))
    ended = parse_ended(text)
    if ended:
        out["call"], out["ended"] = text[text.index(ENDED_BY_US):], ended
    by = _re("by").search(text)
    if by:
        out["by"] = by.group(1)
        out["main_at"] = _place(by.group(2), by.group(3), by.group(4))
    flush = _re("flush").search(text)
    if flush:
        out["flush"] = (flush.group(1), flush.group(2), bool(flush.group(3)))
    return out


def parse_ended(text):
    """(`6 s`, where, the knob's value) from ended_by_us()'s words in text, else None."""
    ended = _re("ended").search(text or "")
    return ended.groups() if ended else None


def _place(function, filename, line):
    return (function, filename, int(line)) if function is not None else None


_second = (None, "")  # (whole second, its local time text): one tuple, so a reader never sees half


def clock(now):
    """Local time with milliseconds, as every text line starts."""
    global _second
    whole = int(now)
    cached = _second
    if cached[0] != whole:
        # localtime + strftime dominate the cost of a line; they change once a second.
        cached = _second = (whole, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(whole)))
    return cached[1] + ".%03d" % (int(now * 1000) % 1000)


def cut(text, limit=MAX_LINE):
    """Bound one line's length, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + " ...[%d more characters cut]" % (len(text) - limit)


def format_lines(fmt, now, pid, tag, host, kind, text, more=()):
    """One event (and its continuation lines) as one string ready for a single write()."""
    if fmt == "json":
        import json
        # ts is cut to the millisecond as time is (not rounded): a reader merging text and JSON
        # logs must not see one moment as two.
        base = {"ts": int(now * 1000) / 1000.0, "time": clock(now), "pid": pid, "tag": tag, "host": host}
        return "".join(json.dumps(dict(base, kind=k, msg=cut(m)), ensure_ascii=False) + "\n"
                       for k, m in [(kind, text)] + [("|", line) for line in more])
    messages = ["%s: %s" % (kind, text)] + [CONTINUATION + line for line in more]
    head = "%s %s %d %s " % (PREFIX, clock(now), pid, tag)
    return "".join(head + cut(m.replace("\n", "\\n")) + "\n" for m in messages)


class Formatter:
    """format_lines for one process: its pid, tag and host given once. A one-line text event (a
    teed print, a log() call) is one concatenation onto a head built once per millisecond;
    anything else goes through format_lines."""
    __slots__ = ("fmt", "pid", "tag", "host", "_fast", "_head")

    def __init__(self, fmt, pid, tag, host):
        self.fmt, self.pid, self.tag, self.host = fmt, pid, tag, host
        self._fast = fmt == "text"
        self._head = (None, "")  # (whole millisecond, its head): one tuple, so a reader never sees half

    def lines(self, now, kind, text, more=()):
        """format_lines(fmt, now, pid, tag, host, kind, text, more) for this process."""
        if (more or not self._fast or type(text) is not str or "\n" in text
                or len(text) + len(kind) + 2 > MAX_LINE):
            return format_lines(self.fmt, now, self.pid, self.tag, self.host, kind, text, more)
        return f"{self._at(now)}{kind}: {text}\n"

    def copied(self, now, prefix, line):
        """The text format's line for a whole line of a program's output copied as it is: bytes,
        `KIND: ` as prefix, line ending in its one \n (the tee's usual write, stdio.py); None where
        lines() must format it (the JSON format, a line past MAX_LINE)."""
        if not self._fast or len(line) + len(prefix) > MAX_LINE:
            return None
        return self._at(now).encode("utf-8", "backslashreplace") + prefix + line

    def _at(self, now):
        """A line's head for now: `[earlylog] TIME PID TAG `, made once per millisecond."""
        milli = now * 1000 // 1  # the millisecond clock() prints, without int()'s call
        head = self._head
        if head[0] != milli:
            head = self._head = (milli, "%s %s %d %s " % (PREFIX, clock(now), self.pid, self.tag))
        return head[1]


def parse(line):
    """One line (text or JSON) as a dict with time, pid, tag, kind, msg; None if it is not ours."""
    line = line.rstrip("\r\n")
    text_pattern, kind_pattern = _re("line"), _re("kind")
    if line.startswith("{"):
        import json
        try:
            obj = json.loads(line)
            return {"time": obj["time"], "ts": obj.get("ts"), "pid": int(obj["pid"]),
                    "tag": obj["tag"], "kind": obj["kind"], "msg": obj["msg"], "host": obj.get("host")}
        except (ValueError, KeyError, TypeError):
            return None
    m = text_pattern.match(line)
    if not m:
        return None
    message = m.group(4)
    if message.startswith(CONTINUATION.rstrip()):
        kind, text = "|", message[2:]
    else:
        k = kind_pattern.match(message)
        kind, text = (k.group(1), message[k.end():]) if k else ("", message)
    return {"time": m.group(1), "ts": None, "pid": int(m.group(2)), "tag": m.group(3),
            "kind": kind, "msg": text, "host": None}
