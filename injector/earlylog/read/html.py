"""The --html incident page: one self-contained file (inline CSS and script, no network, no fonts
to fetch) with the verdict and causes first, then a timeline (one lane per process, grouped by host
and parent) whose lanes and marks open that process's stacks and warnings.

It only renders the judged report; it never reads the log folder. Everything that came from logs
(argv, frames, phase names, warnings) reaches the page either through html.escape or as JSON in a
<script type="application/json"> block whose `<`, `>` and `&` are \\u-escaped, and the page's
script puts it on screen with textContent only, never as markup."""
import html
import json
import re
import time

from earlylog.read import frames, html_assets, verdict

# Shown as a path's short form in stacks: the part after the library folder a reader knows.
_SHORT = re.compile(r"/(?:site|dist)-packages/(.+)$|/lib/python\d[^/]*/(.+)$")
# A state in the words of the page's chips, pills and tooltips.
WORDS = {"stalled": "stuck", "killed": "killed", "crashed": "crashed", "vanished": "vanished", "failed": "failed",
         "exited": "exited", "terminated": "stopped by its parent", "running": "running", "unknown": "unknown"}
SHOWN_LINES = 6  # verdict lines shown before the rest fold
MAX_TEXT = 2000  # one argv or warning shown at most this long: a page stays small at 1,000 processes


def page(report):
    """The whole page as one string."""
    data = _json(_data(report))
    text = _PAGE % {"title": html.escape(report["folder"]), "style": html_assets.STYLE, "head": _head(report),
                    "legend": _LEGEND, "data": data, "script": html_assets.SCRIPT}
    # A folder name that is not UTF-8 (undecodable bytes kept as surrogates) must not stop the write.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _json(value):
    """JSON that cannot end its <script> block or open a comment, whatever strings it holds."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")


def _clip(text):
    text = text or ""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\u2026"


# ---- the header: verdict, causes, counts (rendered here, so it reads even with scripts off) ----

def _head(report):
    counts = report["counts"]
    chips = "".join('<span class="chip s-%s"><i></i>%d %s</span>' % (html.escape(s), n, html.escape(WORDS.get(s, s)))
                    for s, n in sorted(counts.items(), key=lambda kv: (kv[0] not in verdict.TROUBLE, kv[0]))
                    if s != "processes")
    n, hosts = counts.get("processes", 0), report["hosts"]
    return ('<header><div class="brand">earlylog incident report</div>\n'
            '<div class="folder" title="the log folder this page was made from">%s</div>\n'
            '<div class="meta">%s &middot; %d process%s%s &middot; report made %s</div></header>\n%s' % (
                html.escape(report["folder"]), chips, n, "" if n == 1 else "es",
                " on %d hosts" % len(hosts) if len(hosts) > 1 else "",
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report["generated"])), _verdict(report)))


def _verdict(report):
    """The headline, the causes as cards with their next steps, the other verdict lines, notes."""
    causes = report.get("causes") or []
    texts = tuple(c["text"] for c in causes if c.get("text"))
    # The verdict repeats each cause as a line of its own; the cards already show those.
    others = [line for line in report["verdict"][1:] if not (texts and line.startswith(texts))]
    bad = any(s in verdict.TROUBLE for s in report["counts"])
    out = ['<section class="verdict %s"><h1>%s</h1>' % ("bad" if bad else "good", html.escape(report["verdict"][0]))]
    if causes:
        out.append('<ol class="causes">%s</ol>' % "".join(_cause(c) for c in causes))
    # A thousand stuck ranks make a thousand lines: the first few stand, the rest fold.
    out.append(_items("lines", others[:SHOWN_LINES]))
    if len(others) > SHOWN_LINES:
        out.append('<details class="more"><summary>%d more lines</summary>%s</details>'
                   % (len(others) - SHOWN_LINES, _items("lines", others[SHOWN_LINES:])))
    problems = report["problems"]
    if problems:
        out.append('<details class="notes"><summary>%d note%s on reading the folder</summary>%s</details>'
                   % (len(problems), "" if len(problems) == 1 else "s", _items("", problems)))
    return "\n".join(out + ["</section>"])


def _items(cls, lines):
    return '<ul class="%s">%s</ul>' % (cls, "".join("<li>%s</li>" % html.escape(line) for line in lines)) \
        if lines else ""


def _cause(c):
    e = html.escape
    pids = "".join('<button class="pidlink" data-pid="%d">pid %d</button>' % (p, p)
                   for p in c.get("pids") or [] if isinstance(p, int))
    threads = ", ".join(e(str(t)) for t in c.get("threads") or [])
    return ('<li class="cause"><span class="kind">%s</span><div class="ctext">%s</div>%s'
            '<div class="cwho">%s%s</div></li>' % (
                e(c.get("kind") or "cause"), e(c.get("text") or ""),
                '<div class="next"><b>Next:</b> %s</div>' % e(c["next"]) if c.get("next") else "",
                pids, ' <span class="threads">threads: %s</span>' % threads if threads else ""))


# ---- the page's data: processes in tree order, times from the first start, stacks interned ----

class _Table:
    """Interns paths, function names and frames: a thousand ranks stuck in the same call share
    one copy of each frame instead of a thousand."""

    def __init__(self):
        self.paths, self.names, self.frames = [], [], []
        self._paths, self._names, self._frames = {}, {}, {}

    def path(self, path):
        i = self._paths.get(path)
        if i is None:
            m = _SHORT.search(path)
            short = (m.group(1) or m.group(2)) if m else path
            # frames.library is the one rule for "not the user's code": the page only reads its flag
            i = self._paths[path] = len(self.paths)
            self.paths.append([path, short, 1 if frames.library(path) else 0])
        return i

    def name(self, name):
        i = self._names.get(name)
        if i is None:
            i = self._names[name] = len(self.names)
            self.names.append(name)
        return i

    def frame(self, f):
        key = (self.path(f["file"]), f["line"], self.name(f["function"]))
        i = self._frames.get(key)
        if i is None:
            i = self._frames[key] = len(self.frames)
            self.frames.append(list(key))
        return i


def _tree(procs):
    """(index, depth, parent index or -1) for every process: hosts in order, then each host's
    roots by start time with their children under them. A pid reused into a loop of parents
    cannot hang the walk: a process already placed is never placed again."""
    at = {(d["host"], d["pid"]): i for i, d in enumerate(procs)}
    kids = {}
    parent = [-1] * len(procs)
    for i, d in enumerate(procs):
        up = at.get((d["host"], d["ppid"]))
        if up is not None and up != i:
            parent[i] = up
            kids.setdefault(up, []).append(i)
    order, placed = [], set()
    hosts = sorted({d["host"] or "?" for d in procs})
    for host in hosts:
        mine = [i for i, d in enumerate(procs) if (d["host"] or "?") == host]
        # roots first; then anything a parent loop left unplaced becomes a root of its own
        for start in [i for i in mine if parent[i] < 0] + mine:
            if start in placed:
                continue
            stack = [(start, 0)]
            while stack:
                i, depth = stack.pop()
                if i in placed:
                    continue
                placed.add(i)
                order.append((i, depth, parent[i] if parent[i] in placed else -1))
                stack.extend((k, depth + 1) for k in reversed(kids.get(i, [])))
    return order


def _threads(threads, table):
    """Threads for the page, the main (or crashing) one first, each frame an index into the table."""
    out = []
    for t in sorted(threads, key=lambda t: not t["main"]):
        known = {t["state"], "phase: %s" % t["phase"]}
        out.append({"name": t["name"], "main": t["main"], "state": t["state"], "phase": t["phase"],
                    "notes": [n for n in t["notes"] if n not in known],
                    "frames": [table.frame(f) for f in t["frames"]]})
    return out


def _args(command):
    """The words after the script or module of an argv (`train.py --lr 3` gives `--lr 3`): what
    tells apart lanes that share a name. Empty when the argv has no script."""
    words = (command or "").split()
    for i, word in enumerate(words[:-1]):
        if word.endswith(".py") or (word == "-m" and i + 1 < len(words)):
            rest = words[i + (2 if word == "-m" else 1):]
            return " ".join(rest)[:60]
    return ""


def _lane_end(d, generated):
    """Where a lane stops: its end; for a stalled process, as far as the verdict counted its
    silence (now here, its last line for one on another host); now for one running; else its
    last line."""
    if d["end"] is not None:
        return d["end"]
    stall = d["stall"] or {}
    since = stall.get("since") if stall.get("since") is not None else d["start"]
    if d["state"] == "stalled" and stall.get("seconds") is not None and since is not None:
        end = since + stall["seconds"]  # rounded to 0.1 s: one counted up to now ends at now
        return generated if abs(end - generated) < 0.1 else min(end, generated)
    if d["state"] in ("running", "stalled"):
        return max(generated, d["last_seen"] or generated)
    return d["last_seen"] if d["last_seen"] is not None else d["start"]


def _data(report):
    """What the page's script reads: processes in tree order with times in seconds from the
    first start, and the tables their stacks index into."""
    procs, generated = report["processes"], report["generated"]
    starts = [d["start"] for d in procs if d["start"] is not None]
    t0 = min(starts) if starts else generated
    table, order = _Table(), _tree(procs)
    index = {i: n for n, (i, _depth, _up) in enumerate(order)}
    out = [_proc(procs[i], depth, index[up] if up >= 0 else -1, t0, generated, table) for i, depth, up in order]
    for n, p in enumerate(out):
        if p["parent"] >= 0:
            out[p["parent"]]["kids"].append(n)
    return {"t0": t0, "span": max([p["end"] for p in out] + [0.001]), "now": round(generated - t0, 3),
            "clock": time.strftime("%H:%M:%S", time.localtime(t0)), "trouble": list(verdict.TROUBLE),
            "words": WORDS, "hosts": sorted({p["host"] for p in out}), "procs": out,
            "causes": report.get("causes") or [], "paths": table.paths, "names": table.names,
            "frames": table.frames}


def _proc(d, depth, parent, t0, generated, table):
    """One process for the page (see _data)."""
    def rel(t):
        return None if t is None else round(t - t0, 3)
    end = _lane_end(d, generated)
    start = next(t for t in (d["start"], end, t0) if t is not None)
    p = {"host": d["host"] or "?", "pid": d["pid"], "ppid": d["ppid"], "tag": d["tag"] or "", "rank": d["rank"],
         "state": d["state"], "status": d["status"], "summary": d["summary"], "depth": depth, "parent": parent,
         "kids": [], "cmd": _clip(re.sub(r"^argv ", "", d["command"] or "")), "args": _args(d["command"]),
         "start": rel(start), "end": rel(end if end is not None else start), "last": rel(d["last_seen"]),
         "phases": [[ph["name"], rel(ph["begin"]), rel(ph["end"]), ph["outcome"]]
                    for ph in d["phases"] if ph["begin"] is not None],
         "warnings": [_clip(w) for w in d["warnings"]], "where": d["where"], "exception": d["exception"],
         "files": d["files"], "memory": (d["memory"] or {}).get("last")}
    if d["stall"] is not None:
        since = d["stall"]["since"] if d["stall"]["since"] is not None else start
        # How the page draws the silence: hatched only where the process was stuck; one that waited
        # for work (Ray's daemons, a server), computed, or was being stopped (in its own SIGTERM
        # handler) is drawn plain.
        p["stall"] = {"since": rel(since), "seconds": d["stall"].get("seconds"),
                      "threads": _threads(d["stall"]["threads"], table),
                      "kind": "idle" if d["idle"] else "busy" if d["state"] == "busy" else
                      "stuck" if d["state"] == "stalled" or verdict.stuck_in_json(d) else "quiet"}
    if d["crash"] is not None:
        p["crash"] = {"what": d["crash"]["what"], "signal": d["crash"]["signal"],
                      "threads": _threads(d["crash"]["threads"], table)}
    return p


_LEGEND = """<div class="legend" aria-label="legend">
<span><i class="sw life"></i>alive</span><span><i class="sw ph"></i>phase</span>
<span><i class="sw ph open"></i>phase still open</span><span><i class="sw ph err"></i>phase failed</span>
<span><i class="sw band"></i><i class="m m-stall"></i>stalled from here</span><span><i class="sw band idle"></i>idle (waiting for work)</span>
<span><i class="m m-crashed"></i>crashed</span><span><i class="m m-killed"></i>killed by a signal</span>
<span><i class="m m-vanished"></i>vanished</span><span><i class="m m-failed"></i>failed (exit &ne; 0)</span>
<span><i class="m m-exited"></i>exited 0</span><span><i class="m m-terminated"></i>stopped by its parent</span>
<span><i class="m m-running"></i>still running</span></div>"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>earlylog report: %(title)s</title>
<style>%(style)s</style></head><body>
%(head)s
<section class="board">
<div class="tl">
<div class="bar"><div class="filters" role="group" aria-label="show">
<button type="button" id="f-all">all</button><button type="button" id="f-trouble">in trouble</button></div>
<input id="q" type="search" placeholder="filter: pid, name, host, command" aria-label="filter lanes">
<span id="shown"></span></div>
%(legend)s
<div id="lanes" tabindex="0"><div id="axis"><div class="axt" id="axt"></div></div><div id="lanes-inner"></div></div>
<noscript><p>The timeline and stacks need JavaScript;
<code>earlylog report --stacks</code> prints the same.</p></noscript>
</div>
<aside id="detail"><p class="hint">Click a lane or a mark to see that process's stacks, warnings and phases.</p></aside>
</section>
<script type="application/json" id="page-data">%(data)s</script>
<script>%(script)s</script>
</body></html>
"""
