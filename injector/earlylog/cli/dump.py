"""`earlylog dump <pid|log folder>`: ask live earlylog processes to write every thread's stack now.
It never signals a process whose own log does not offer SIGUSR1 (it would kill it), nor writes a log."""
import os
import re
import signal
import time

from earlylog.read import files
from earlylog.runtime import records
from earlylog.cli.errors import CliError

WAIT = 5.0
_OFFER = re.compile(r"kill -USR1 (\d+) dumps them now")


def main(args):
    if not hasattr(signal, "SIGUSR1"):
        raise CliError("on-demand dumps need SIGUSR1, which this system does not have")
    target = args.target
    if os.path.isdir(target):
        found = [p for p in _offers(files.log_files(target)) if _alive_with(*p)]
        if not found:
            raise CliError("no live earlylog process with on-demand dumps writes into %s" % target)
    elif target.isdigit():
        found = [p for p in _offers(_open_logs(int(target))) if p[0] == int(target)]
        if not found:
            raise CliError("pid %s is not a live earlylog process that offers on-demand dumps (its log "
                           "has no \"kill -USR1\" line: earlylog is off there, or SIGUSR1 is the program's own)"
                           % target)
    else:
        raise CliError("%r is neither a pid nor a log folder" % target)
    sent = []
    for pid, path in found:
        size = os.path.getsize(path)
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError as exc:
            print("pid %d: cannot signal it (%s)" % (pid, exc.strerror))
            continue
        sent.append((pid, path, size))
    missing = _wait_for_dumps(sent)
    for pid, path, _size in sent:
        if pid in missing:
            print("pid %d: no dump within %g s; its main thread may be stuck in C code holding the GIL "
                  "(the stall timer still dumps it after EARLYLOG_STALL s): %s" % (pid, WAIT, path))
        else:
            print("pid %d: stacks written to %s" % (pid, path))
    return 0 if sent and not missing else 1


def _open_logs(pid):
    """The .log files a process has open (its own file, found through /proc/<pid>/fd)."""
    fd_dir = "/proc/%d/fd" % pid
    try:
        links = [os.readlink(os.path.join(fd_dir, n)) for n in os.listdir(fd_dir)]
    except OSError:
        return []
    return sorted({link for link in links if link.endswith(".log") and os.path.isfile(link)})


def _offers(paths):
    """(pid, path) for each process whose watchdog wrote "kill -USR1 PID dumps them now" there."""
    found = []
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except OSError:  # gone or unreadable since the listing: no process to ask there
            continue
        with f:
            for line in f:
                if "kill -USR1" not in line:
                    continue
                record = records.parse(line)
                match = _OFFER.search(record["msg"]) if record and record["kind"] == "note" else None
                if match and (int(match.group(1)), path) not in found:
                    found.append((int(match.group(1)), path))
    return found


def _alive_with(pid, path):
    """True when pid is alive and still has path open: not a finished run's pid reused."""
    return os.path.realpath(path) in {os.path.realpath(p) for p in _open_logs(pid)}


def _wait_for_dumps(sent):
    """The pids that wrote no `dump: SIGUSR1` line within WAIT seconds."""
    waiting = {pid: (path, size) for pid, path, size in sent}
    deadline = time.monotonic() + WAIT
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for pid, (path, size) in list(waiting.items()):
            with open(path, "rb") as f:
                f.seek(size)
                text = f.read().decode("utf-8", "replace")
            for line in text.splitlines():
                record = records.parse(line)
                if record and record["pid"] == pid and record["kind"] == "dump" and "SIGUSR1" in record["msg"]:
                    del waiting[pid]
                    break
    return set(waiting)
