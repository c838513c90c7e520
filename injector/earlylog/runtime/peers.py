"""Which other process a blocked thread waits on, read from /proc at dump time, as extra dump lines:
the entry point (lines) that gathers a thread's `child:` lines (runtime/children.py) and
`file lock:` lines (runtime/filelocks.py), and writes the lines of this thread's own blocked fd
itself: the process at the other end of a full stdout or of stdin (`pipe:`, `stdin:`, `reads:`),
a Unix socket's peer, and a TCP socket's connection (`socket:`), all through grammar/notes.py
(their grammar, and the reader's parser of them). It runs in the watchdog thread at dump time
only. It must never read from, write to or keep an inspected fd (it reads /proc links, fdinfo,
queue sizes and /proc/net/tcp; a socket's peer through a high duplicate, closed at once), never
run the program's code (a socket is looked into only when its type is exactly the standard
library's), never block, and never raise: what cannot be read is left out."""
import os
import sys

from earlylog.grammar import notes
from earlylog.runtime import children, fds, filelocks, introspect, kstate, procs

SOCKET_FRAMES = 3       # frames searched for the socket a thread polls
MAX_TABLE_BYTES = 4 << 20  # /proc/net/tcp is read this far at most (a busy host)
_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
               "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
               "0B": "CLOSING"}
_CALL_WORDS = {"connect": "connecting", "read": "receiving", "write": "sending", "poll": "waiting"}


def lines(tid, ident, frame):
    """The `child:`, `pipe:`, `stdin:` and `socket:` lines for one thread (kernel tid, Python
    ident, innermost frame), each indented as the dump's notes are."""
    try:
        # A timed wait (Popen.wait(timeout=...)) runs Python between its short sleeps: it may be
        # caught outside any system call, and still names its child through its frames.
        name, _number, args = kstate.syscall(tid) or (None, None, None)
        popen = children.popen_of(frame)
        out = [notes.child_line(children.child_line(pid, popen)) for pid in children.waited(name, args, popen)]
        if name in ("read", "write", "connect"):
            out += _fd_lines(name, args[0], ident)
        elif name == "poll":
            out += [notes.socket_line(text) for text in (socket_line(fd, "poll") for fd in _polled_sockets(frame)) if text]
        return out + filelocks.lines(name, args, frame)
    except Exception:  # a process or frame that changed under us: the dump goes on without these lines
        return []


# --- this thread's own fd ------------------------------------------------------------------------

def _fd_lines(name, fd, ident):
    link = procs.readlink("/proc/self/fd/%d" % fd)
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
        return notes.other_end([procs.who(pid)]) if pid else "other end not known"
    pids, complete = procs.holders(link, mode)
    pids = [p for p in pids if p != os.getpid()] + [p for p in pids if p == os.getpid()]
    return notes.other_end([procs.who(p) for p in pids[:3]], complete)


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
    for f in introspect.outward(frame, SOCKET_FRAMES):
        if f.f_code.co_name in ("select", "poll", "run_forever", "_run_once"):
            return []
        for value in list(introspect.frame_locals(f).values()):
            if type(value) is getattr(mod, "SocketIO", None):
                value = vars(value).get("_sock")
            if type(value) in kinds:
                fd = _socket.socket.fileno(value)  # the C method itself: no Python code of anyone's runs
                if fd >= 0 and fd not in fds:
                    fds.append(fd)
    return fds


def socket_line(fd, call):
    """`fd 8 connecting, TCP 127.0.0.1:51234 -> 127.0.0.1:29500, SYN_SENT, client; SYN sent 4 times`."""
    link = procs.readlink("/proc/self/fd/%d" % fd)
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
