"""`earlylog report [DIR]`: finds the folder, reads it, and prints the verdict and the process tree
as text (80 columns, colour only on a tty), --json or --html. It never writes into the folder."""
import json
import os
import sys
import textwrap
import time

from earlylog import logread, sinks, verdict
from earlylog.installer import CliError

WIDTH = 80
_COLOURS = {"stalled": "33", "crashed": "31", "killed": "31", "vanished": "31", "failed": "31",
            "exited": "32", "running": "36", "unknown": "2"}


def add_parser(sub):
    p = sub.add_parser("report", help="one view of a run: which process is stuck where, which died and how")
    p.add_argument("folder", nargs="?", help="a log folder (default: the newest run under %s)" % sinks.default_base())
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="the report as JSON (schema in the README)")
    out.add_argument("--html", metavar="FILE", help="write a self-contained timeline page to FILE")
    p.add_argument("--stacks", action="store_true", help="also print the stacks of stuck and crashed threads")
    p.set_defaults(func=main)


def newest_run(base=None):
    """The most recently changed run folder under the default base, or None."""
    base = base or sinks.default_base()
    try:
        runs = [os.path.join(base, n) for n in os.listdir(base) if n != "cache" and not n.startswith(".")]
    except OSError:
        return None
    runs = [r for r in runs if os.path.isdir(r)]
    return max(runs, key=os.path.getmtime) if runs else None


def find_folder(arg):
    """The folder to read; a CliError with one clear sentence when there is none."""
    if arg is None:
        folder = newest_run()
        if folder is None:
            raise CliError("no log folder given and no run folder under %s; pass the folder "
                           "(EARLYLOG_DIR, or the one named on each process's first line)" % sinks.default_base())
        return folder
    if not os.path.exists(arg):
        raise CliError("%s does not exist" % arg)
    if not os.path.isdir(arg):
        raise CliError("%s is a file, not a log folder; pass the folder that holds it" % arg)
    return arg


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
    inner = newest_run(folder_path) if not result["processes"] else None
    if inner is not None:
        result["problems"].append("this folder holds run folders; the newest is %s" % inner)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
    elif args.html:
        from earlylog import htmlreport
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(htmlreport.page(result))
        except OSError as exc:
            raise CliError("cannot write %s (%s)" % (args.html, exc.strerror or exc))
        sys.stdout.write("%s\nwrote %s\n" % (result["verdict"][0], args.html))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write("\n".join(text(result, colour, args.stacks)) + "\n")
    return 1 if any(d["state"] in verdict.TROUBLE for d in result["processes"]) else 0


def _wrap(line, indent="", first=""):
    return textwrap.wrap(line, WIDTH, initial_indent=first or indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False, break_long_words=True) or [first]


def text(result, colour=False, stacks=False):
    """The report as lines of at most 80 columns: verdict first, then the process tree."""
    paint = (lambda state, s: "\033[%sm%s\033[0m" % (_COLOURS.get(state, "0"), s)) if colour else \
        (lambda state, s: s)
    hosts = result["hosts"]
    out = []
    for i, line in enumerate(result["verdict"]):
        out += _wrap(line, "", "" if i == 0 else "- ")
    for problem in result["problems"]:
        out += _wrap("note: " + problem)
    if not result["processes"]:
        return out
    out.append("")
    out.append("%d process%s in %s%s:" % (  # not wrapped: a path must stay whole to copy
        len(result["processes"]), "es" if len(result["processes"]) != 1 else "", result["folder"],
        " (hosts " + ", ".join(hosts) + ")" if len(hosts) > 1 else ""))
    by_key = {(d["host"], d["pid"]): d for d in result["processes"]}
    keys = set(by_key)
    roots = [d for d in result["processes"] if (d["host"], d["ppid"]) not in keys or d["ppid"] == d["pid"]]
    for d in roots:
        out += _tree(d, by_key, 0, paint, stacks, len(hosts) > 1)
    return out


def _tree(d, by_key, depth, paint, stacks, show_host):
    indent = "  " * min(depth, 6)
    name = "%s%d %s" % ((d["host"] or "?") + ":" if show_host else "", d["pid"], d["tag"])
    state = d["state"] + (" %d" % d["status"] if d["state"] in ("exited", "failed") else "")
    lines = [indent + name + " " + paint(d["state"], state)]
    detail = indent + "    "
    if d["summary"] and d["state"] != "exited":
        lines += _wrap(d["summary"], detail, detail)
    for t in (d["stall"] or {}).get("threads", []):
        if not t["main"] and not t["name"].startswith("earlylog"):  # the main thread is the summary
            lines += _wrap("thread %s in %s%s" % (t["name"], verdict.where(verdict.frame_tuple(t["frame"])),
                                                  "; " + t["state"] if t["state"] else ""), detail, detail)
    if d["command"] and d["state"] in verdict.TROUBLE:
        lines += _wrap(d["command"], detail, detail)[:2]
    if d["state"] in verdict.TROUBLE:
        for w in d["warnings"][:3]:
            lines += _wrap("WARNING " + w, detail, detail)
    if stacks:
        lines += _stacks(d, detail)
    for pid in d["children"]:
        child = by_key.get((d["host"], pid))
        if child is not None:
            lines += _tree(child, by_key, depth + 1, paint, stacks, show_host)
    return lines


def _stacks(d, indent):
    threads = (d["stall"] or {}).get("threads") or (d["crash"] or {}).get("threads") or []
    lines = []
    for t in threads:
        lines.append("%sthread %s%s" % (indent, t["name"], ": " + t["state"] if t["state"] else ""))
        for f in t["frames"]:
            path = os.path.basename(f["file"]) if verdict.library(f["file"]) else f["file"]
            lines.append("%s  %s:%d in %s" % (indent, path, f["line"], f["function"]))
    return lines
