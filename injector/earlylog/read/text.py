"""The report as text: the verdict first, then the process tree (grouped by host when the run
spans hosts, or ran elsewhere), at most 80 columns, colour only when asked. It renders the judged
data only; it never reads files or prints."""
import os
import textwrap

from earlylog.read import frames, verdict

WIDTH = 80
_COLOURS = {"stalled": "33", "crashed": "31", "killed": "31", "vanished": "31", "failed": "31",
            "exited": "32", "running": "36", "idle": "36", "busy": "36", "terminated": "2", "unknown": "2"}


def _wrap(line, indent="", first=""):
    return textwrap.wrap(line, WIDTH, initial_indent=first or indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False, break_long_words=True) or [first]


def lines(result, colour=False, stacks=False):
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
    here = result.get("host")
    if len(hosts) == 1 and (hosts[0] == here or here is None):
        for d in roots:
            out += _tree(d, by_key, 0, paint, stacks)
        return out
    for host in hosts:
        mine = [d for d in result["processes"] if (d["host"] or "?") == host]
        out += _wrap(_host_line(host, here, mine))
        for d in roots:
            if (d["host"] or "?") == host:
                out += _tree(d, by_key, 1, paint, stacks)
    return out


def _host_line(host, here, procs):
    """`host node1 (this host), 3 processes:` or, elsewhere, that liveness cannot be checked."""
    count = "%d process%s" % (len(procs), "es" if len(procs) != 1 else "")
    if host == here:
        return "host %s (this host), %s:" % (host, count)
    return "host %s, %s: another host; whether they still run cannot be checked from here, so they " \
           "are judged by their logs alone (stall dumps, exits):" % (host, count)


def _tree(d, by_key, depth, paint, stacks):
    indent = "  " * min(depth, 6)
    name = "%d %s" % (d["pid"], d["title"] or d["tag"]) + _place(d)
    state = d["state"] + (" %d" % d["status"] if d["state"] in ("exited", "failed") else "")
    lines = [indent + name + " " + paint(d["state"], state)]
    detail = indent + "    "
    if d["summary"] and d["state"] != "exited":
        lines += _wrap(d["summary"], detail, detail)
    for t in (d["stall"] or {}).get("threads", []) if d["state"] in verdict.TROUBLE else []:
        if not t["main"] and not t["name"].startswith("earlylog"):  # the main thread is the summary
            lines += _wrap("thread %s in %s%s" % (t["name"], frames.where(frames.frame_tuple(t["frame"])),
                                                  "; " + t["state"] if t["state"] else ""), detail, detail)
    if d["command"] and d["state"] in verdict.TROUBLE:
        lines += _wrap(d["command"], detail, detail)[:2]
    if d["state"] in verdict.TROUBLE:
        for w in d["warnings"][:3]:
            lines += _wrap("WARNING " + w, detail, detail)
    if d.get("output_left_out"):
        gap = d["output_left_out"]
        lines += _wrap("its log left out %d lines (%.1f MiB) of its output, past EARLYLOG_MAX_LOG (`earlylog tail` "
                       "shows where)" % (gap["lines"], gap["mib"]), detail, detail)
    if stacks:
        lines += _stacks(d, detail)
    for pid in d["children"]:
        child = by_key.get((d["host"], pid))
        if child is not None:
            lines += _tree(child, by_key, depth + 1, paint, stacks)
    return lines


def _place(d):
    """` (rank 3, local 1, node 1, job 4711)`: the process's place in a distributed job, if any."""
    words = [("rank", d.get("rank")), ("local", d.get("local_rank")), ("node", d.get("node_rank")),
             ("job", d.get("job")),
             ("attempt", d.get("restart") or None)]  # torchrun's restarts; the first attempt goes unsaid
    words = ["%s %s" % (k, v) for k, v in words if v is not None]
    return " (%s)" % ", ".join(words) if words else ""


def _stacks(d, indent):
    threads = (d["stall"] or {}).get("threads") or (d["crash"] or {}).get("threads") or []
    lines = []
    for t in threads:
        lines.append("%sthread %s%s" % (indent, t["name"], ": " + t["state"] if t["state"] else ""))
        for f in t["frames"]:
            path = os.path.basename(f["file"]) if frames.library(f["file"]) else f["file"]
            lines.append("%s  %s:%d in %s" % (indent, path, f["line"], f["function"]))
    return lines
