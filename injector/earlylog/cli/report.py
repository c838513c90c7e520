"""`earlylog report [DIR]`: finds the folder, reads it, and prints the report as text (colour only
on a tty), --json or --html. It never writes into the folder it reads."""
import json
import os
import sys
import time

from earlylog.cli.errors import CliError
from earlylog.read import files, logread, text, verdict
from earlylog.grammar import records


def add_parser(sub):
    p = sub.add_parser("report", help="one view of a run: which process is stuck where, which died and how")
    p.add_argument("folder", nargs="?", help="a log folder (default: the newest run under %s)" % records.default_base())
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="the report as JSON (schema in docs/json-schema.md)")
    out.add_argument("--html", metavar="FILE", help="write the incident page to FILE: verdict and causes first, "
                     "a timeline lane per process (click one for its stacks and warnings); one file, "
                     "opens offline in any browser")
    p.add_argument("--stacks", action="store_true", help="also print the stacks of stuck and crashed threads")
    p.set_defaults(func=main)


def find_folder(arg):
    """The folder to read; a CliError with one clear sentence when there is none."""
    if arg is None:
        base = records.default_base()
        runs = files.recent_runs(base)
        if not runs:
            raise CliError("no log folder given and no run folder under %s; pass the folder "
                           "(EARLYLOG_DIR, or the one named on each process's first line)" % base)
        # On stderr, so that --json output stays one JSON document.
        now = time.time()
        sys.stderr.write("earlylog: no folder given; reading the newest run, %s\n" % runs[0])
        if len(runs) > 1:
            sys.stderr.write("earlylog: other recent runs: %s\n" % ", ".join(
                "%s (%s ago)" % (os.path.basename(r), _age(now - os.path.getmtime(r))) for r in runs[1:4]))
        return runs[0]
    if not os.path.exists(arg):
        raise CliError("%s does not exist" % arg)
    if not os.path.isdir(arg):
        raise CliError("%s is a file, not a log folder; pass the folder that holds it" % arg)
    return arg


def _age(seconds):
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return "%d %s" % (seconds // size, unit)
    return "%d s" % max(seconds, 0)


class Progress:
    """`reading 120/1000 files` on a tty stderr, for folders that take a moment; silent otherwise."""

    def __init__(self):
        self.on = sys.stderr.isatty()
        self.shown = False
        self.next = time.monotonic() + 0.3

    def __call__(self, done, total):
        if self.on and (time.monotonic() >= self.next or (self.shown and done == total)):
            sys.stderr.write("\rreading %d/%d files" % (done, total))
            sys.stderr.flush()
            self.shown = True
            self.next = time.monotonic() + 0.1

    def clear(self):
        if self.shown:
            sys.stderr.write("\r" + " " * 40 + "\r")
            sys.stderr.flush()


def main(args):
    folder_path = find_folder(args.folder)
    progress = Progress()
    try:
        folder = logread.read(folder_path, progress)
    except OSError as exc:
        raise CliError("cannot read %s (%s)" % (folder_path, exc.strerror or exc))
    finally:
        progress.clear()
    result = verdict.judge(folder)
    if not result["processes"]:
        inner = files.recent_runs(folder_path)
        raise CliError("%s holds no earlylog logs; %s" % (folder_path, (
            "it holds run folders: pass one, e.g. the newest, %s" % inner[0]) if inner else (
            "pass the folder named on a process's first earlylog line (`start: ... log PATH`), and check "
            "that EARLYLOG=1 reached the job's Python (`earlylog status --python PYTHON`)")))
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
    elif args.html:
        from earlylog.read import html
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(html.page(result))
        except OSError as exc:
            raise CliError("cannot write %s (%s)" % (args.html, exc.strerror or exc))
        sys.stdout.write("%s\nwrote %s\n" % (result["verdict"][0], args.html))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write("\n".join(text.lines(result, colour, args.stacks)) + "\n")
    return 1 if any(d["state"] in verdict.TROUBLE for d in result["processes"]) else 0
