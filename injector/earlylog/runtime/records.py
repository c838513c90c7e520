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
        base = {"ts": round(now, 3), "time": clock(now), "pid": pid, "tag": tag, "host": host}
        return "".join(json.dumps(dict(base, kind=k, msg=cut(m)), ensure_ascii=False) + "\n"
                       for k, m in [(kind, text)] + [("|", line) for line in more])
    messages = ["%s: %s" % (kind, text)] + [CONTINUATION + line for line in more]
    head = "%s %s %d %s " % (PREFIX, clock(now), pid, tag)
    return "".join(head + cut(m.replace("\n", "\\n")) + "\n" for m in messages)


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
