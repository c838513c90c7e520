"""What the kernel says a thread of this process is doing (/proc/self/task/<tid>), in plain words.
Linux-only (elsewhere it says nothing); it must never read from, write to or change an fd it inspects."""
import os
import sys

from earlylog.runtime import fds, threads

# syscall number -> what the call is; /proc/<tid>/syscall gives the number and raw arguments.
_CALLS = {
    "x86_64": {0: "read", 1: "write", 17: "read", 18: "write", 19: "read", 20: "write",
               7: "poll", 23: "poll", 232: "poll", 270: "poll", 271: "poll", 281: "poll", 441: "poll",
               35: "sleep", 230: "sleep", 202: "futex", 61: "wait", 247: "waitid",
               42: "connect", 43: "accept", 288: "accept", 44: "write", 46: "write",
               45: "read", 47: "read", 299: "read", 307: "write", 73: "flock", 72: "fcntl",
               257: "open", 2: "open", 34: "signal", 130: "signal", 128: "signal"},
    "aarch64": {63: "read", 64: "write", 65: "read", 66: "write", 67: "read", 68: "write",
                72: "poll", 73: "poll", 22: "poll", 441: "poll", 101: "sleep", 115: "sleep",
                98: "futex", 260: "wait", 95: "waitid", 203: "connect", 202: "accept", 242: "accept",
                206: "write", 211: "write", 207: "read", 212: "read", 243: "read", 269: "write",
                32: "flock", 25: "fcntl", 56: "open", 133: "signal", 137: "signal"},
}
# select()/pselect6() and poll()/ppoll() with no descriptor to watch are sleeps: Python 3.9 and 3.10
# sleep in time.sleep() with select(0, NULL, NULL, NULL, timeout), 3.11+ in clock_nanosleep().
_SELECTS = {"x86_64": (23, 270), "aarch64": (72,)}  # (nfds, readfds, writefds, exceptfds, ...)
_POLLS = {"x86_64": (7, 271), "aarch64": (73,)}     # (fds, nfds, ...)
STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped",
           "t": "stopped by a debugger", "Z": "a zombie", "X": "dead", "I": "idle"}
_STREAMS = {0: "stdin", 1: "stdout", 2: "stderr"}


def _read(path):
    # This process's task files are read at every dump: kept open (fds.read's keep), those of
    # another process are not.
    keep = path.startswith("/proc/self/")
    return (fds.read(path, keep=keep) or b"").decode("ascii", "replace").strip()


def kernel_ids():
    """{ident: kernel tid} of the main thread and the program's threading.Threads, read from
    threading's own table (copied whole: no lock taken) and each Thread's instance dict."""
    out = threads.native_ids()
    threading = sys.modules.get("threading")
    active = vars(threading).get("_active") if threading is not None else None
    if type(active) is dict:
        for ident, thread in dict(active).items():
            try:
                tid = vars(thread).get("_native_id")
            except TypeError:
                continue
            if type(tid) is int:
                out.setdefault(ident, tid)
    return out


def timeslices(tid):
    """How many timeslices the kernel has run this thread (schedstat's third field), else its
    context switches; None when neither can be read. A thread blocked for good never runs; a timed
    wait, a poll loop or a peer that answers wakes it."""
    raw = threads.read("/proc/self/task/%d/schedstat" % tid, 256)
    fields = raw.split() if raw else ()
    if len(fields) >= 3:
        return int(fields[2])
    raw = threads.read("/proc/self/task/%d/status" % tid, 4096)
    if not raw:
        return None
    return sum(int(line.split()[1]) for line in raw.splitlines() if b"ctxt_switches:" in line)


def cpu_seconds(tid):
    """Seconds a thread has run or waited to run (schedstat, ns resolution; stat ticks without it).

    Waiting counts: on a crowded machine a computing thread queues for a core, a blocked one never."""
    fields = _read("/proc/self/task/%d/schedstat" % tid).split()
    if len(fields) >= 2:
        return (int(fields[0]) + int(fields[1])) / 1e9
    return _stat_seconds("/proc/self/task/%d/stat" % tid)


IN_KERNEL = 0.2  # a busy thread's share of CPU time in system calls worth saying


def _in_kernel(tid):
    """The share of a thread's CPU time so far spent in the kernel, where it is at least IN_KERNEL."""
    fields = _read("/proc/self/task/%d/stat" % tid).rpartition(")")[2].split()
    try:
        user, system = int(fields[11]), int(fields[12])
    except (IndexError, ValueError):
        return None
    share = system / float(user + system) if user + system >= 10 else 0.0  # ten ticks at least
    return share if share >= IN_KERNEL else None


def _stat_seconds(path):
    fields = _read(path).rpartition(")")[2].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _tick_rate()
    except (IndexError, ValueError):
        return None


def tids():
    try:
        names = fds.listdir("/proc/self/task")
    except OSError:
        return []
    fds.forget("/proc/self/task", names)  # the kept files of threads that are gone
    return [int(t) for t in names]


def _tick_rate():
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


def state(tid):
    """A thread's state letter (R running, S sleeping, D in disk I/O, ...), or '' if unknown."""
    return (_read("/proc/self/task/%d/stat" % tid).rpartition(")")[2].split() or [""])[0]


def describe(tid, cpu_share=None):
    """One sentence on a thread, e.g. 'blocked writing to fd 1 (stdout), a pipe that is full ...'.

    cpu_share: the thread's share of a core over the last moment, if the caller measured it."""
    letter = state(tid)
    if not letter:
        return ""
    from earlylog.grammar import stalls  # at a stall or dump only: the beats never describe
    from earlylog.grammar import notes
    if letter == "R" or (cpu_share is not None and cpu_share >= stalls.BUSY_SHARE):
        return notes.busy(cpu_share, _in_kernel(tid))
    wchan = _read("/proc/self/task/%d/wchan" % tid)
    what = _blocked_in(syscall(tid), wchan)
    if letter == "D":
        what = "in uninterruptible I/O (disk, network filesystem or device)" + (", " + what if what else "")
    elif not what:
        what = STATES.get(letter, "state " + letter)
    return notes.blocked(what, wchan)


def syscall(tid, pid="self"):
    """(name, number, raw arguments) of the system call a thread is blocked in, e.g.
    ('write', 1, [1, ...]); name is None for a call not named here. None while the thread runs,
    or when /proc does not say (another user's process, a kernel without the file)."""
    raw = _read("/proc/%s/task/%d/syscall" % (pid, tid)).split()
    if not raw or raw[0] == "running":
        return None
    try:
        number, args = int(raw[0]), [int(a, 16) for a in raw[1:7]]
    except ValueError:
        return None
    if number < 0 or len(args) < 6:  # blocked outside any system call (a page fault)
        return None
    machine = os.uname().machine
    name = _CALLS.get(machine, {}).get(number)
    if name == "poll" and _watches_nothing(machine, number, args):
        name = "sleep"
    return name, number, args


def _watches_nothing(machine, number, args):
    if number in _SELECTS.get(machine, ()):
        return args[0] == 0 or not any(args[1:4])
    return number in _POLLS.get(machine, ()) and args[1] == 0


def words(call):
    """What a thread in a system call that is not on an fd does, in plain words; '' if not known."""
    return {
        "poll": "waiting for I/O in select/poll (an idle event loop or socket wait)",
        "sleep": "sleeping (time.sleep or a timed wait)",
        "futex": "waiting on a lock, condition or event (futex)",
        "wait": "waiting for a child process to exit",
        "waitid": "waiting for a child process to exit",
        "flock": "waiting for a file lock",
        "fcntl": "waiting for a file lock (fcntl)",
        "open": "opening a file (a FIFO with no other end, or a slow filesystem)",
        "signal": "waiting for a signal (signal.pause, sigwait)",
    }.get(call, "")


def _blocked_in(call, wchan):
    if call is None:
        return ""
    name, number, args = call
    if name in ("read", "write", "connect", "accept"):
        return _fd_call(name, args[0])
    return words(name) or _from_wchan(wchan) or "in system call %d" % number


def _from_wchan(wchan):
    # restart_syscall (after a debugger or a stop signal) hides the real call; wchan still names it.
    for word, words in (("futex", "waiting on a lock, condition or event (futex)"),
                        ("poll", "waiting for I/O in select/poll"), ("select", "waiting for I/O in select/poll"),
                        ("sleep", "sleeping (time.sleep or a timed wait)"), ("pipe", "waiting on a pipe")):
        if word in wchan:
            return words
    return ""


def _fd_call(call, fd):
    kind, fill = fd_kind(fd)
    where = "fd %d%s, %s" % (fd, " (%s)" % _STREAMS[fd] if fd in _STREAMS else "", kind)
    if call == "connect":
        return "connecting to %s (%s)" % (_peer(fd) or "a server", where)
    if call == "accept":
        return "waiting for a connection on %s (%s)" % (_local(fd) or "a socket", where)
    if kind.startswith("a TCP") or kind.startswith("a UDP"):
        return "waiting in a network call %s %s" % ("to" if call == "write" else "from", _peer(fd) or where)
    if call == "write" and fill and fill[0] >= fill[1] * 0.9:
        reader = "the parent is not reading this process's %s" % _STREAMS[fd] if fd in (1, 2) \
            else "nothing is reading the other end"
        return "writing to %s that is full (%d of %d bytes): %s" % (where, fill[0], fill[1], reader)
    return "%s %s" % ("writing to" if call == "write" else "waiting to read from", where)


def fd_kind(fd):
    """('a pipe', (queued, capacity)) or ('a Unix socket', ...), ('a file', None), ... for an fd."""
    import stat
    try:
        st = os.stat("/proc/self/fd/%d" % fd)
    except OSError:
        return "a closed fd", None
    if stat.S_ISFIFO(st.st_mode):
        return "a pipe", pipe_fill(fd)
    if stat.S_ISSOCK(st.st_mode):
        return _socket_kind(fd)
    if stat.S_ISCHR(st.st_mode):
        return ("a terminal" if os.isatty(fd) else "a device"), None
    return "a file", None


F_GETPIPE_SZ = 1032   # fcntl.F_GETPIPE_SZ is missing before Python 3.10
FIONREAD = 0x541B     # termios.FIONREAD on Linux, without importing termios (the probes run it at start-up)


def pipe_fill(fd):
    """(bytes queued, capacity) of a pipe, or None."""
    import fcntl
    try:
        queued = fcntl.ioctl(fd, FIONREAD, b"\0\0\0\0")
        return int.from_bytes(queued, sys.byteorder), fcntl.fcntl(fd, F_GETPIPE_SZ)
    except OSError:
        return None


def _socket_kind(fd):
    # Node.js gives children socketpairs, not pipes (docs/design.md#nodejs-gives-socketpairs): the fill level is SIOCOUTQ
    # (unsent bytes, TIOCOUTQ's number) against the send buffer size.
    import fcntl
    import socket
    import termios
    try:
        sock = fds.socket_of(fd)
    except OSError:
        return "a socket", None
    try:
        family = {socket.AF_UNIX: "a Unix socket", socket.AF_INET: "a TCP socket",
                  socket.AF_INET6: "a TCP socket"}.get(sock.family, "a socket")
        if sock.type == socket.SOCK_DGRAM and family == "a TCP socket":
            family = "a UDP socket"
        try:
            queued = bytearray(4)
            fcntl.ioctl(fd, termios.TIOCOUTQ, queued)
            return family, (int.from_bytes(queued, "little"),
                            sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        except OSError:
            return family, None
    finally:
        sock.close()


def _address(fd, peer):
    import socket
    try:
        sock = fds.socket_of(fd)
    except OSError:
        return ""
    try:
        addr = sock.getpeername() if peer else sock.getsockname()
    except OSError:
        return ""
    finally:
        sock.close()
    if isinstance(addr, tuple):
        return "%s:%s" % addr[:2]
    return str(addr or "")


def _peer(fd):
    return _address(fd, True)


def _local(fd):
    return _address(fd, False)
