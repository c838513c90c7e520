"""`earlylog dump <pid|log folder>`: ask live earlylog processes to write every thread's stack now.
A request is a hidden file `.dump-<pid>` in the process's log folder, which its watchdog thread
looks for at every beat and takes away as it answers: no signal is sent, so nothing here can kill
or disturb a process. It asks only processes whose own log offers on-demand dumps, and never
writes a log."""
import os
import re
import time

from earlylog.read import files
from earlylog.grammar import records
from earlylog.runtime import fault
from earlylog.cli.errors import CliError

WAIT = fault.BEAT_MAX + 2.0  # one beat, the dump's CPU sample, and a loaded machine
_OFFER = re.compile(r"`earlylog dump (\d+)` writes them now")


def main(args):
    target = args.target
    if os.path.isdir(target):
        found = [p for p in _offers(files.log_files(target)) if _alive_with(*p)]
        if not found:
            raise CliError("no live earlylog process with on-demand dumps writes into %s" % target)
    elif target.isdigit():
        found = [p for p in _offers(_open_logs(int(target))) if p[0] == int(target)]
        if not found:
            raise CliError("pid %s is not a live earlylog process that offers on-demand dumps (its log has "
                           "no \"earlylog dump %s\" note: earlylog is off there, or it has no watchdog thread)"
                           % (target, target))
    else:
        raise CliError("%r is neither a pid nor a log folder" % target)
    asked = []
    for pid, path in found:
        request = _request(pid, path)
        size = os.path.getsize(path)
        try:
            os.close(os.open(request, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600))
        except OSError as exc:
            print("pid %d: cannot ask it (%s: %s)" % (pid, request, exc.strerror))
            continue
        asked.append((pid, path, size))
    missing = _wait_for_dumps(asked)
    for pid, path, _size in asked:
        if pid in missing:
            _withdraw(_request(pid, path))  # a late answer, or a reused pid, must not find it
            print("pid %d: no dump within %g s; its main thread may be stuck in C code holding the GIL "
                  "(the stall timer still dumps it after EARLYLOG_STALL s): %s" % (pid, WAIT, path))
        else:
            print("pid %d: stacks written to %s" % (pid, path))
    return 0 if asked and not missing else 1


def _request(pid, path):
    """The request file in the log's own folder, where the process's watchdog looks for it."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), fault.REQUEST % pid)


def _withdraw(request):
    try:
        os.unlink(request)
    except OSError:
        pass


def _open_logs(pid):
    """The log files a process has open (its own file, found through /proc/<pid>/fd)."""
    fd_dir = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    links = set()
    for name in names:
        # One at a time: a process in its first second opens and closes files (its imports, our
        # probes), and a number listed a moment ago may be gone; that must not hide the log.
        try:
            links.add(os.readlink(os.path.join(fd_dir, name)))
        except OSError:
            continue
    return sorted(link for link in links if link.endswith(".log") and os.path.isfile(link))


def _offers(paths):
    """(pid, path) for each process whose watchdog wrote "`earlylog dump PID` writes them now" there."""
    found = []
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except OSError:  # gone or unreadable since the listing: no process to ask there
            continue
        with f:
            for line in f:
                if "`earlylog dump " not in line:
                    continue
                record = records.parse(line)
                match = _OFFER.search(record["msg"]) if record and record["kind"] == "note" else None
                if match and (int(match.group(1)), path) not in found:
                    found.append((int(match.group(1)), path))
    return found


def _alive_with(pid, path):
    """True when pid is alive and still has path open: not a finished run's pid reused."""
    return os.path.realpath(path) in {os.path.realpath(p) for p in _open_logs(pid)}


def _wait_for_dumps(asked):
    """The pids that wrote no `dump: on request` line within WAIT seconds."""
    waiting = {pid: (path, size) for pid, path, size in asked}
    deadline = time.monotonic() + WAIT
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for pid, (path, size) in list(waiting.items()):
            with open(path, "rb") as f:
                f.seek(size)
                text = f.read().decode("utf-8", "replace")
            for line in text.splitlines():
                record = records.parse(line)
                if record and record["pid"] == pid and record["kind"] == "dump" and \
                        record["msg"].startswith("on request"):
                    del waiting[pid]
                    break
    return set(waiting)
