"""Native (C) stacks of this process from py-spy (preferred) or gdb, for the first stall dump of a
blocked process when EARLYLOG_NATIVE=1. Both tools stop every thread of the process while they
read it, the watchdog's included, so no timeout kept in here could fire: a small shell outside
the process kills the tool after TIMEOUT, then sends the process SIGCONT so it never stays stopped.
It must never raise, never run for a busy process, and never run in a signal handler."""
import os
import time

TIMEOUT = 15.0
MAX_LINES = 400
# $1 this process, $2 seconds, then the tool's argv. A timer subshell kills the tool after $2 s
# (and its own sleep goes with it when the tool ends first). A tool that was killed, or died of a
# signal, may leave its tracee stopped (a pending SIGSTOP from its attach): SIGCONT resumes it.
_GUARD = """target=$1 limit=$2; shift 2
"$@" & tool=$!
(trap 'kill $! 2>/dev/null; exit 0' TERM; sleep "$limit" & wait $!; kill -KILL "$tool" 2>/dev/null) & timer=$!
wait "$tool"; status=$?
kill "$timer" 2>/dev/null; wait "$timer"
if [ "$status" -gt 128 ]; then kill -CONT "$target"; fi
exit "$status"
"""


def stacks(pid):
    """(header, lines): the tool's output, or a header saying why there is none."""
    from earlylog.runtime import spawn
    tools = (("py-spy", ["dump", "--native", "--pid", str(pid)]),
             ("gdb", ["-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"]))
    for name, args in tools:
        exe = spawn.which(name)
        if exe:
            return _run(name, [exe] + args, pid)
    return "no native stacks: neither py-spy nor gdb is on PATH", []


def _run(name, argv, pid):
    from earlylog.runtime import spawn
    # The tool must not start earlylog (gdb embeds Python) nor inherit our log switches.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}
    limit = max(1, int(TIMEOUT))
    started = time.monotonic()
    try:
        status, out = spawn.run(["/bin/sh", "-c", _GUARD, "earlylog-native", str(pid), str(limit)] + argv,
                                limit + 10, env=env, stderr_too=True, to_file=True)
    except OSError as exc:
        return "no native stacks: cannot run %s (%s)" % (name, exc.strerror or exc), []
    if status == "timeout" or (status == 128 + 9 and time.monotonic() - started >= limit):
        return "no native stacks: %s did not finish within %d s (stopped; this process resumed)" % (name, limit), []
    lines = out.decode("utf-8", "replace").splitlines()
    keep = [line for line in lines if line.startswith(("Thread ", "#", " ", "Process "))]
    if status != 0 or not keep:
        reason = (lines[-1] if lines else "exit status %s" % status).strip()
        return "no native stacks: %s failed (%s; ptrace may be forbidden here)" % (name, reason[:300]), []
    if len(keep) > MAX_LINES:
        keep = keep[:MAX_LINES] + ["... (%d more lines cut)" % (len(keep) - MAX_LINES)]
    return "native stacks from %s (%d lines)" % (name, len(keep)), keep
