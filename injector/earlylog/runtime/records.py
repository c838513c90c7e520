"""The log line format, written by the runtime and read back by `earlylog report` and `tail`.
It owns formatting and parsing only; it must never open, write or read a file itself."""
import time

PREFIX = "[earlylog]"
MAX_LINE = 4000
CONTINUATION = "| "
# Every event line's message is `<kind>: <text>`; the report keys on these kinds.
KINDS = ("start", "exit", "exception", "signal", "fatal", "stall", "dump", "phase", "probe",
         "WARNING", "out", "err", "mem", "fork", "mark", "note", "earlylog")

# Compiled on first parse: the runtime only formats, and must not pay for `re` at start-up.
_PATTERNS = []



# Exceptions that say "nothing yet" rather than "failed": a loop that catches them and sleeps polls
# (a queue's get_nowait, a non-blocking socket), as an idle worker does. A timeout is a failure only
# for a connect (the traceback kept its address): else it is a timed wait for work or a result.
# runtime/retries.py counts the others at its beats; the reader tells a worker polling for work from
# one retrying a failure by the name a `handling:` note or a `retrying:` line gives.
POLLS = frozenset(("_queue.Empty", "queue.Empty", "asyncio.queues.QueueEmpty", "BlockingIOError", "InterruptedError",
                   "StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit"))
TIMEOUTS = frozenset(("TimeoutError", "socket.timeout", "concurrent.futures._base.TimeoutError",
                      "asyncio.exceptions.TimeoutError"))


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

def outer(frame):
    """The innermost frame of the program's own code from frame outwards (not the standard
    library's nor an installed package's), or None; read at exit or on a rare event, not at start-up."""
    import os
    import sys
    libraries = tuple({os.path.dirname(os.__file__) + os.sep} | {p + os.sep for p in sys.path if p.endswith("-packages")})
    while frame is not None and frame.f_code.co_filename.startswith(libraries):
        frame = frame.f_back
    return frame


def _patterns():
    if not _PATTERNS:
        import re
        _PATTERNS.append(re.compile(r"^\[earlylog\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (\d+) (\S+) (.*)$"))
        _PATTERNS.append(re.compile(r"^([A-Za-z]+): ?"))
    return _PATTERNS


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
        milli = now * 1000 // 1  # the millisecond clock() prints, without int()'s call
        head = self._head
        if head[0] != milli:
            head = self._head = (milli, "%s %s %d %s " % (PREFIX, clock(now), self.pid, self.tag))
        return f"{head[1]}{kind}: {text}\n"


def parse(line):
    """One line (text or JSON) as a dict with time, pid, tag, kind, msg; None if it is not ours."""
    line = line.rstrip("\r\n")
    text_pattern, kind_pattern = _patterns()
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
