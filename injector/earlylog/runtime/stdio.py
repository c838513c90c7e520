"""The user's own stdout/stderr: made live (line-buffered) and copied into the log file (tee).
It must keep sys.stdout/sys.stderr real text streams and never block or reorder the user's output."""
import io
import os
import stat
import sys
from _thread import get_ident  # threading itself costs an import at start-up

_MAIN = get_ident()  # start() runs in the main thread
# A line that never ends (a progress bar redrawn with \r) is logged once it grows this long.
MAX_PENDING = 8192
# Called when the interpreter itself flushes the main thread's streams (no Python caller): the
# moment a script's top-level code has ended. hooks sets it to its after_main.
on_main_flush = None


class Tee(io.BufferedIOBase):
    """The binary layer under our sys.stdout/sys.stderr: forwards every write to the original
    buffer and copies whole lines into the log file. Lock-free: partial lines are kept per thread,
    so two threads never mix their halves and a fork child inherits no held lock."""

    def __init__(self, target, text, kind, logger, line_flush=False):
        super().__init__()
        self._target = target   # the original BufferedWriter: its fd, buffering and lock
        self._text = text       # the original TextIOWrapper, kept alive: its __del__ would close target
        self.kind = kind
        self._prefix = (kind + ": ").encode()  # a copied line's `out: ` (Logger.copy)
        self.logger = logger
        self.encoding = text.encoding or "utf-8"
        self._utf8 = self.encoding.lower().replace("_", "-") in ("utf-8", "utf8")
        self._pending = {}      # thread ident -> bytes of a line not ended yet
        self._line_flush = line_flush  # live output into a pipe: flush each line (or \r redraw) here
        # When the reader of a pipe goes away for good (EPIPE), Python's own buffering meets it in a
        # write, which raises and drops what it could not write (exit status 1), or in a flush the
        # program asked for, which keeps it buffered, so the exit-time flush fails again
        # ("Exception ignored", status 120). Our line flushes must not turn the first into the second.
        self._held = False      # a line flush of ours met a gone reader: Python would still buffer
        self._dropped = False   # a write met it: what it left buffered counts as dropped

    def write(self, data):
        chunk = bytes(data)  # the same object for bytes, which TextIOWrapper passes
        # Copied first, so the file has the line even when the console write fails. The usual
        # write, one whole ASCII line from a live print(), or the end of the line this thread
        # began (print() writes its "\n" alone where PYTHONUNBUFFERED is set), goes straight to
        # the log as it is (Logger.copy never raises); a \r (a redraw) or more lines take the
        # general path.
        if self._utf8 and chunk.isascii() and chunk.find(b"\n") == len(chunk) - 1 >= 0 and chunk.find(b"\r") < 0:
            line = self._pending.pop(get_ident(), b"") + chunk if self._pending else chunk
            if line is chunk or line.isascii() and line.find(b"\r") < 0:
                self.logger.copy(self._prefix, line)
            else:
                self._copy(line)
        else:
            self._copy(chunk)
        try:
            written = self._target.write(data)
        except BaseException as exc:
            self._dropped = isinstance(exc, BrokenPipeError)
            hide_frame(exc)
            raise
        self._dropped = False
        # find(), not `in`: bytes' `in` first tries its argument as an int, and pays for the TypeError.
        if self._line_flush and not self._held and (chunk.find(b"\n") >= 0 or chunk.find(b"\r") >= 0):
            try:
                self._target.flush()
            except BrokenPipeError:
                self._held = True  # silent, as a buffered line is without earlylog; the write after raises
            except BaseException as exc:
                hide_frame(exc)
                raise
        return written

    def _copy(self, data):
        try:
            self.logger.touch()
            me = get_ident()
            chunk = self._pending.pop(me, b"") + data
            lines = chunk.split(b"\n")
            rest = lines.pop()
            if len(rest) > MAX_PENDING:
                # Bounded memory: a redrawn bar keeps its last state, any other line its start.
                rest = rest[rest.rfind(b"\r") + 1:][-MAX_PENDING:] if b"\r" in rest else rest[:MAX_PENDING]
            if rest:
                self._pending[me] = rest
            for line in lines:
                self._log(line)
        except Exception:  # the copy is ours; the user's write must go on whatever happens here
            pass

    def _log(self, raw):
        # tqdm-style redraws: what the console shows last is the text after the last \r.
        shown = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1]
        try:
            text = shown.decode(self.encoding, "backslashreplace")
        except LookupError:
            text = shown.decode("utf-8", "backslashreplace")
        self.logger.event(self.kind, text, console=False)

    def drain(self):
        """Log every thread's unfinished line (at exit, so the last `print(end="")` is kept)."""
        for me in list(self._pending):
            rest = self._pending.pop(me, b"")
            if rest:
                self._log(rest)

    def after_fork(self, logger):
        self.logger = logger
        self._pending = {}

    def flush(self):
        if on_main_flush is not None and get_ident() == _MAIN:
            # No Python frame above ours: the interpreter's own flush after the main script ends,
            # or at shutdown (see on_main_flush). Inline: every live print() of the main thread
            # comes through here.
            try:
                sys._getframe(1)
            except ValueError:
                on_main_flush()
        if self._dropped:
            return  # nothing is left to flush without earlylog (see __init__)
        try:
            self._target.flush()
        except BaseException as exc:
            hide_frame(exc)
            raise
        self._held = False

    def close(self):
        # The std streams never close their fd (closefd=False); closing the original buffer here
        # would break sys.__stdout__ users, so only flush and mark this layer closed.
        if not self.closed:
            try:
                self.flush()
            finally:
                super().close()

    def fileno(self):
        return self._target.fileno()

    def isatty(self):
        return self._target.isatty()

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return self._target.seekable()

    def tell(self):
        return self._target.tell()

    def seek(self, pos, whence=0):
        return self._target.seek(pos, whence)

    def truncate(self, pos=None):
        return self._target.truncate(pos)

    @property
    def raw(self):
        return self._target.raw

    @property
    def name(self):
        return self._target.name

    @property
    def mode(self):
        return self._target.mode


def hide_frame(exc):
    """Let an error of the stream below pass up as if this layer were not there: Python 3.11+
    re-raises an exception with the traceback it carries, so the program's traceback reads as
    without earlylog (3.9 and 3.10 re-raise the traceback saved on entry, with this frame)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next


def _is_pipe(stream):
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _tee(stream):
    buffer = getattr(stream, "buffer", None)
    return buffer if isinstance(buffer, Tee) else None


def tees():
    """The Tee layers currently under sys.stdout and sys.stderr (for draining at exit)."""
    return [t for t in (_tee(sys.stdout), _tee(sys.stderr)) if t is not None]


def unfinished(ident):
    """The line thread `ident` has begun on stdout or stderr and not ended, e.g. the prompt
    `Continue? [y/N] ` that input() printed before it waits; '' if none. For the watchdog thread:
    only our own exact types are looked into, so a program's own sys.stdout object runs no code."""
    for stream in (sys.stdout, sys.stderr):
        if type(stream) is io.TextIOWrapper and type(stream.buffer) is Tee:
            tee = stream.buffer
            pending = tee._pending.get(ident)
            if pending:
                return pending.rsplit(b"\r", 1)[-1].decode(tee.encoding, "backslashreplace")
    return ""


def _wrap(stream, kind, logger, live):
    """A new TextIOWrapper like `stream` but over a Tee; the same encoding, errors and newline."""
    stream.flush()
    pipe = _is_pipe(stream)
    # Into a pipe, every write reaches the Tee at once and the Tee flushes whole lines itself (it
    # tells its own flushes from the program's; see Tee.__init__); elsewhere Python line-buffers.
    tee = Tee(stream.buffer, stream, kind, logger, line_flush=live and pipe)
    wrapper = io.TextIOWrapper(tee, encoding=stream.encoding, errors=stream.errors, newline="\n",
                               line_buffering=(live and not pipe) or stream.line_buffering,
                               write_through=(live and pipe) or stream.write_through)
    wrapper.mode = "w"
    return wrapper


def start(logger):
    """Make sys.stdout/sys.stderr live and/or teed, as EARLYLOG_LIVE and EARLYLOG_TEE say."""
    live, tee = logger.config.live, logger.config.tee
    for name, kind in (("stdout", "out"), ("stderr", "err")):
        stream = getattr(sys, name)
        existing = _tee(stream)
        if existing is not None:  # a fork child inherits our wrapper: point it at the new file
            existing.after_fork(logger)
            continue
        # Only the interpreter's own streams: pytest capture, IDE consoles or None stay untouched.
        if type(stream) is not io.TextIOWrapper or stream is not getattr(sys, "__%s__" % name):
            continue
        if tee and logger.fd is not None:
            wrapper = _wrap(stream, kind, logger, live)
            setattr(sys, name, wrapper)
            # `sys.stdout = sys.__stdout__` is the usual way to undo a redirect: keep the tee then.
            setattr(sys, "__%s__" % name, wrapper)
        elif live:
            stream.reconfigure(line_buffering=True, write_through=_is_pipe(stream))
