"""File locks a blocked thread waits for, as `file lock:` dump lines (written through
grammar/notes.py): the file and who holds a lock on it, for a thread blocked in flock() or
fcntl(F_SETLKW), retrying in the filelock package's acquire(), or sleeping in SQLite's busy
handler; the holders read from /proc/locks. It runs in the watchdog thread at dump time only. It
must never read, lock or keep the file (it reads its fd's /proc link and fstat, /proc/locks and
the frames' locals through runtime/introspect.py), never run the program's code, never block,
and never raise: what cannot be read is left out."""
import os
import sys
from stat import S_ISREG

from earlylog.grammar import notes
from earlylog.runtime import fds, introspect, procs

MAX_FRAMES = 12         # frames searched for the filelock package's acquire() a thread retries in
MAX_HOLDERS = 4         # processes named as a file lock's holders
MAX_TABLE_BYTES = 4 << 20  # /proc/locks is read this far at most (a busy host)
MAX_FDS = 256           # open files looked at for a SQLite database a connection waits on
_SETLKW = (7, 38)  # fcntl commands that wait for a lock: F_SETLKW, F_OFD_SETLKW


def lines(name, args, frame):
    """The `file lock:` line of a thread blocked in flock() or fcntl(F_SETLKW), or retrying in the
    filelock package's acquire() (it polls with non-blocking tries and sleeps in between), or in
    SQLite's busy handler (it sleeps between tries inside a C call)."""
    if name == "flock" or (name == "fcntl" and args[1] in _SETLKW):
        path, how, st = procs.readlink("/proc/self/fd/%d" % args[0]), name, _stat("/proc/self/fd/%d" % args[0])
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
            out.append(notes.file_lock(procs.readlink("/proc/self/fd/%s" % name), "sqlite", _held_by(others)))
    return out


def _filelock_path(frame):
    """The lock file a filelock acquire() in these frames tries to take: the `lock_filename` its
    retry loop keeps (filelock 3 in acquire, 4 in _poll_until_acquired)."""
    for f in introspect.outward(frame, MAX_FRAMES):
        module = f.f_globals.get("__name__")
        if type(module) is str and module.split(".")[0] == "filelock":
            path = introspect.frame_locals(f).get("lock_filename")
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
    locks, table = {}, procs.read("/proc/locks", MAX_TABLE_BYTES)
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
    return "held by " + ", ".join(procs.who(pid) for pid in pids[:MAX_HOLDERS] if pid != -1)


def _stat(path):
    try:
        return os.stat(path)
    except OSError:
        return None
