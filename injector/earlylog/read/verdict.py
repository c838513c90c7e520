"""Judges a read folder: each process's state (running, stalled, exited, crashed, killed, vanished,
unknown) and the cross-process story (straggler rank, parent waiting on a child, likely cause).
It only looks (its own /proc reads included) and returns plain data; it never prints or writes."""
import os
import re
import time

from earlylog import __version__
from earlylog.read import process_causes, thread_causes
from earlylog.read.causes import label, secs
from earlylog.read.frames import call_name, frame_dict, frame_tuple, user_frame, where
from earlylog.runtime import identity

SCHEMA = 1
TROUBLE = ("stalled", "crashed", "killed", "vanished", "failed")
_CRASHES = {"Segmentation fault": "SIGSEGV", "Floating point exception": "SIGFPE", "Aborted": "SIGABRT",
            "Bus error": "SIGBUS", "Illegal instruction": "SIGILL"}
_OOM_HOW = "confirm with `dmesg -T | grep -i oom` or `journalctl -k | grep -i oom` on that host"


def _alive(pid, first):
    """Is the process that wrote this log still running here (not a later process reusing its pid)?"""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().decode("ascii", "replace").rpartition(")")[2].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        if fields[0] in ("Z", "X"):
            return False
        started = btime + int(fields[19]) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    # A reused pid started after the log's first line; ours started (a little) before it.
    return started <= first + 2.0


def _main_thread(threads):
    return next((t for t in threads if t.main), threads[0] if threads else None)


def _thread_dict(t):
    state = next((n for n in t.notes if n.startswith(("blocked:", "busy:"))), None)
    phase = next((n[len("phase: "):] for n in t.notes if n.startswith("phase: ")), None)
    return {"name": t.name, "main": t.main, "state": state, "phase": phase,
            "frame": frame_dict(user_frame(t.frames)), "call": call_name(t.frames),
            "frames": [frame_dict(f) for f in t.frames], "notes": list(t.notes)}


def _memory(p):
    """What the `mem:` breadcrumbs say about an OOM kill, or None when there are none."""
    if not p.mem:
        return None
    counts = [int(m.group(1)) for m in (re.search(r"oom_kill (\d+)", t) for t in p.mem) if m]
    share = re.search(r"\((\d+)%\)", p.mem[-1])
    return {"first": p.mem[0], "last": p.mem[-1],
            "oom_kill_rose": "up from" in p.mem[-1] or (len(counts) == 2 and counts[1] > counts[0]),
            "near_limit": bool(share and int(share.group(1)) >= 90)}


def _process(p, now, here):
    """One process as the --json schema says: what it is, how it ended (or stands), and where."""
    d = {"host": p.host, "pid": p.pid, "ppid": p.ppid, "tag": p.tag, "rank": p.rank, "command": p.argv,
         "files": [os.path.basename(f) for f in p.files], "start": p.first, "last_seen": p.last,
         "end": None, "state": None, "status": p.exit_status, "summary": "", "where": None, "phase": None,
         "stall": None, "crash": None, "exception": None, "memory": _memory(p), "warnings": list(p.warnings),
         "phases": [{"name": e.name, "begin": e.begin, "end": e.end, "outcome": e.outcome} for e in p.phases + p.open],
         "children": [], "earlylog": p.version}
    if p.open:
        d["phase"] = p.open[-1].name
    if p.exception is not None:
        d["exception"] = {"text": p.exception.text, "frame": frame_dict(user_frame(p.exception.frames))}
    stalled_at_end = p.stall is not None and p.stall["over"] is None and \
        (p.activity is None or p.stall["time"] is None or p.stall["time"] >= p.activity)
    if stalled_at_end:
        main = _main_thread(p.stall["threads"])
        d["stall"] = {"since": p.activity, "text": p.stall["text"], "threads": [_thread_dict(t) for t in p.stall["threads"]],
                      "main": _thread_dict(main) if main else None}
        d["where"] = frame_dict(user_frame(main.frames)) if main else None
    # Local: this host's /proc can say whether it still runs. Without a readable time a reused
    # pid cannot be told apart, so liveness then stays unknown.
    local = (p.host is None or p.host == here) and p.first is not None
    if p.crash is not None:
        _crashed(d, p)
    elif p.exit_status is not None:
        _exited(d, p)
    elif p.signal is not None:
        _signalled(d, p)
    elif local and _alive(p.pid, p.first):
        d["state"] = "stalled" if stalled_at_end else "running"
    elif local:
        d["state"], d["end"] = "vanished", p.last
        d["summary"] = "vanished: no exit record and no longer running, last sign of life %s after start" % (
            _span(p.first, p.last))
    else:
        d["state"] = "stalled" if stalled_at_end else "unknown"
        if not stalled_at_end:
            d["summary"] = "no exit record, and whether it still runs cannot be checked here (%s)" % (
                "no readable time in its lines" if p.first is None else "it ran on host %s" % p.host)
    if stalled_at_end:
        _stall_summary(d, p, now, local)
    elif d["state"] == "running":
        d["summary"] = "running, last sign of life %s ago" % secs(now - (p.last or now))
    return d


def _crashed(d, p):
    main = _main_thread(p.crash["threads"])
    signal = _CRASHES.get(p.crash["what"])
    d["crash"] = {"what": p.crash["what"], "signal": signal,
                  "threads": [_thread_dict(t) for t in p.crash["threads"]]}
    d["where"] = frame_dict(user_frame(main.frames)) if main else None
    d["state"], d["end"] = "crashed", p.last
    d["summary"] = "crashed: %s%s in %s" % (p.crash["what"], " (%s)" % signal if signal else "",
                                             where(user_frame(main.frames) if main else None))


def _exited(d, p):
    d["end"] = p.exit_time
    d["state"] = "exited" if p.exit_status == 0 else "failed"
    d["summary"] = "exited with status %d after %s" % (p.exit_status, _span(p.first, p.exit_time))
    if p.exception is not None and p.exit_status != 0:
        d["where"] = d["exception"]["frame"]
        d["summary"] += ": %s in %s" % (p.exception.text, where(user_frame(p.exception.frames)))


def _signalled(d, p):
    d["state"], d["end"] = "killed", p.last
    main = _main_thread(p.signal.threads)
    d["where"] = frame_dict(user_frame(main.frames)) if main else None
    d["summary"] = "%s in %s and ended" % (p.signal.text, where(frame_tuple(d["where"])))


def _stall_summary(d, p, now, local):
    """`stalled for 41 s in load at train.py:12 (phase X); blocked: ...`, as the summary of a
    process still stalled, or appended to how it ended."""
    upto = now if d["state"] == "stalled" and local else p.last
    silent = (upto or now) - (p.activity or p.first or now)
    d["stall"]["seconds"] = round(silent, 1)
    main = d["stall"]["main"]
    text = "stalled for %s in %s" % (secs(silent), where(frame_tuple(d["where"])) if main
                                     else "an unknown place (no stack was written)")
    if d["phase"]:
        text += " (phase %s)" % d["phase"]
    if main and main["state"]:
        text += "; " + main["state"]
    d["summary"] = text if d["state"] in ("stalled", "running") else d["summary"] + "; it had " + text


def _span(a, b):
    return secs(b - a) if a is not None and b is not None else "an unknown time"


def judge(folder, now=None):
    """The whole report as plain data (the --json schema, documented in docs/json-schema.md)."""
    now = time.time() if now is None else now
    here = identity.safe_name(os.uname().nodename)
    procs = sorted(folder.procs.values(), key=lambda p: (p.first or 0, p.pid))
    out = [_process(p, now, here) for p in procs]
    by_key = {(d["host"], d["pid"]): d for d in out}
    for d in out:
        parent = by_key.get((d["host"], d["ppid"]))
        if parent is not None and parent is not d:
            parent["children"].append(d["pid"])
            if d["state"] in ("killed", "vanished") and parent["state"] == "exited" and \
                    (parent["end"] or 0) >= (d["end"] or 0):
                # multiprocessing.Pool.__exit__ terminates its workers with SIGTERM, one still starting
                # before our SIGTERM stack is armed leaves no trace at all: no trouble either way.
                d["summary"] = "%s, then its parent exited with status 0 (as multiprocessing pools stop " \
                               "their workers)" % ("ended by SIGTERM" if d["state"] == "killed" else
                                                   "ended with no exit record")
                d["state"] = "terminated"
    counts = {"processes": len(out)}
    for d in out:
        counts[d["state"]] = counts.get(d["state"], 0) + 1
    report = {"schema": SCHEMA, "earlylog": __version__, "folder": os.path.abspath(folder.path),
              "generated": round(now, 3), "hosts": sorted({d["host"] or "?" for d in out}),
              "counts": counts, "verdict": [], "problems": list(folder.problems), "processes": out}
    report["causes"] = [c.as_dict() for c in _causes(report, folder)]
    report["verdict"] = _verdict(out, by_key, report["causes"])
    return report


def _causes(report, folder):
    """Every cause the evidence shows, thread-level first; one failing step costs only its own."""
    found = []
    for module in (thread_causes, process_causes):
        try:
            found.extend(module.find(report, folder))
        except Exception as exc:  # input nobody foresaw: say so, keep the rest of the report
            report["problems"].append("earlylog could not work out the %s causes (%r)"
                                      % (module.__name__.rpartition(".")[2].replace("_causes", ""), exc))
    return found


def _verdict(out, by_key, causes):
    """The short story, most important first: a headline, the causes with their next steps, then
    one line per process in trouble that no cause explains."""
    if not out:
        return ["no earlylog process logs here"]
    troubled = [d for d in out if d["state"] in TROUBLE]
    lines = [_headline(out, troubled)]
    lines += ["%s; next: %s" % (c["text"], c["next"]) if c["next"] else c["text"] for c in causes]
    explained, stragglers = set(), set()
    # A run stopped as a whole is one cause, not one "likely SIGKILL" guess per process.
    stopped = {pid for c in causes if c["kind"] == "run-stopped" for pid in c["pids"]}
    lines += _ranks(out, explained, stragglers)
    told = {frozenset(c["pids"][:2]) for c in causes if len(c["pids"]) > 1}  # parent and child, already told
    lines += _parents(out, by_key, explained, stragglers, told)
    for d in troubled:
        if id(d) not in explained:
            lines.append("%s %s" % (label(d), d["summary"]))
            explained.add(id(d))
        if d["state"] == "vanished" and d["pid"] not in stopped:
            lines.append(_vanished_cause(d, out))
    lines += ["warning in %s: %s" % (label(d), w) for d in troubled for w in d["warnings"][:2]][:3]
    return lines


def _headline(out, troubled):
    n = len(out)
    if not troubled:
        states = {}
        for d in out:
            states[d["state"]] = states.get(d["state"], 0) + 1
        return "%d process%s, none in trouble: %s" % (n, "es" if n != 1 else "", ", ".join(
            "%d %s" % (c, s) for s, c in sorted(states.items())))
    words = {"stalled": "stuck", "crashed": "crashed", "killed": "killed by a signal", "vanished": "vanished",
             "failed": "failed (non-zero exit)"}
    parts = []
    for state in TROUBLE:
        k = sum(1 for d in troubled if d["state"] == state)
        if k:
            parts.append("%d %s" % (k, words[state]))
    return "%d of %d process%s in trouble: %s" % (len(troubled), n, "es" if n != 1 else "", ", ".join(parts))


def _ranks(out, explained, stragglers):
    """Ranks side by side: the one(s) elsewhere, and the ones waiting in a collective for them."""
    ranks = {}
    for d in out:
        if d["tag"] and d["tag"].startswith("rank") and d["rank"] is not None:
            ranks[d["rank"]] = d  # a restarted rank: the newest process wins
    stuck = [d for d in ranks.values() if d["stall"] is not None]
    if len(ranks) < 2 or not stuck:
        return []
    waiting, late = {}, []
    for r in sorted(ranks):
        d = ranks[r]
        main = d["stall"]["main"] if d["stall"] else None
        if main and (any("torch/distributed" in f["file"] for f in main["frames"]) or
                     (main["phase"] or "").find("waiting for peers") >= 0):
            waiting.setdefault(main["call"] or "a collective", []).append(r)
        elif d["state"] in TROUBLE:
            late.append(d)
    parts = []
    for d in late:
        explained.add(id(d))
        stragglers.add(id(d))
        if d["stall"] is not None and d["state"] == "stalled":
            parts.append("rank %d is in %s" % (d["rank"], where(frame_tuple(d["where"]))))
        else:
            parts.append("rank %d %s" % (d["rank"], d["summary"]))
    for call, rs in sorted(waiting.items()):
        for r in rs:
            explained.add(id(ranks[r]))
        parts.append("%s %s %s in %s" % ("rank" if len(rs) == 1 else "ranks", ", ".join(map(str, rs)),
                                         "waits" if len(rs) == 1 else "wait", call))
    if not late and waiting:
        missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
        parts.append("no rank is elsewhere: %s" % (
            "rank%s %s never started (no log)" % ("" if len(missing) == 1 else "s", ", ".join(map(str, missing)))
            if missing else "check that every rank reached the same collective, and the network "
            "(MASTER_ADDR, MASTER_PORT, firewalls)"))
    return ["; ".join(parts)] if parts else []


def _parents(out, by_key, explained, stragglers, told):
    """A stalled parent whose child is in trouble waits for that child: say so, name the child,
    unless a cause already tells that pair."""
    lines = []
    for d in out:
        if d["state"] != "stalled":
            continue
        kids = [by_key[(d["host"], pid)] for pid in d["children"] if (d["host"], pid) in by_key]
        bad = sorted((k for k in kids if k["state"] in TROUBLE), key=lambda k: id(k) not in stragglers)
        if not bad:
            continue
        explained.add(id(d))
        bad = [k for k in bad if frozenset((d["pid"], k["pid"])) not in told]
        if not bad:
            continue
        call = d["stall"]["main"]["call"] if d["stall"]["main"] else None
        kid = bad[0]
        what = ("stalled in %s" % where(frame_tuple(kid["where"]))) if kid["state"] == "stalled" else kid["summary"]
        lines.append("pid %d (%s) waits%s for child %d (%s), which is %s" % (
            d["pid"], d["tag"], " in " + call if call else "", kid["pid"], kid["tag"], what)
            + ("" if len(bad) == 1 else " (and %d more in trouble)" % (len(bad) - 1)))
    return lines


def _vanished_cause(d, out):
    mem = d["memory"] or {}
    rose = mem.get("oom_kill_rose") or any((o["memory"] or {}).get("oom_kill_rose") for o in out)
    if rose or mem.get("near_limit"):
        why = "the cgroup's oom_kill count rose" if rose else "memory was at %s" % mem["last"]
        return "likely cause for %s: the kernel's OOM killer (%s); %s" % (label(d), why, _OOM_HOW)
    return ("likely cause for %s: killed by SIGKILL (kill -9, a job scheduler or the OOM killer; its last "
            "memory breadcrumbs show no pressure); %s" % (label(d), _OOM_HOW))
