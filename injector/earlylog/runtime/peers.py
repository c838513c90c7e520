"""Which other process a blocked thread waits on, read from /proc at dump time, as extra dump lines:
the child it waits for, the process at the other end of a full stdout or of stdin, the peer of a
socket, as `child:`, `pipe:`, `stdin:`, `reads:`, `socket:` and `file lock:` lines, written through
runtime/notes.py (their grammar, and the reader's parser of them).
Also, for the stall line, the living children a waiting or sleeping main thread leaves to speak
for themselves (waited_children). It runs in the watchdog thread at dump time only. It must never
read from, write to or keep an inspected fd (it reads /proc links, fdinfo and queue sizes), never
run the program's code (objects are looked into only when their type is exactly the standard
library's), never block (the search through other processes' fds stops after SCAN_SECONDS), and
never raise: what cannot be read is left out. Command lines go through redact.argv."""
import os
import sys
import time
from stat import S_ISREG

from earlylog import enabled
from earlylog.runtime import fds, kstate, notes, redact, sinks, waits

SCAN_SECONDS = 0.2      # the longest one search for a pipe's other end may take
SCAN_PROCS = 4000       # ... and the most processes it looks at
MAX_CHILDREN = 4        # `child:` lines for a thread that waits for any child
MAX_FRAMES = 12         # frames searched for the subprocess.Popen a thread waits on
SOCKET_FRAMES = 3       # frames searched for the socket a thread polls
MAX_TABLE_BYTES = 4 << 20  # /proc/net/tcp and /proc/locks are read this far at most (a busy host)
MAX_COMMAND = 80
MAX_FDS = 256           # open files looked at for a SQLite database a connection waits on
_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
               "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
               "0B": "CLOSING"}
_CALL_WORDS = {"connect": "connecting", "read": "receiving", "write": "sending", "poll": "waiting"}
_SETLKW = (7, 38)  # fcntl commands that wait for a lock: F_SETLKW, F_OFD_SETLKW


def lines(tid, ident, frame):
    """The `child:`, `pipe:`, `stdin:` and `socket:` lines for one thread (kernel tid, Python
    ident, innermost frame), each indented as the dump's notes are."""
    try:
        # A timed wait (Popen.wait(timeout=...)) runs Python between its short sleeps: it may be
        # caught outside any system call, and still names its child through its frames.
        name, _number, args = kstate.syscall(tid) or (None, None, None)
        popen = _popen(frame)
        out = [notes.child_line(_child_line(pid, popen)) for pid in _waited(name, args, popen)]
        if name in ("read", "write", "connect"):
            out += _fd_lines(name, args[0], ident)
        elif name == "poll":
            out += [notes.socket_line(text) for text in (socket_line(fd, "poll") for fd in _polled_sockets(frame)) if text]
        return out + _file_lock(name, args, frame)
    except Exception:  # a process or frame that changed under us: the dump goes on without these lines
        return []


# --- children ------------------------------------------------------------------------------------

def _waited(name, args, popen):
    """The children this thread waits for: the wait call's own pid argument, else the
    subprocess.Popen its frames are in (Popen.wait with a timeout sleeps, communicate polls)."""
    if name == "wait" or (name == "waitid" and args[0] == 1):  # waitid(P_PID, pid, ...)
        pid = _signed(args[0] if name == "wait" else args[1])
        return [pid] if pid > 0 else _children()[:MAX_CHILDREN]
    if name == "waitid":  # P_ALL, P_PGID: any child
        return _children()[:MAX_CHILDREN]
    return [vars(popen)["pid"]] if popen is not None else []


def waited_children(tid, frame):
    """(pids, logged, printed) for the living children a thread waits for: the ones its wait call or
    Popen names or, while it sleeps in a monitor loop (torchrun's launcher), every child of the
    process when each one carries EARLYLOG on. logged: each has a log of its own that says whether
    it is stuck; printed: each one's stall lines also reach a terminal (an earlylog process's child
    prints its console lines only there). ([], False, False) for a thread waiting on anything else."""
    try:
        name, _number, args = kstate.syscall(tid) or (None, None, None)
        pids = [pid for pid in _waited(name, args, _popen(frame)) if _state(pid) not in (None, "Z")]
        sleeping = not pids and name == "sleep"
        if sleeping:
            pids = [pid for pid in _children() if _state(pid) not in (None, "Z")]
        envs = [_environ(pid) for pid in pids]
        logged = bool(pids) and all(enabled(env) for env in envs)
        if sleeping and not logged:
            return [], False, False
        printed = logged and all(_prints(pid, env) for pid, env in zip(pids, envs))
        return pids, logged, printed
    except Exception:  # a child that changed under us: nothing is said about it
        return [], False, False


def _environ(pid):
    """The EARLYLOG* variables a process was started with, {} when they cannot be read."""
    raw = fds.read("/proc/%d/environ" % pid, 1 << 20) or b""
    pairs = (entry.decode("utf-8", "replace").partition("=") for entry in raw.split(b"\0")
             if entry.startswith(b"EARLYLOG"))
    return {key: value for key, _eq, value in pairs}


def _prints(pid, env):
    """Does this child of an earlylog process write its console lines (sinks.earlylog_parent: only
    to a terminal that its parent, this process, has too)?"""
    mode = env.get("EARLYLOG_CONSOLE", "stderr").strip().lower()
    fd = sinks.CONSOLE_FDS.get(mode, 2)  # a value it does not know: it warns and takes the default
    if fd is None:
        return False
    path = "/proc/%d/fd/%d" % (pid, fd)
    try:
        if not os.readlink(path).startswith(("/dev/pts/", "/dev/tty")):
            return False
        return sinks.a_terminal_of(os.stat(path), os.getpid())
    except OSError:
        return False


def _signed(value):
    value &= 0xFFFFFFFF  # a pid_t in a 64-bit register
    return value - (1 << 32) if value >= 1 << 31 else value


def _children():
    pids = []
    for tid in kstate.tids():
        for word in _read("/proc/self/task/%d/children" % tid).split():
            if word.isdigit():
                pids.append(int(word))
    return pids


def _popen(frame):
    """The running subprocess.Popen whose wait or communicate this thread is in, or None."""
    subprocess = sys.modules.get("subprocess")
    path = getattr(subprocess, "__file__", None)
    for f in waits.outward(frame, MAX_FRAMES):
        if path is None or f.f_code.co_filename != path:
            continue
        obj = waits.frame_locals(f).get("self")
        if type(obj) is subprocess.Popen:  # exactly: a subclass may run code on attribute access
            fields = vars(obj)
            if type(fields.get("pid")) is int and fields.get("returncode") is None:
                return obj
    return None


def _child_line(pid, popen):
    """child(pid), knowing the Popen it was started by, if any: the command it was given (a child
    that has exited has no command line left), and who still holds its output pipes open."""
    if popen is None or vars(popen)["pid"] != pid:
        return child(pid)
    args = vars(popen).get("args")
    args = [args] if type(args) is str else args
    given = _command_text(args) if type(args) in (list, tuple) and all(type(a) is str for a in args) else ""
    state = _state(pid)
    text = _described(pid, state, given)
    return text + _held_pipes(popen, pid) if state in (None, "Z") else text


def _state(pid):
    """The kernel's one-letter state of a process (`S`, `Z`, ...), None when it is gone."""
    fields = _read("/proc/%d/stat" % pid).rpartition(")")[2].split()
    return fields[0] if fields else None


def _held_pipes(popen, pid):
    """`; its stdout pipe is still held open by pid 812 (sleep 3600)` (`its stdout and stderr pipes
    are` when one process holds both): a child that has exited but left a process of its own,
    started in the background, holding the pipe the parent reads to its end, which never comes."""
    import io
    held = []
    for stream in ("stdout", "stderr"):
        f = vars(popen).get(stream)
        if type(f) not in (io.BufferedReader, io.TextIOWrapper, io.FileIO) or f.closed:
            continue
        link = _link("/proc/self/fd/%d" % f.fileno())
        pids = [p for p in holders(link, "write")[0] if p not in (os.getpid(), pid)] if link.startswith("pipe:") \
            else []
        if pids:
            held.append((stream, ", ".join(_who(p) for p in pids[:2])))
    return notes.held_open(held)


def child(pid):
    """`pid 789 (python worker.py), state S (sleeping), blocked writing to fd 1 (stdout), ...`."""
    return _described(pid, _state(pid))


def _described(pid, state, given=""):
    """child(pid) from its state letter (None: gone); given: its command as its parent gave it, for
    a child whose own command line is gone."""
    if state is None:
        return notes.child_gone(pid, given)
    head = (pid, command(pid) or given or "?", state, kstate.STATES.get(state, "unknown"))
    if state == "Z":
        return notes.child(*head, rest=", exited: it waits for this process to collect its status")
    call = kstate.syscall(pid, pid)
    if call is None:
        return notes.child(*head)
    name, _number, args = call
    if name in ("read", "write"):
        return notes.child(*head, rest=_child_fd(pid, name, args[0]))
    wchan = _read("/proc/%d/wchan" % pid)
    what = kstate.words(name)
    return notes.child(*head, rest=(", " + what if what else "") + (
        " [kernel: %s]" % wchan if what and wchan not in ("", "0") else ""))


def _child_fd(pid, name, fd):
    """The child's blocked read or write, and whether this process holds the pipe's other end."""
    link = _link("/proc/%d/fd/%d" % (pid, fd))
    mode = "read" if name == "write" else "write"
    mine = _own_fds(link, mode) if link.startswith("pipe:") else []
    if not mine:
        return notes.child_fd(name, fd, link)
    used_size = kstate.pipe_fill(mine[0]) if name == "write" else None
    pids, complete = holders(link, mode)
    return notes.child_fd(name, fd, link, used_size, complete and pids == [os.getpid()])


# --- this thread's own fd ------------------------------------------------------------------------

def _fd_lines(name, fd, ident):
    link = _link("/proc/self/fd/%d" % fd)
    if not link.startswith(("pipe:", "socket:")):
        return []  # a terminal, a file or a device: nobody else's end to name
    kind, fill = kstate.fd_kind(fd)
    if kind == "a TCP socket":
        text = socket_line(fd, name)
        return [notes.socket_line(text)] if text else []
    if name == "write":
        return [notes.pipe(fd, link, fill, _other_end(fd, link, "read"))]
    if name == "read" and fd == 0:
        return [notes.stdin(link, _other_end(fd, link, "write"), _unfinished(ident))]
    if name == "read" and link.startswith("pipe:"):
        return [notes.reads(fd, link, _other_end(fd, link, "write"))]
    return []


def _unfinished(ident):
    from earlylog.runtime import stdio
    return stdio.unfinished(ident)


def _other_end(fd, link, mode):
    """`other end held by pid 456 (node gui.js)`: a pipe's found in the fd tables of processes, a
    Unix socket's from its peer credentials (the process that made the socketpair, or the peer)."""
    if link.startswith("socket:"):
        pid = _peer_pid(fd)
        return notes.other_end([_who(pid)]) if pid else "other end not known"
    pids, complete = holders(link, mode)
    pids = [p for p in pids if p != os.getpid()] + [p for p in pids if p == os.getpid()]
    return notes.other_end([_who(p) for p in pids[:3]], complete)


def _who(pid):
    return "this process" if pid == os.getpid() else notes.who(pid, command(pid))


def _peer_pid(fd):
    import _socket
    import struct
    try:
        sock = fds.socket_of(fd)  # a high duplicate, closed at once: the fd itself is untouched
    except OSError:
        return None
    try:
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", cred)[0] or None
    except (OSError, AttributeError, struct.error):
        return None
    finally:
        sock.close()


def holders(link, mode):
    """(pids holding `link`, e.g. 'pipe:[123]', open for 'read' or 'write': this process first,
    then its parent, then any other; whether every process was searched)."""
    deadline = time.monotonic() + SCAN_SECONDS
    me, parent = os.getpid(), os.getppid()
    try:
        others, listed = [int(p) for p in fds.listdir("/proc") if p.isdigit() and int(p) not in (me, parent)], True
    except OSError:
        others, listed = [], False
    found = []
    for i, pid in enumerate([me, parent] + others):
        if i >= SCAN_PROCS or time.monotonic() > deadline:
            return found, False
        if _holds(pid, link, mode):
            found.append(pid)
    return found, listed


def _holds(pid, link, mode):
    try:
        names = fds.listdir("/proc/%d/fd" % pid)
    except OSError:  # gone, or another user's
        return False
    return any(_link("/proc/%d/fd/%s" % (pid, fd)) == link and _mode(pid, fd) in (mode, "both") for fd in names)


def _own_fds(link, mode):
    try:
        names = fds.listdir("/proc/self/fd")
    except OSError:
        return []
    return [int(fd) for fd in names if _link("/proc/self/fd/" + fd) == link and _mode("self", fd) in (mode, "both")]


def _mode(pid, fd):
    """'read', 'write' or 'both': how a process opened one of its fds (fdinfo's flags)."""
    for line in _read("/proc/%s/fdinfo/%s" % (pid, fd)).splitlines():
        if line.startswith("flags:"):
            try:
                return ("read", "write", "both", "both")[int(line.split()[1], 8) & 3]
            except (ValueError, IndexError):
                return None
    return None


def command(pid):
    """A process's command line, redacted, with each path shortened to its last part:
    `node gui.js`, `python train.py --lr 3`; '' when it cannot be read."""
    raw = _read("/proc/%d/cmdline" % pid, 4096)
    return _command_text([a for a in raw.split("\0") if a])


def _command_text(args):
    args = redact.argv(args)
    text = " ".join(os.path.basename(a) if i == 0 or (os.sep in a and not a.startswith("-") and " " not in a) else a
                    for i, a in enumerate(args))
    return text if len(text) <= MAX_COMMAND else text[:MAX_COMMAND - 3] + "..."


# --- sockets -------------------------------------------------------------------------------------

def _polled_sockets(frame):
    """fds of the sockets a thread in poll waits on: a socket with a timeout waits there, held in
    the innermost frames' locals (`sock`; socket.SocketIO's `_sock` under http.client). An event
    loop's select waits on many things at once, which is idle rather than one peer."""
    import _socket
    mod = sys.modules.get("socket")
    if mod is None:
        return []
    # The standard library's classes only: a green-thread library's own socket class is left alone.
    kinds = tuple(k for k in (getattr(mod, "socket", None), getattr(sys.modules.get("ssl"), "SSLSocket", None))
                  if isinstance(k, type) and issubclass(k, _socket.socket))
    fds = []
    for f in waits.outward(frame, SOCKET_FRAMES):
        if f.f_code.co_name in ("select", "poll", "run_forever", "_run_once"):
            return []
        for value in list(waits.frame_locals(f).values()):
            if type(value) is getattr(mod, "SocketIO", None):
                value = vars(value).get("_sock")
            if type(value) in kinds:
                fd = _socket.socket.fileno(value)  # the C method itself: no Python code of anyone's runs
                if fd >= 0 and fd not in fds:
                    fds.append(fd)
    return fds


def socket_line(fd, call):
    """`fd 8 connecting, TCP 127.0.0.1:51234 -> 127.0.0.1:29500, SYN_SENT, client; SYN sent 4 times`."""
    link = _link("/proc/self/fd/%d" % fd)
    if not link.startswith("socket:["):
        return ""
    fields, listening = _tcp(link[len("socket:["):-1])
    if fields is None:
        return ""
    local, remote, state = _address(fields[1]), _address(fields[2]), _TCP_STATES.get(fields[3], fields[3])
    unsent, _, unread = fields[4].partition(":")
    retries = int(fields[6], 16)
    # A connection whose local port something listens on is the server's end of it.
    role = "server" if state != "LISTEN" and fields[1].rpartition(":")[2] in listening else "client"
    detail = notes.syn_sent(retries) if state == "SYN_SENT" else notes.queued(int(unread, 16), int(unsent, 16))
    return notes.socket(fd, _CALL_WORDS.get(call, call), local, remote, state, role, detail)


def _tcp(inode):
    """(the /proc/net/tcp{,6} fields of the socket with this inode or None, the local ports (hex)
    some socket listens on), in one pass: reading those tables costs milliseconds."""
    row, listening = None, set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        data = fds.read(table, MAX_TABLE_BYTES) or b""
        for line in data.split(b"\n")[1:]:  # after the header
            fields = line.decode("ascii", "replace").split()
            if len(fields) < 10:
                continue
            if fields[3] == "0A":
                listening.add(fields[1].rpartition(":")[2])
            if fields[9] == inode:
                row = fields
    return row, listening


def _address(hexed):
    """'0100007F:9AD4' -> '127.0.0.1:39636' (the kernel writes each 32-bit word in host order)."""
    import socket
    raw, _, port = hexed.partition(":")
    try:
        data = b"".join(int(raw[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(raw), 8))
        if len(data) == 16 and data[:12] == b"\0" * 10 + b"\xff\xff":
            data = data[12:]  # an IPv4 address on an IPv6 socket
        if len(data) == 4:
            return "%s:%d" % (socket.inet_ntop(socket.AF_INET, data), int(port, 16))
        return "[%s]:%d" % (socket.inet_ntop(socket.AF_INET6, data), int(port, 16))
    except (ValueError, OSError):
        return hexed


# --- file locks ----------------------------------------------------------------------------------

def _file_lock(name, args, frame):
    """The `file lock:` line of a thread blocked in flock() or fcntl(F_SETLKW), or retrying in the
    filelock package's acquire() (it polls with non-blocking tries and sleeps in between), or in
    SQLite's busy handler (it sleeps between tries inside a C call)."""
    if name == "flock" or (name == "fcntl" and args[1] in _SETLKW):
        path, how, st = _link("/proc/self/fd/%d" % args[0]), name, _stat("/proc/self/fd/%d" % args[0])
    elif name == "sleep" and "_sqlite3" in sys.modules and _sleeps_in_c(frame):
        return _sqlite_locks()
    else:
        path, how = _filelock_path(frame), "filelock"
        st = _stat(path) if path else None
    if st is None:
        return []
    return [notes.file_lock(path, how, _lock_holders(st))]


def _sleeps_in_c(frame):
    """The innermost Python line calls no sleep: the C call under it sleeps (a retry loop)."""
    lines = fds.getlines(frame.f_code.co_filename)  # linecache's, read through a high descriptor
    return "sleep" not in (lines[frame.f_lineno - 1] if 0 < frame.f_lineno <= len(lines) else "")


def _sqlite_locks():
    """`file lock:` lines for the files this process has open that another process holds a lock
    on: SQLite's busy handler sleeps and retries (up to the connection's `timeout`) while another
    connection holds the database locked. Known from fstat and /proc/locks: no file is read."""
    locks = _locks()
    if not locks:
        return []
    try:
        names = fds.listdir("/proc/self/fd")
    except OSError:
        return []
    out, seen = [], set()
    for name in names[:MAX_FDS]:
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        key = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        others = [pid for pid in locks.get(key, ()) if pid != os.getpid()]
        if S_ISREG(st.st_mode) and others and key not in seen:
            seen.add(key)
            out.append(notes.file_lock(_link("/proc/self/fd/%s" % name), "sqlite", _held_by(others)))
    return out


def _filelock_path(frame):
    """The lock file a filelock acquire() in these frames tries to take: the `lock_filename` its
    retry loop keeps (filelock 3 in acquire, 4 in _poll_until_acquired)."""
    for f in waits.outward(frame, MAX_FRAMES):
        module = f.f_globals.get("__name__")
        if type(module) is str and module.split(".")[0] == "filelock":
            path = waits.frame_locals(f).get("lock_filename")
            if type(path) is str:
                return path
    return None


def _lock_holders(st):
    """Who holds a lock on the file st describes, from /proc/locks."""
    locks = _locks()
    if locks is None:
        return "holders not known (/proc/locks unreadable)"
    return _held_by(locks.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino), []))


def _locks():
    """{(major, minor, inode): [pids holding a lock on that file]} from /proc/locks (blocked
    requests, `->`, aside); None when it cannot be read."""
    locks, table = {}, _read("/proc/locks", MAX_TABLE_BYTES)
    if not table and not os.access("/proc/locks", os.R_OK):  # an empty table is no lock at all
        return None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":
            continue
        dev_ino = fields[5].split(":")
        try:
            key, pid = (int(dev_ino[0], 16), int(dev_ino[1], 16), int(dev_ino[2])), int(fields[4])
        except (ValueError, IndexError):
            continue
        if pid not in locks.setdefault(key, []):
            locks[key].append(pid)
    return locks


def _held_by(pids):
    if not pids:
        return "no process holds a lock on it"
    if pids == [-1]:
        return "held by an open file description lock (no pid)"
    return "held by " + ", ".join(_who(pid) for pid in pids[:MAX_CHILDREN] if pid != -1)


def _stat(path):
    try:
        return os.stat(path)
    except OSError:
        return None


# --- small readers -------------------------------------------------------------------------------

def _link(path):
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _read(path, limit=65536):
    return (fds.read(path, limit) or b"").decode("utf-8", "replace")
