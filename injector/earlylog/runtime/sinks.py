"""Where earlylog's lines go: the per-process log file and the console channel.
Every line is one write() per sink; a sink that blocks, fills up or breaks loses lines to itself
only, never raises, and never takes a lock (a fork child may inherit any lock held)."""
import errno
import os
import stat
import sys
import time

from earlylog.runtime import identity, records

_CONSOLE_FDS = {"stderr": 2, "stdout": 1}


def say(sentence):
    """One plain line on the real stderr, for the few problems the user must see; never raises."""
    try:
        os.write(2, ("earlylog: %s\n" % sentence).encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _high_fd(fd):
    """Move fd above 2, so a closed stdin/stdout/stderr is never silently replaced by our file."""
    if fd > 2:
        return fd
    import fcntl
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def private_dir(path):
    """Create or accept a per-user 0700 folder in a shared place, refusing planted symlinks."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError("%s is not a plain folder (a symlink or file is in the way)" % path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError("%s belongs to another user or is open to others" % path)
    return path


def default_base():
    """The per-user folder that holds one sub-folder per run when EARLYLOG_DIR is unset."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, "earlylog-%d" % os.getuid())


def new_run_dir(started):
    """Make a fresh per-user run folder `<time>-<pid>` under default_base(); returns its path."""
    base = private_dir(default_base())
    return private_dir(os.path.join(
        base, time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) + "-%d" % os.getpid()))


def _default_dir(started):
    """A fresh run folder, exported so every child logs beside us."""
    run = new_run_dir(started)
    os.environ["EARLYLOG_DIR"] = run
    return run


def _user_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:  # makedirs' strerror would be a puzzling "File exists"
        raise OSError("it is a file, not a folder")
    except NotADirectoryError:
        raise OSError("part of its path is a file, not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise OSError("it is not writable")
    return path


def _open_new(path):
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    return _high_fd(os.open(path, flags, 0o600))


def file_name(started, ident):
    """`<time>-<host>-<pid>-<role>[-rank<N>].log`: what the process is, readable in `ls`."""
    parts = [time.strftime("%Y%m%d-%H%M%S", time.localtime(started)), identity.safe_name(ident.host),
             str(ident.pid), identity.safe_name(ident.role)]
    if ident.rank is not None:
        parts.append("rank%d" % ident.rank)
    return "-".join(parts) + ".log"


def _absolute(config):
    """A relative EARLYLOG_DIR or EARLYLOG_FILE names a place under this process's cwd: a child
    started in another folder would log elsewhere, and the run's report would miss it. Made
    absolute once, in the environment too, by the first process of the tree; its children inherit it."""
    for name, attr in (("EARLYLOG_DIR", "dir"), ("EARLYLOG_FILE", "file")):
        value = getattr(config, attr)
        if value and not os.path.isabs(value):
            try:
                value = os.path.abspath(value)
            except OSError:  # the cwd was removed: the place stays relative, as given
                continue
            setattr(config, attr, value)
            os.environ[name] = value


def open_log(config, ident, started, explicit=None):
    """Open this process's log file, falling back step by step; returns (fd, path) or (None, None)."""
    _absolute(config)
    wanted = explicit or config.file
    if wanted:
        try:
            return _open_new(wanted), wanted
        except OSError as exc:
            say("cannot write %s%r (%s); using the log folder instead"
                % ("the log file " if explicit else "EARLYLOG_FILE=", wanted, _reason(exc)))
    name = file_name(started, ident)
    folders = []
    if config.dir:
        folders.append(("EARLYLOG_DIR=%r" % config.dir, lambda: _user_dir(config.dir)))
    folders.append(("the default log folder %r" % default_base(), lambda: _default_dir(started)))
    for label, make in folders:
        try:
            path = os.path.join(make(), name)
            return _open_new(path), path
        except OSError as exc:
            say("cannot use %s (%s); %s" % (label, _reason(exc),
                "trying the default folder" if make is not folders[-1][1] else "logging to the console only"))
    return None, None


def _identity(fd):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _still_ours(fd, identity):
    """Raise EBADF once the program closed our fd (a daemonizer's closerange) and its number was
    reused: writing on would put our lines into one of its files."""
    if _identity(fd) != identity:
        raise OSError(errno.EBADF, "the program closed it and reused its number")


def _reason(exc):
    if getattr(exc, "errno", None) == errno.ELOOP:  # O_NOFOLLOW's "Too many levels of symbolic links"
        return "it is a symlink, and earlylog never follows one"
    return exc.strerror or str(exc) if isinstance(exc, OSError) and exc.strerror else str(exc)


def _write_without_sigpipe(fd, data):
    """os.write to a pipe with SIGPIPE held back: a program that set SIGPIPE to SIG_DFL may die of
    its own writes to a gone reader, never of ours (docs/design.md#sigpipe-held-back)."""
    import _signal  # not signal: signal.py builds its enums on import, 1.5 ms of start-up
    if not hasattr(_signal, "pthread_sigmask"):
        return os.write(fd, data)
    pipe = _signal.SIGPIPE
    held = _signal.pthread_sigmask(_signal.SIG_BLOCK, (pipe,))
    try:
        return os.write(fd, data)
    finally:
        if pipe not in held:
            if pipe in _signal.sigpending():
                _signal.sigwait((pipe,))  # ours, pending: take it back before unblocking
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, (pipe,))


class Console:
    """The console channel: never blocks, never raises; lines it cannot deliver are counted."""

    def __init__(self, mode):
        self.dropped = 0
        self.fd = None
        self.sock = None
        self.kind = "off"
        self.encoding = "utf-8"
        if mode == "off":
            return
        fd = _CONSOLE_FDS[mode]
        try:
            st = os.fstat(fd)
        except OSError:
            return  # closed (`2>&-`): nothing to write to
        stream = sys.stderr if fd == 2 else sys.stdout
        self.encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            if stat.S_ISFIFO(st.st_mode):
                # A description of our own, so O_NONBLOCK never leaks into the user's writes.
                self.fd = _high_fd(os.open("/proc/self/fd/%d" % fd, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                self.kind = "pipe"
            elif stat.S_ISSOCK(st.st_mode):
                # Node.js gives its children socketpairs; MSG_DONTWAIT keeps each send non-blocking.
                import socket
                self.sock = socket.socket(fileno=_high_fd(os.dup(fd)))
                self.kind = "socket"
            else:
                self.fd = _high_fd(os.dup(fd))
                self.kind = "tty" if os.isatty(fd) else "file"
        except OSError:
            self.fd = self.sock = None
            self.kind = "off"
            return
        self._id = _identity(self.fd if self.sock is None else self.sock.fileno())

    def write(self, text):
        if self.kind == "off":
            return
        data = text.encode(self.encoding, "backslashreplace") if self.encoding else text.encode()
        try:
            _still_ours(self.fd if self.sock is None else self.sock.fileno(), self._id)
            if self.sock is not None:
                import socket
                # MSG_NOSIGNAL: a GUI that closed its end must not SIGPIPE the program (docs/design.md#sigpipe-held-back).
                sent = self.sock.send(data, socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0))
            elif self.kind == "pipe":
                sent = _write_without_sigpipe(self.fd, data)
            else:
                sent = os.write(self.fd, data)
            if sent < len(data):
                self.dropped += 1
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
        except (OSError, LookupError, ValueError):
            # EPIPE (reader gone) or a closed fd: the console is gone for good.
            self.dropped += 1
            self.kind = "off"


class Logger:
    """One process's earlylog: formats events and writes each to the file and the console."""

    def __init__(self, config, ident, started, fd, path, console):
        self.config = config
        self.ident = ident
        self.started = started
        self.fd = fd
        self.path = path
        self.console = console
        self.file_failed = 0
        self.last_activity = time.monotonic()
        self._file_id = _identity(fd) if fd is not None else None

    def touch(self):
        """Record a sign of life (a user write) without writing a line."""
        self.last_activity = time.monotonic()

    def event(self, kind, text, more=(), console=True):
        """Write `kind: text` plus continuation lines; returns nothing and never raises."""
        try:
            line = records.format_lines(self.config.format, time.time(), self.ident.pid, self.ident.tag,
                                        self.ident.host, kind, text, more)
        except Exception as exc:  # a str() that raises, say: never the user's problem
            line = "[earlylog] unformattable %s line (%r)\n" % (kind, exc)
        self.last_activity = time.monotonic()
        self.write_file(line.encode("utf-8", "backslashreplace"))
        if console:
            self.console.write(line)

    def write_file(self, data):
        if self.fd is None:
            return
        try:
            _still_ours(self.fd, self._file_id)
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as exc:
            self.file_failed += 1
            if self.file_failed == 1:
                say("cannot write the log file %s (%s); its lines go to the console only"
                    % (self.path, _reason(exc)))
            if exc.errno in (errno.EBADF,):
                self.fd = None
