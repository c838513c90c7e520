"""Native (C) stacks of this process from py-spy or gdb, best effort, for the first stall dump.
It must never raise, never leave the tool running past its timeout, and never run in a signal handler."""
import os

TIMEOUT = 30.0
MAX_LINES = 400


def stacks(pid):
    """(header, lines): the tool's output, or a header saying why there is none."""
    from earlylog.runtime import spawn
    tools = (("py-spy", ["dump", "--native", "--pid", str(pid)]),
             ("gdb", ["-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"]))
    for name, args in tools:
        exe = spawn.which(name)
        if exe:
            return _run(name, [exe] + args)
    return "no native stacks: neither py-spy nor gdb is on PATH", []


def _run(name, argv):
    from earlylog.runtime import spawn
    # The tool must not start earlylog (gdb embeds Python) nor inherit our log switches.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}
    try:
        status, out = spawn.run(argv, TIMEOUT, env=env, stderr_too=True)
    except OSError as exc:
        return "no native stacks: cannot run %s (%s)" % (name, exc.strerror or exc), []
    if status == "timeout":
        return "no native stacks: %s did not finish within %g s" % (name, TIMEOUT), []
    lines = out.decode("utf-8", "replace").splitlines()
    keep = [line for line in lines if line.startswith(("Thread ", "#", " ", "Process "))]
    if status != 0 or not keep:
        reason = (lines[-1] if lines else "exit status %s" % status).strip()
        return "no native stacks: %s failed (%s; ptrace may be forbidden here)" % (name, reason[:300]), []
    if len(keep) > MAX_LINES:
        keep = keep[:MAX_LINES] + ["... (%d more lines cut)" % (len(keep) - MAX_LINES)]
    return "native stacks from %s (%d lines)" % (name, len(keep)), keep
