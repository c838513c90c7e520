"""The child processes a blocked thread waits for, read from /proc at dump time: the `child:`
lines (written through grammar/notes.py) for the child a wait call or a subprocess.Popen names
(its command, kernel state, its own blocked read or write, and who holds the pipes of one that
exited), and, for the stall line, the living children a waiting or sleeping main thread leaves to
speak for themselves (waited_children: runtime/watchdog.py, runtime/stuck.py). It runs in the
watchdog thread only. It must never read from, write to or keep a child's fd (/proc links,
fdinfo and queue sizes only: runtime/procs.py), never run the program's code (a Popen is looked
into only when its type is exactly subprocess.Popen, through its instance dict), never block,
and never raise: what cannot be read is left out."""
import os
import sys

from earlylog import enabled
from earlylog.grammar import notes
from earlylog.runtime import fds, introspect, kstate, procs, sinks

MAX_CHILDREN = 4        # `child:` lines for a thread that waits for any child
MAX_FRAMES = 12         # frames searched for the subprocess.Popen a thread waits on


def waited_children(tid, frame):
    """(pids, logged, printed) for the living children a thread waits for: the ones its wait call or
    Popen names or, while it sleeps in a monitor loop (torchrun's launcher) or waits in one of a
    supervisor's waits (_SUPERVISING), every child of the process when each one carries EARLYLOG on. logged: each has a log of its own that says whether
    it is stuck; printed: each one's stall lines also reach a terminal (an earlylog process's child
    prints its console lines only there). ([], False, False) for a thread waiting on anything else."""
    try:
        name, _number, args = kstate.syscall(tid) or (None, None, None)
        pids = [pid for pid in waited(name, args, popen_of(frame)) if _state(pid) not in (None, "Z")]
        sleeping = not pids and (name == "sleep" or name in ("poll", "futex", "wait") and _supervises(frame))
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


# A supervisor's own waits for its worker processes to end, by file and function: torch.multiprocessing's
# join of its ranks (a wait on their sentinels), a Process's join, a Pool's join. A wait for their
# results (a DataLoader's batch, a Pool's map) is the consumer's own work waiting, not supervision.
_SUPERVISING = (("torch/multiprocessing/spawn.py", "join"), ("multiprocessing/process.py", "join"),
                ("multiprocessing/pool.py", "join"))


def _supervises(frame):
    """Does the thread wait in one of a supervisor's waits for its worker processes?"""
    for f in introspect.outward(frame, MAX_FRAMES):
        path = f.f_code.co_filename.replace("\\", "/")
        if any(f.f_code.co_name == name and path.endswith("/" + suffix) for suffix, name in _SUPERVISING):
            return True
    return False


TAIL = 65536  # bytes of a child's log read for its open stall


def stuck_child(pids, folder):
    """`pid 812 (rank1): thread MainThread made no progress ...` for the first of these children whose
    console lines are off (a child of an earlylog process whose stream is not its parent's terminal:
    its log's note says so) and whose own log, in folder, ends inside a stall a person should see
    (its own console rule: not idle, not at a prompt, not a launcher waiting in turn, a wait for peer
    ranks from its second telling), else None: a supervisor relays it."""
    from earlylog.grammar import stalls
    from earlylog.grammar import records
    try:
        names = fds.listdir(folder)
    except OSError:
        return None
    for pid in pids:
        mark = "-%d-" % pid
        for name in (n for n in names if mark in n and n.endswith(".log")):
            head = fds.read(os.path.join(folder, name), 4096) or b""
            if ("note: " + records.CONSOLE_OFF).encode() not in head:
                continue  # its own stall lines reach its console: nothing to relay
            lines = [records.parse(line) for line in (fds.tail(os.path.join(folder, name), TAIL) or b"").decode(
                "utf-8", "replace").splitlines()[1:]]
            told = [r for r in lines if r and r["pid"] == pid and r["kind"] == "stall"]
            last = stalls.parse(told[-1]["msg"]) if told else None
            if last is None or last.shape in ("over", "gil"):
                continue
            again = len(told) > 1 and stalls.parse(told[-2]["msg"]) not in (None,) and \
                stalls.parse(told[-2]["msg"]).shape not in ("over", "gil")
            if last.shape == "silent" and stalls.console_silent(last.words, False, again) or \
                    last.shape == "noisy" and stalls.console_noisy(True, 0.0, last.collective is not None, again):
                return "pid %d (%s): %s" % (pid, told[-1]["tag"], last.words)
    return None


def waited(name, args, popen):
    """The children this thread waits for: the wait call's own pid argument, else the
    subprocess.Popen its frames are in (Popen.wait with a timeout sleeps, communicate polls)."""
    if name == "wait" or (name == "waitid" and args[0] == 1):  # waitid(P_PID, pid, ...)
        pid = _signed(args[0] if name == "wait" else args[1])
        return [pid] if pid > 0 else _children()[:MAX_CHILDREN]
    if name == "waitid":  # P_ALL, P_PGID: any child
        return _children()[:MAX_CHILDREN]
    return [vars(popen)["pid"]] if popen is not None else []


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
        for word in procs.read("/proc/self/task/%d/children" % tid).split():
            if word.isdigit():
                pids.append(int(word))
    return pids


def popen_of(frame):
    """The running subprocess.Popen whose wait or communicate this thread is in, or None."""
    subprocess = sys.modules.get("subprocess")
    path = getattr(subprocess, "__file__", None)
    for f in introspect.outward(frame, MAX_FRAMES):
        if path is None or f.f_code.co_filename != path:
            continue
        obj = introspect.frame_locals(f).get("self")
        if type(obj) is subprocess.Popen:  # exactly: a subclass may run code on attribute access
            fields = vars(obj)
            if type(fields.get("pid")) is int and fields.get("returncode") is None:
                return obj
    return None


def child_line(pid, popen):
    """child(pid), knowing the Popen it was started by, if any: the command it was given (a child
    that has exited has no command line left), and who still holds its output pipes open."""
    if popen is None or vars(popen)["pid"] != pid:
        return child(pid)
    args = vars(popen).get("args")
    args = [args] if type(args) is str else args
    given = procs.command_text(args) if type(args) in (list, tuple) and all(type(a) is str for a in args) else ""
    state = _state(pid)
    text = _described(pid, state, given)
    return text + _held_pipes(popen, pid) if state in (None, "Z") else text


def _state(pid):
    """The kernel's one-letter state of a process (`S`, `Z`, ...), None when it is gone."""
    fields = procs.read("/proc/%d/stat" % pid).rpartition(")")[2].split()
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
        link = procs.readlink("/proc/self/fd/%d" % f.fileno())
        pids = [p for p in procs.holders(link, "write")[0] if p not in (os.getpid(), pid)] if link.startswith("pipe:") \
            else []
        if pids:
            held.append((stream, ", ".join(procs.who(p) for p in pids[:2])))
    return notes.held_open(held)


def child(pid):
    """`pid 789 (python worker.py), state S (sleeping), blocked writing to fd 1 (stdout), ...`."""
    return _described(pid, _state(pid))


def _described(pid, state, given=""):
    """child(pid) from its state letter (None: gone); given: its command as its parent gave it, for
    a child whose own command line is gone."""
    if state is None:
        return notes.child_gone(pid, given)
    head = (pid, procs.command(pid) or given or "?", state, kstate.STATES.get(state, "unknown"))
    if state == "Z":
        return notes.child(*head, rest=", exited: it waits for this process to collect its status")
    call = kstate.syscall(pid, pid)
    if call is None:
        return notes.child(*head)
    name, _number, args = call
    if name in ("read", "write"):
        return notes.child(*head, rest=_child_fd(pid, name, args[0]))
    wchan = procs.read("/proc/%d/wchan" % pid)
    what = kstate.words(name)
    return notes.child(*head, rest=(", " + what if what else "") + (
        " [kernel: %s]" % wchan if what and wchan not in ("", "0") else ""))


def _child_fd(pid, name, fd):
    """The child's blocked read or write, and whether this process holds the pipe's other end."""
    link = procs.readlink("/proc/%d/fd/%d" % (pid, fd))
    mode = "read" if name == "write" else "write"
    mine = procs.own_fds(link, mode) if link.startswith("pipe:") else []
    if not mine:
        return notes.child_fd(name, fd, link)
    used_size = kstate.pipe_fill(mine[0]) if name == "write" else None
    pids, complete = procs.holders(link, mode)
    return notes.child_fd(name, fd, link, used_size, complete and pids == [os.getpid()])
