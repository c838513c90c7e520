"""Retry loops: a thread that fails the same way again and again, sleeping between tries, is
retrying, not idle. At each watchdog beat it reads the exception each thread is handling
(docs/design.md#retrying-is-not-idle) and counts the new ones caught at the same place; a stall
dump says it under the thread, and a `note: retrying: ...` line says it even while the loop logs
every failure (no stall dump comes then). It reads frames and exceptions only: it never runs the
program's code (no repr of the program's objects: only str, int and the built-in exceptions' own
text), never imports, and holds no program object beyond the one exception each thread was
handling at the last beat (so that a new one is told from it), which it lets go at the next."""
import time

from earlylog.grammar import records
from earlylog.runtime import redact, threads

QUIET = 60.0      # a thread seen handling nothing new for this long starts a new count
MIN_FAILURES = 2  # failures caught at one place before a thread is called retrying
MAX_THREADS = 256
_ADDRESS_NAMES = ("sa", "address", "addr", "sockaddr")  # socket.create_connection, urllib3, asyncio
# thread ident -> [(type, code, line) where caught, the exception it handled at the last beat (or None),
#                  failures seen, first, last (monotonic), count at the last note, time of that note]
seen = {}


def handling(ident, frame, current=None):
    """The exception a thread is handling now, or None: Python 3.10+ says it for every thread
    (sys._current_exceptions); on 3.9, an `except ... as e:` block's name is a local of its frame
    while the block runs (a sleep between tries inside it)."""
    if current is None:
        current = threads.current_exceptions()
    if current is not None:
        exc = current.get(ident)
        if type(exc) is tuple:
            exc = exc[1]  # 3.10, 3.11: (type, value, traceback)
        return exc if exc is not None and issubclass(type(exc), BaseException) else None
    for _ in range(3):
        if frame is None:
            break
        for value in _locals(frame).values():
            if issubclass(type(value), Exception):
                return value
        frame = frame.f_back
    return None


def _locals(frame):
    try:
        scope = frame.f_locals
    except Exception:
        return {}
    return scope if type(scope) is dict or hasattr(scope, "values") else {}


def _site(exc):
    """(type, code, line) of the place the exception was caught: its traceback's first entry."""
    tb = exc.__traceback__
    return (type(exc), tb.tb_frame.f_code, tb.tb_lineno) if tb is not None else (type(exc), None, 0)


def address(value):
    """`10.0.0.5:29500` or `[::1]:80` for an (host, port) tuple; None for anything else (never its repr)."""
    if type(value) is tuple and len(value) >= 2 and type(value[0]) is str and type(value[1]) is int:
        return ("[%s]:%d" if ":" in value[0] else "%s:%d") % (value[0], value[1])
    return None


def _target(exc):
    """The address a failed connect was for, from the frames its traceback (or its cause's) kept:
    socket.create_connection's `sa`, asyncio's and urllib3's `address`/`sa`."""
    for _ in range(3):
        if exc is None:
            break
        tb, frames = exc.__traceback__, []
        while tb is not None and len(frames) < 30:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            scope = _locals(frame)
            for name in _ADDRESS_NAMES:
                found = address(scope.get(name)) if name in scope else None
                if found:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def name(kind):
    """A built-in exception class's name (`ConnectionRefusedError`), another's with its module."""
    return kind.__name__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__qualname__)


def describe(exc):
    """`ConnectionRefusedError: [Errno 111] Connection refused, raised in connect at client.py:9,
    connecting to 127.0.0.1:1`: a built-in exception's own text (its __str__ is C), another's class
    name alone; the line of the call that raised it; the address a failed connect was for."""
    kind = type(exc)
    text = name(kind)
    if kind.__module__ == "builtins":
        try:
            words = redact.url(str(exc)[:200].replace("\n", " "))  # a URL's password, a token in its query
            text += ": " + words if words else ""
        except Exception:
            pass
    tb = exc.__traceback__
    if tb is not None:
        text += ", raised in " + records.place(tb.tb_frame.f_code.co_name, tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    target = _target(exc)
    return text + (", connecting to " + target if target else "")


def _count(ident, exc, now):
    """A failure is new when it is not the very exception handled at the last beat: the one held
    keeps its memory from being reused by the next (an id alone would match the next failure's)."""
    entry = seen.get(ident)
    site = _site(exc)
    if entry is not None and entry[1] is exc:
        return
    if records.polling(name(type(exc)), _target(exc) if name(type(exc)) in records.TIMEOUTS else None):
        seen.pop(ident, None)
        return
    if entry is None or entry[0] != site or now - entry[4] > QUIET:
        if len(seen) >= MAX_THREADS:
            seen.clear()
        seen[ident] = [site, exc, 1, now, now, 0, 0.0]
    elif entry[1] is not exc:
        entry[1], entry[2], entry[4] = exc, entry[2] + 1, now


def beat(names, every):
    """At a watchdog beat: count the new exception each thread handles, and return the
    `retrying: thread T: N failures seen in the last S s; handling E` notes due: a thread's first
    once it failed MIN_FAILURES times at one place, then when its count doubled or `every` seconds
    passed with more failures. names() gives {ident: thread name}, called only for a note. Never
    raises: the watchdog's loop goes on whatever a thread's exception holds."""
    try:
        return _beat(names, every)
    except Exception:
        return []


def _beat(names, every):
    current = threads.current_exceptions()
    frames = threads.current_frames() if current is None else {}
    now, out = time.monotonic(), []
    for ident in (current if current is not None else frames):
        exc = handling(ident, frames.get(ident), current)
        if exc is None:
            if ident in seen:
                seen[ident][1] = None  # between two tries: let its last exception go
            continue
        _count(ident, exc, now)
        entry = seen.get(ident)
        if entry is None:
            continue
        count, noted, noted_at = entry[2], entry[5], entry[6]
        if count < MIN_FAILURES or count == noted or (noted and count < 2 * noted and now - noted_at < every):
            continue
        entry[5], entry[6] = count, now
        out.append(records.retrying(names().get(ident, "?"), count, now - entry[3], describe(exc)))
    for ident in [i for i, e in seen.items() if now - e[4] > QUIET or i not in (current or frames)]:
        del seen[ident]  # quiet for long, or the thread ended
    return out


def lines(ident, frame):
    """A thread's dump notes: `handling: E` (the exception it handles now) and, for one seen failing
    at that place before, `retries: N failures seen in the last S s`."""
    exc = handling(ident, frame)
    if exc is None:
        return []
    from earlylog.grammar import notes  # loaded with the dump (stacks.py): the beats only count
    out = [notes.handling(describe(exc))]
    entry = seen.get(ident)
    if entry is not None and entry[0] == _site(exc) and entry[2] >= MIN_FAILURES:
        out.append(notes.retries(entry[2], entry[4] - entry[3]))
    return out
