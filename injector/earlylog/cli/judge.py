"""`python -I -S EARLYLOG/cli/judge.py LOG PID`: the report's judgement of one process that its own
watchdog asks for after a stall dump. This file, run by its path, is the runtime's one way into
the reader (runtime/act.py starts it isolated, without site or EARLYLOG, and reads its one line
of JSON): the runtime never imports the reader. It reads that one log file only, and never writes
anything but its answer on stdout. `stuck` is true only for a process the report calls stalled
and that is neither idle, busy, a parent waiting for its children, nor waiting for a person at a
terminal."""
import os
import sys

if __name__ == "__main__":
    # Run by path: close what the watchdog's process left open to it (the program's sockets, pipes,
    # a listening port: posix_spawn has no closefrom), and put this copy of earlylog first on the
    # path, before any import of the package.
    for _fd in os.listdir("/proc/self/fd"):
        if int(_fd) > 2:
            try:
                os.close(int(_fd))
            except OSError:
                pass
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import json  # noqa: E402 (after the path above)
import socket  # noqa: E402
import time  # noqa: E402

from earlylog.grammar import stalls  # noqa: E402
from earlylog.read import logread, rank_causes, verdict
from earlylog.read.causes import label
from earlylog.read.frames import where

# A thread reading a terminal: `blocked: reading fd 0 (/dev/pts/3 ...)` and the like.
_TERMINAL = ("/dev/pts/", "/dev/tty", "a terminal")


def why_not(d, report=None):
    """Why a stall is not one to act on, or None when the process is stuck."""
    straggler = _straggler(d, report) if report is not None else None
    if straggler is not None:
        return "waiting in a collective for rank %d, which is stuck outside any (the one to end; its own " \
               "watchdog judges it, and the launcher's restart ends this rank with it)" % straggler
    if d.idle:
        return "idle: %s" % d.idle
    if d.state == "busy" or (d.state == "stalled" and not verdict.stuck(d)):
        return "busy: CPU time still rising, computing rather than hung"
    if d.state != "stalled" or d.stall is None:
        return "its state is %s, not stalled" % d.state
    line = stalls.parse(d.stall.text)
    if line is not None and line.state == stalls.CHILDREN:
        return "a parent waiting for its children (they are judged on their own)"
    blocked = [t for t in d.stall.threads if (t.state or "").startswith("blocked:")]
    if blocked and all(any(mark in t.state for mark in _TERMINAL) for t in blocked):
        return "waiting for a person at a terminal"
    return None


def judgement(path, pid, now=None):
    """One dict: `stuck`, and what an alert or an exit line says about the stall."""
    now = time.time() if now is None else now
    report = verdict.judged(logread.read_one(path), now=now)
    mine = [d for d in report.processes if d.pid == pid]
    if not mine:
        return {"stuck": False, "why": "no record of pid %d in %s" % (pid, path)}
    if rank_causes.waiting(mine[-1]) is not None:
        # A rank waiting in a collective waits for its peers: the run's other logs say whether one of
        # them is the straggler, the one to end (its own watchdog does), or all wait (ranks in
        # different collectives: ending them lets the launcher restart the job).
        whole = verdict.judged(logread.read(os.path.dirname(path) or "."), now=now)
        found = [d for d in whole.processes if d.pid == pid and d.host == mine[-1].host]
        if found:
            report, mine = whole, found
    return about(mine[-1], report, path)


def _straggler(d, report):
    """The rank of d's job and attempt that stands outside any collective while d waits in one, stuck
    or computing (the one its peers wait for), else None."""
    if rank_causes.waiting(d) is None:
        return None
    ranks = rank_causes.ranks([o for o in report.processes if o.job == d.job and o.restart == d.restart])
    return next((r for r, o in sorted(ranks.items()) if o is not d and o.state in ("stalled", "busy")
                 and rank_causes.waiting(o) is None), None)


def about(d, report, path):
    """The judgement of one process of a judged report, as judgement() returns it."""
    why = why_not(d, report)
    cause = next((c for c in report.causes if d.pid in c.pids), None)
    main = d.stall.main if d.stall else None
    frame = d.where
    out = {"stuck": why is None, "host": d.host or socket.gethostname(), "pid": d.pid,
           "rank": d.rank, "local_rank": d.local_rank, "job": d.job,
           "restart": d.restart, "argv": (d.command or "")[len("argv "):] if (d.command or "").startswith("argv ") else d.command, "log": os.path.abspath(os.path.join(path, d.files[-1]) if os.path.isdir(path) and d.files else path),
           "state": d.state, "thread": main.name if main else None,
           "blocked": main.state if main else None,
           "function": frame and frame.function, "file": frame and frame.file, "line": frame and frame.line,
           "where": where(frame) if frame else None,
           "summary": d.summary, "cause": cause.text if cause else "%s %s" % (label(d), d.summary),
           "next": cause.next if cause else None}
    if why:
        out["why"] = why
    return out


def main(argv):
    try:
        path, pid = argv[0], int(argv[1])
    except (IndexError, ValueError):
        sys.stderr.write("usage: python -I -S EARLYLOG/cli/judge.py LOG PID\n")
        return 2
    sys.stdout.write(json.dumps(judgement(path, pid)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
