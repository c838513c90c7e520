"""The `earlylog` command: install, uninstall, status, run, env, and the log readers.
It only reads what the runtime writes; the hook never logs in this command's own process."""
import argparse
import sys

from earlylog import __version__


def _interpreter_options(parser):
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--python", metavar="EXE", help="the interpreter to act on (default: this one)")
    group.add_argument("--venv", metavar="DIR", help="a virtual environment folder to act on")


def build_parser():
    from earlylog.cli import installer, launch
    parser = argparse.ArgumentParser(
        prog="earlylog", description="See why a Python process hangs or dies early, with no edit to it.")
    parser.add_argument("--version", action="version", version="earlylog " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("install", help="put the hook into another interpreter or virtualenv")
    _interpreter_options(p)
    p.set_defaults(func=installer.install)
    p = sub.add_parser("uninstall", help="remove exactly what `earlylog install` wrote")
    _interpreter_options(p)
    p.set_defaults(func=installer.uninstall)
    p = sub.add_parser("status", help="is the hook installed, will it run, where do logs go")
    _interpreter_options(p)
    p.set_defaults(func=installer.status)
    p = sub.add_parser("run", help="run a command with earlylog on in every Python it starts")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=launch.run)
    p = sub.add_parser("env", help="print the variables that turn earlylog on in a launcher's env",
                       description="Print EARLYLOG=1 and a PYTHONPATH folder holding a private copy of the "
                                   "runtime, so every Python a launcher starts logs, even one where earlylog "
                                   "is not installed. Merge them into the launcher's own environment.")
    fmt = p.add_mutually_exclusive_group()
    for name, what in (("sh", "`export NAME=value` lines for sh/bash/zsh (the default)"),
                       ("json", "one JSON object, e.g. for Node.js: {...process.env, ...earlylogEnv}"),
                       ("cmd", "`set NAME=value` lines for Windows cmd.exe"),
                       ("powershell", "`$env:NAME = \"value\"` lines for PowerShell")):
        fmt.add_argument("--" + name, dest="format", action="store_const", const=name, help=what)
    p.set_defaults(func=launch.env, format="sh")
    p = sub.add_parser("dump", help="make live earlylog processes write every thread's stack now")
    p.add_argument("target", metavar="PID|LOGDIR", help="one process, or every live process logging into a folder")
    p.set_defaults(func=_dump)
    from earlylog.cli import report, tail, watch
    report.add_parser(sub)
    tail.add_parser(sub)
    watch.add_parser(sub)
    return parser


def _dump(args):
    from earlylog.cli import dump
    return dump.main(args)


def main(argv=None):
    from earlylog.cli.errors import CliError
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except CliError as exc:
        sys.stderr.write("earlylog: %s\n" % exc)
        return 2
    except KeyboardInterrupt:
        return 130
