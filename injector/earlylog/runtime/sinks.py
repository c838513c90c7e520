"""Where earlylog's lines go: the per-process log file and the console channel.
Every line is one write() per sink and no other system call; a sink that blocks, fills up or breaks
loses lines to itself only, never raises, and never takes a lock (a fork child may inherit any
lock held)."""
import errno
import os
import stat
import sys
import time

from earlylog.grammar import records
from earlylog.runtime import identity
from earlylog.runtime.state import HIGH_FD

CONSOLE_FDS = {"stderr": 2, "stdout": 1, "off": None}  # EARLYLOG_CONSOLE -> the fd it writes to
_now, _monotonic, _write = time.time, time.monotonic, os.write  # looked up once: every line uses them
# Counts this process's forks from the first earlylog import on, bumped in each fork child: a
# Logger writes only in the process that made it, so a child that did not start earlylog of its
# own (subprocess's preexec_fn, a failed start) never writes into its parent's file as its parent.
_lineage = 0


def _forked():
    global _lineage
    _lineage += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def say(sentence):
    """One plain line on the real stderr, for the few problems the user must see; never raises."""
    try:
        os.write(2, ("earlylog: %s\n" % sentence).encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _high_fd(fd):
    """Move fd to the first free number from HIGH_FD up (close-on-exec), or, where the open-files
    limit is lower, at least above 2: a closed stdin/stdout/stderr must never get our file."""
    for target in range(HIGH_FD, HIGH_FD + 64):
        try:
            os.fstat(target)
            continue  # taken: the program's, or inherited from a parent's earlylog
        except OSError as exc:
            if exc.errno != errno.EBADF:
                continue
        try:
            os.dup2(fd, target, inheritable=False)
        except OSError:
            break  # above the open-files limit
        os.close(fd)
        return target
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


def new_run_dir(started):
    """Make a fresh per-user run folder `<time>-<pid>` under default_base(); returns its path."""
    base = private_dir(records.default_base())
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
    parts = [time.strftime("%Y%m%d-%H%M%S", time.localtime(started)), records.safe_name(ident.host),
             str(ident.pid), records.safe_name(ident.role)]
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
    folders.append(("the default log folder %r" % records.default_base(), lambda: _default_dir(started)))
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
    """Raise EBADF once the program closed our fd and its number was reused: writing on would put
    our lines into one of its files. A check for the watchdog's beat, never for every line."""
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


def earlylog_parent(config):
    """(the parent's pid when this process is a child of an earlylog process: the parent has a log
    file open in this run's log folder, else None; whether this process's console stream is its
    parent's terminal). A child's stream that is not its parent's terminal is the parent's business:
    `subprocess.run(..., capture_output=True)` reads it as data (compares it, parses it, fails on
    anything there), and so do programs that swap their own stderr before they start a child, and
    pexpect, which gives the child a terminal of its own and reads it: its console lines stay off.
    The first process of a tree keeps its console lines (a launcher such as Node.js shows them), and
    so does a child writing to the terminal its parent writes to: the person's
    (docs/design.md#console-lines-only-where-a-person-reads); only the first prints its start line."""
    fd = CONSOLE_FDS.get(config.console)
    folder = config.dir or (os.path.dirname(config.file) if config.file else None)
    if fd is None or folder is None:
        return None, False  # no console, or the first process of a default run: no earlylog parent
    try:
        ppid = os.getppid()
        shared = parents_terminal(fd, ppid)
        names = os.listdir("/proc/%d/fd" % ppid)
    except OSError:  # closed, no /proc, or not ours to read: keep the console as it was asked
        return None, False
    inside = os.path.join(folder, "")
    for name in names[-64:]:  # our log fd sits high, so among the last entries
        try:
            link = os.readlink("/proc/%d/fd/%s" % (ppid, name))
        except OSError:
            continue
        if link.startswith(inside) or link == config.file:
            return ppid, shared
    return None, shared


def parents_terminal(fd, ppid):
    """True when fd is a terminal that the parent process has as its stdin, stdout or stderr: the
    terminal of the person who started the run, not one that a program opened for a child (pexpect,
    pty.spawn) and reads as data."""
    return os.isatty(fd) and a_terminal_of(os.fstat(fd), ppid)


def a_terminal_of(st, pid):
    """True when st (the stat of a terminal) is the stdin, stdout or stderr of process pid."""
    for fd in (0, 1, 2):
        try:
            other = os.stat("/proc/%d/fd/%d" % (pid, fd))
        except OSError:
            continue
        if stat.S_ISCHR(other.st_mode) and other.st_rdev == st.st_rdev:
            return True
    return False


class Console:
    """The console channel: never blocks, never raises; lines it cannot deliver are counted."""

    def __init__(self, mode):
        self.dropped = 0
        self.fd = None
        self.sock = None
        self.kind = "off"
        self.encoding = "utf-8"
        self.utf8 = True  # the log file's bytes are this console's bytes too
        if mode == "off":
            return
        fd = CONSOLE_FDS[mode]
        try:
            st = os.fstat(fd)
        except OSError:
            return  # closed (`2>&-`): nothing to write to
        stream = sys.stderr if fd == 2 else sys.stdout
        self.encoding = getattr(stream, "encoding", None) or "utf-8"
        self.utf8 = self.encoding.lower().replace("_", "-") in ("utf-8", "utf8")
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

    def write(self, text, data=None):
        """Write one line (text, or data: the same text already encoded as UTF-8)."""
        kind = self.kind
        if kind == "off":
            return
        try:
            if data is None or not self.utf8:
                data = text.encode(self.encoding, "backslashreplace")
            if kind == "file" or kind == "tty":
                sent = _write(self.fd, data)
            elif kind == "pipe":
                sent = _write_without_sigpipe(self.fd, data)
            else:
                import socket
                # MSG_NOSIGNAL: a GUI that closed its end must not SIGPIPE the program (docs/design.md#sigpipe-held-back).
                sent = self.sock.send(data, socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0))
            if sent < len(data):
                self.dropped += 1
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
        except (OSError, LookupError, ValueError):
            # EPIPE (reader gone) or a closed fd: the console is gone for good.
            self.dropped += 1
            self.kind = "off"

    def check(self):
        """Turn the console off once its fd names something else (see Logger.check)."""
        if self.kind == "off":
            return
        try:
            _still_ours(self.fd if self.sock is None else self.sock.fileno(), self._id)
        except (OSError, ValueError):
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
        self.formatter = records.Formatter(config.format, ident.pid, ident.tag, ident.host)
        self.lineage = _lineage
        # The log's bound (EARLYLOG_MAX_LOG): bytes this process wrote to its file; past `head`, the
        # program's output copies wait in `tail` (its last part, `tail_bytes` of them), how many
        # were left out since when (`left`), until an exit, an exception or a stall writes them.
        self.size = 0
        self.head = config.max_log * 3 // 4 if config.max_log else None
        self.tail, self.tail_bytes, self.left = [], 0, None

    def touch(self):
        """Record a sign of life (a user write) without writing a line."""
        self.last_activity = time.monotonic()

    def event(self, kind, text, more=(), console=True):
        """Write `kind: text` plus continuation lines; returns nothing and never raises."""
        if self.lineage != _lineage:
            return  # a fork child's inherited logger: the parent's file is not ours to write
        try:
            line = self.formatter.lines(_now(), kind, text, more)
        except Exception as exc:  # a str() that raises, say: never the user's problem
            line = "[earlylog] unformattable %s line (%r)\n" % (kind, exc)
        self.last_activity = _monotonic()
        try:
            data = line.encode()
        except UnicodeEncodeError:  # lone surrogates (undecodable bytes in argv, paths, output)
            data = line.encode("utf-8", "backslashreplace")
        fd = self.fd
        if self.head is not None and fd is not None:
            if kind in ("out", "err") and self.size >= self.head:
                return self._keep(data)
            if self.tail and kind in records.KEEPS_TAIL:
                self._write_tail()
            self.size += len(data)
        if fd is not None:
            try:
                written = _write(fd, data)
                if written < len(data):
                    self.write_file(data[written:])
            except OSError as exc:
                self._file_lost(exc)
        # The console's rule (records.needs_person) while the log file takes every line; without
        # one, the console is the only place left.
        if console and (fd is None or self.config.console_all or records.needs_person(kind, text)):
            self.console.write(line, data)

    def copy(self, prefix, line):
        """A whole ASCII line of the program's output (bytes ending in its one \n; prefix `out: ` as
        bytes) into the log file only, as event(kind, text, console=False) writes it, without
        decoding it and encoding it back: the tee's usual write (a print()), so the cheapest."""
        if self.lineage != _lineage:
            return
        data = self.formatter.copied(_now(), prefix, line)
        if data is None:
            return self.event(prefix[:-2].decode(), line[:-1].decode(), console=False)
        self.last_activity = _monotonic()
        if self.head is not None:
            if self.size >= self.head:
                return self._keep(data)
            self.size += len(data)
        self.write_file(data)

    def _keep(self, data):
        """A copy of the program's output past the head: kept among the last ones, the rest counted."""
        if self.left is None:
            self.left = [0, 0, time.time()]
        self.tail.append(data)
        self.tail_bytes += len(data)
        room = self.config.max_log // 8
        if self.tail_bytes > 2 * room:  # trimmed in batches: a list's front is costly to pop one by one
            cut, dropped = 0, 0
            while self.tail_bytes - dropped > room:
                dropped += len(self.tail[cut])
                cut += 1
            self.left[0] += cut
            self.left[1] += dropped
            del self.tail[:cut]
            self.tail_bytes -= dropped

    def _write_tail(self):
        """The note saying how much output was left out, then its kept last lines, where the bound
        leaves room for them (else the note alone, and they are left out too)."""
        tail, lines, size = self.tail, self.left[0], self.left[1]
        since = self.left[2]
        self.tail, self.tail_bytes, self.left = [], 0, None
        kept = sum(len(d) for d in tail)
        if self.size + kept > self.config.max_log:
            lines, size, tail = lines + len(tail), size + kept, []
        from earlylog.grammar import bound  # a log past its bound, once: not on the start path
        note = self.formatter.lines(_now(), "note", bound.left_out(lines, size, since, self.config.max_log,
                                                                   len(tail)))
        data = note.encode("utf-8", "backslashreplace") + b"".join(tail)
        self.size += len(data)
        self.write_file(data)

    def write_file(self, data):
        """Write bytes to the log file, all of them unless it fails; never raises."""
        if self.fd is None:
            return
        try:
            written = os.write(self.fd, data)
            while 0 < written < len(data):
                data = data[written:]
                written = os.write(self.fd, data)
        except OSError as exc:
            self._file_lost(exc)

    def check(self):
        """Called by the watchdog at each beat: stop writing to an fd that no longer names our
        file or console (the program closed it and reused its number). A closed fd needs no
        check: its next write fails with EBADF."""
        if self.fd is not None:
            try:
                _still_ours(self.fd, self._file_id)
            except OSError as exc:
                self._file_lost(exc)
        self.console.check()

    def file_is_ours(self):
        """Does the log fd still name our file? False once the program closed it (pexpect's child
        closes every descriptor before it execs) or reused its number. Never raises or says a word."""
        try:
            return self.fd is not None and _identity(self.fd) == self._file_id
        except OSError:
            return False

    def _file_lost(self, exc):
        self.file_failed += 1
        if self.file_failed == 1:
            say("cannot write the log file %s (%s); its lines go to the console only"
                % (self.path, _reason(exc)))
        if exc.errno in (errno.EBADF,):
            self.fd = None
