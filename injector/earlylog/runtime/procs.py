"""Other processes as /proc tells them, for the dump notes that name them: a process's command
line (command, who: redacted, each path shortened to its last part), which processes hold a
pipe or socket open and how (holders, own_fds: their fd tables and fdinfo flags), and the small
readers of /proc links and files (readlink, read) that children.py, peers.py and filelocks.py
share; runtime/watchdog.py names a waited-for child with command(). It runs in the watchdog
thread only. It must never read from, write to or keep an inspected fd (it reads /proc links
and fdinfo only), never block (a search through other processes' fds stops after SCAN_SECONDS
or SCAN_PROCS processes), and never raise: what cannot be read is left out. Command lines go
through redact.argv."""
import os
import time

from earlylog.grammar import notes
from earlylog.runtime import fds, redact

SCAN_SECONDS = 0.2      # the longest one search for a pipe's other end may take
SCAN_PROCS = 4000       # ... and the most processes it looks at
MAX_COMMAND = 80


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
    return any(readlink("/proc/%d/fd/%s" % (pid, fd)) == link and _mode(pid, fd) in (mode, "both") for fd in names)


def own_fds(link, mode):
    try:
        names = fds.listdir("/proc/self/fd")
    except OSError:
        return []
    return [int(fd) for fd in names if readlink("/proc/self/fd/" + fd) == link and _mode("self", fd) in (mode, "both")]


def _mode(pid, fd):
    """'read', 'write' or 'both': how a process opened one of its fds (fdinfo's flags)."""
    for line in read("/proc/%s/fdinfo/%s" % (pid, fd)).splitlines():
        if line.startswith("flags:"):
            try:
                return ("read", "write", "both", "both")[int(line.split()[1], 8) & 3]
            except (ValueError, IndexError):
                return None
    return None


def command(pid):
    """A process's command line, redacted, with each path shortened to its last part:
    `node gui.js`, `python train.py --lr 3`; '' when it cannot be read."""
    raw = read("/proc/%d/cmdline" % pid, 4096)
    return command_text([a for a in raw.split("\0") if a])


def command_text(args):
    args = redact.argv(args)
    text = " ".join(os.path.basename(a) if i == 0 or (os.sep in a and not a.startswith("-") and " " not in a) else a
                    for i, a in enumerate(args))
    return text if len(text) <= MAX_COMMAND else text[:MAX_COMMAND - 3] + "..."


def who(pid):
    return "this process" if pid == os.getpid() else notes.who(pid, command(pid))


def readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return ""


def read(path, limit=65536):
    return (fds.read(path, limit) or b"").decode("utf-8", "replace")
