"""`earlylog run` and `earlylog env`: earlylog for every Python a launcher starts, via its env.
It only builds environment variables and starts the command; it never edits the command."""
import json
import os
import subprocess
import sys

from earlylog.cli import bundle
from earlylog.cli.errors import CliError


def variables(environ=os.environ):
    """EARLYLOG=1 and PYTHONPATH with the runtime folder first (plus EARLYLOG_* already set)."""
    try:
        folder = bundle.pythonpath_folder()
    except OSError as exc:
        raise CliError(str(exc))
    old = environ.get("PYTHONPATH", "")
    # An empty entry means the current folder: keep it, or the program could import less.
    parts = [folder] + ([p for p in old.split(os.pathsep) if p != folder] if old else [])
    out = {"EARLYLOG": "1", "PYTHONPATH": os.pathsep.join(parts)}
    for name, value in sorted(environ.items()):
        if name.startswith("EARLYLOG_"):
            out[name] = value
    return out


def _quote_sh(value):
    import shlex
    return shlex.quote(value)


FORMATS = {
    "sh": lambda k, v: "export %s=%s" % (k, _quote_sh(v)),
    "cmd": lambda k, v: "set %s=%s" % (k, v),
    "powershell": lambda k, v: "$env:%s = '%s'" % (k, v.replace("'", "''")),
}


def env(args):
    values = variables()
    if args.format == "json":
        print(json.dumps(values, indent=2))
    else:
        print("\n".join(FORMATS[args.format](k, v) for k, v in values.items()))
    return 0


def run(args):
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("nothing to run: give a command after `earlylog run --`")
    values = variables()
    if "EARLYLOG_DIR" not in values and "EARLYLOG_FILE" not in values:
        import time
        from earlylog.runtime import sinks  # the runtime's writer side: not loaded for the other commands
        try:
            values["EARLYLOG_DIR"] = sinks.new_run_dir(time.time())
        except OSError as exc:
            raise CliError("cannot make the log folder (%s); set EARLYLOG_DIR to a folder of yours" % exc)
    child_env = dict(os.environ, **values)
    sys.stderr.write("earlylog: logs of this run go to %s\n"
                     % values.get("EARLYLOG_DIR", values.get("EARLYLOG_FILE")))
    sys.stderr.flush()
    if os.name == "nt":  # exec on Windows does not keep the console or the exit status
        try:
            return subprocess.call(command, env=child_env)
        except OSError as exc:
            raise CliError("cannot run %s (%s)" % (command[0], exc.strerror or exc))
    try:
        os.execvpe(command[0], command, child_env)
    except OSError as exc:
        raise CliError("cannot run %s (%s)" % (command[0], exc.strerror or exc))
