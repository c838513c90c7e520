"""Judges a read folder: each process's state (running, idle, stalled, exited, crashed, killed,
terminated, vanished, unknown) and the cross-process story (straggler rank, parent waiting on a
child, likely cause), each host's processes by what can be known from this one.
It fills the judged model (read/model.py: a Report of Process records; judge() gives its --json
form). It only looks (its own /proc reads included); it never prints or writes."""
import os
import re
import time

from earlylog import __version__
from earlylog.grammar import stalls
from earlylog.read import async_causes, greenlets, idle, known, rank_causes, registry
from earlylog.read.causes import busy, first_line, label, rank as rank_of, secs
from earlylog.read.frames import (awaited_words, call_name, in_event_loop, library,
                                  task_chains, user_frame, where)
from earlylog.read.model import Memory, PeerWaits, Process, Raised, Report, Retrying, StallRecord, WaitedBy
from earlylog.grammar import notes, records

SCHEMA = 1
TROUBLE = ("stalled", "crashed", "killed", "vanished", "failed")
ALIKE = 3  # processes of one parent that ended the same way are told in one verdict line
DUMPING = 2.0  # seconds a stall line's dump may take to follow it
_STOPPED = ("T", "t")  # kernel states of a process held stopped: by a signal, by a tracer
_OOM_HOW = "confirm with `dmesg -T | grep -i oom` or `journalctl -k | grep -i oom` on that host"


def _alive(pid, first):
    """The kernel's state letter (`S`, `R`, `T`...) of the process that wrote this log, if it still
    runs here; None when it is gone, or its pid now belongs to a later process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().decode("ascii", "replace").rpartition(")")[2].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        if fields[0] in ("Z", "X"):
            return None
        started = btime + int(fields[19]) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    # A reused pid started after the log's first line; ours started (a little) before it.
    return fields[0] if started <= first + 2.0 else None


def _main_thread(threads):
    return next((t for t in threads if t.main), threads[0] if threads else None)


def _stuck_thread(stall):
    """The thread a stall line names as the one that made no progress, else the main thread."""
    named = next((t for t in stall.threads if stall.stuck is not None and t.name == stall.stuck), None)
    return named or _main_thread(stall.threads)


def _memory(p):
    """What the `mem:` breadcrumbs say about an OOM kill, or None when there are none."""
    if not p.mem:
        return None
    counts = [c for c in (records.parse_mem(t)[0] for t in p.mem) if c is not None]
    _count, share, rose = records.parse_mem(p.mem[-1])
    return Memory(first=p.mem[0], last=p.mem[-1], oom_kill_rose=rose or (len(counts) == 2 and counts[1] > counts[0]),
                  near_limit=share is not None and share >= 90)


def _process(p, now, here):
    """One process as the --json schema says: what it is, how it ended (or stands), and where."""
    d = Process(host=p.host, pid=p.pid, ppid=p.ppid, grandparent=p.grandparent, tag=p.tag, title=p.title, rank=p.rank,
                local_rank=p.place.get("local_rank"), node_rank=p.place.get("node_rank"),
                world_size=p.place.get("world_size"), restart=p.place.get("restart"), job=p.place.get("job"),
                command=p.argv, checked_here=False, still_starting=p.starting,
                files=[os.path.basename(f) for f in p.files], start=p.first, last_seen=p.last, status=p.exit.status,
                summary="", memory=_memory(p), warnings=list(p.warnings), phases=p.phases + p.open, children=[],
                earlylog=p.version, exit_call=p.exit.call,
                peer_waits=PeerWaits(count=p.peer_waits[0], longest=round(p.peer_waits[1], 1),
                                     collective=p.peer_waits[2]) if p.peer_waits else None,
                output_left_out={"lines": p.left_out[0], "mib": p.left_out[1]} if p.left_out else None)
    if p.open:
        d.phase = p.open[-1].name
    raised = _raised(p)
    if raised is not None:
        d.exception = Raised(text=raised.text, frame=user_frame(raised.frames), printed=raised is not p.exception)
    # A stall told while other threads printed (a thread that made no progress, no training step)
    # is not ended by their output: only by its `over` line.
    stalled_at_end = p.stall is not None and p.stall.over is None and p.exec is None and \
        (p.stall.noisy or p.activity is None or p.stall.time is None or p.stall.time >= p.activity)
    if stalled_at_end and p.stall.time is not None and (p.dumped_at or 0) < p.stall.time and \
            not p.stall.threads and now - p.stall.time < DUMPING:
        # Read between a first stall line and its dump, which comes a moment after: nothing to judge
        # by yet (a report would say "stalled in an unknown place" of a server's idle wait).
        stalled_at_end = False
    cut = not stalled_at_end and p.stall is not None and p.stall.over is None and p.exec is None and _cut_short(p)
    if stalled_at_end or cut:
        stalled_at_end = True
        main = _stuck_thread(p.stall)
        d.stall = StallRecord(since=p.exit.before if cut else p.activity, text=p.stall.text, threads=p.stall.threads,
                              main=main)
        d.where = user_frame(main.frames) if main else None
    # Local: this host's /proc can say whether it still runs. Without a readable time a reused
    # pid cannot be told apart, so liveness then stays unknown.
    local = d.checked_here = (p.host is None or p.host == here) and p.first is not None
    ended = p.crash is not None or p.exit.status is not None or p.signal is not None
    letter = d.kernel_state = _alive(p.pid, p.first) if local and not ended else None  # running here
    if p.crash is not None:
        _crashed(d, p)
    elif p.exit.status is not None:
        _exited(d, p)
    elif p.signal is not None:
        _signalled(d, p)
    elif p.exec is not None:
        _replaced(d, p, letter, now)
    elif letter:
        d.state = "stalled" if stalled_at_end else "running"
    elif local and p.unrecorded:
        d.state = "unknown"
        d.summary = "no longer running; how it ended was not recorded: earlylog's own %s (its output says " \
                    "how it ended)" % p.unrecorded
    elif local:
        d.state, d.end = "vanished", p.last
        d.summary = "vanished: no exit record and no longer running, last sign of life %s after start" % (
            _span(p.first, p.last))
    else:
        d.state = "stalled" if stalled_at_end else "unknown"
        if not stalled_at_end:
            d.summary = "no exit record, and whether it still runs cannot be checked here (%s)" % (
                "no readable time in its lines" if p.first is None else "it ran on host %s" % p.host)
    if stalled_at_end:
        _idle(d, p)
        _stall_summary(d, p, now, local)
        if cut and _stuck(d):
            d.state = "stalled"
            d.summary = "%s until %s ended the process (%s): a hang cut short, the call never returned" % (
                d.stall.summary, "a stop request raised inside that call" if cut == _INSIDE else
                "%s own code around that call" % ("Ray's" if _ray(d) else "the library's"), _exit_call(p.exit))
    elif d.state == "running" and p.exec is None:
        d.summary = "running, last sign of life %s ago" % secs(now - (p.last or now))
    if d.state in ("running", "stalled", "idle", "busy") and letter in _STOPPED:
        _stopped(d, p, now, letter)
    if not local:
        _elsewhere(d, p, now)
    return d


def _replaced(d, p, letter, now):
    """os.exec* replaced the program with one that writes nothing here (a shell, a binary, a Python
    without earlylog): no trouble of its own; what the pid runs now, or that its end is unknown."""
    call, words = p.exec
    if letter:
        d.state = "running"
        d.summary = "runs `%s` since %s replaced the program; that one writes no log here, last sign of life " \
                    "%s ago" % (words, call, secs(now - (p.last or now)))
    else:
        d.state, d.end = "unknown", p.last
        d.summary = "replaced itself with `%s` (%s) after %s; how that program ended is not recorded here: " \
                    "its status is what its launcher saw" % (words, call, _span(p.first, p.last))


def _stopped(d, p, now, letter):
    """A process the kernel holds stopped writes nothing, its watchdog included, so no stall dump
    says so: a SIGSTOP, Ctrl-Z, a background job that read from or wrote to its terminal, or a
    debugger. It is stuck until someone resumes it."""
    d.state, d.idle = "stalled", None
    how = "by a debugger or tracer (kernel state t): detach it" if letter == "t" else \
        "by a signal (kernel state T: SIGSTOP, Ctrl-Z, or a background job that read from or wrote to its " \
        "terminal): `kill -CONT %d` resumes it, `fg` in the shell that started it" % d.pid
    d.summary = "stopped %s; last sign of life %s ago" % (how, secs(now - (p.last or now))) + (
        "; it had %s" % d.stall.summary if d.stall else "")


def _idle(d, p):
    """A stall whose threads all wait for work (an event loop, serve_forever, a pool's queue, a
    sleep loop), or whose worker pool titles it idle (`ray::IDLE`), is idleness, not a hang: state
    `idle`, and the reason (see idle.py)."""
    # A thread the watchdog saw make no progress on a partner, or no training step, is no idleness.
    d.idle = None if p.stall.noisy else (
        idle.reason(p.stall.threads) or idle.by_title(p.title) or idle.at_terminal([p.stall.text]))
    if d.idle and async_causes.orphaned(p):
        d.idle = None  # a task died, and the others wait for what it would have produced
    if d.idle and d.state == "stalled":
        d.state = "idle"
    elif d.state == "stalled" and busy(p.stall.text):
        d.state = "busy"  # its CPU time still rose: computing (docs/design.md#busy-is-not-stuck)


SUPERVISING = "supervising: "


def _supervisors(report):
    """A process a fork-lock cause names spinning (busy) is stalled. A launcher whose main thread waits for its living children, which say in their own logs
    whether they are stuck (torchrun's agent, torch.multiprocessing's join, a Pool's parent, a
    subprocess that logs), supervises: idle, never stalled for that wait, unless a cause names it (a
    pipe it never reads, a child it joins before reading what the child sends). Judged after the
    causes, which look at it as the stalled process its log shows."""
    named = {pid for c in report.causes for pid in c.pids}
    for c in report.causes:
        # A child spinning in a fork-copied native pool burns a core and does nothing: stuck, not busy.
        d = next((d for d in report.processes if d.pid == c.pids[0]), None) if c.kind == "fork-lock" else None
        if d is not None and d.state == "busy":
            d.state = "stalled"
            d.stall.summary = d.summary = d.summary.replace("busy for", "stalled (spinning) for", 1)
    for d in report.processes:
        line = stalls.parse(d.stall.text) if d.state == "stalled" and d.stall is not None else None
        if line is None or line.state != stalls.CHILDREN or d.pid in named:
            continue
        d.idle = SUPERVISING + line.words
        d.state = "idle"
        d.stall.summary = d.summary = "idle for %s: %s, in %s" % (secs(d.stall.seconds), d.idle, where(d.stall.main.frame)
                                                                   if d.stall.main else "an unknown place")


def _elsewhere(d, p, now):
    """A process on another host is judged by its lines alone: say how old the newest one is."""
    if d.state in ("stalled", "idle", "busy", "unknown") and p.last is not None:
        d.summary += "; its last line is %s old" % secs(max(0.0, now - p.last))


def _crashed(d, p):
    main = _main_thread(p.crash.threads)
    signal = p.crash.signal
    d.crash = p.crash
    d.where = user_frame(main.frames) if main else None
    d.state, d.end = "crashed", p.last
    what = "%s%s" % (p.crash.what, " (%s)" % signal if signal else "")
    if p.crash.after_exit and d.where is None:
        # After its exit record, with no Python frame left: the program's code had ended (status N
        # recorded), and the crash came from native code while the interpreter shut down (a library's
        # thread still at work at exit: gloo's worker freeing a tensor aborts with C++'s "terminate
        # called without an active exception" on stderr). Its parent sees the signal, not the status.
        d.summary = "crashed during its shutdown, after its program ended with status %d: %s in no Python " \
                    "code (a native library's thread, or its clean-up at exit; its stderr may name it)" % (
                        p.exit.status, what)
        return
    d.summary = "crashed: %s in %s" % (what, where(d.where))


def _exited(d, p):
    d.end = p.exit.time
    d.state = "exited" if p.exit.status == 0 else "failed"
    d.summary = "exited with status %d after %s" % (p.exit.status, _span(p.first, p.exit.time))
    if p.exit.flush is not None:
        _flush_failed(d, p)
    elif p.exit.by is not None and p.exit.call and p.exit.call.startswith("os._exit(") and _os_exit(d, p):
        d.summary += ": " + d.exit_note
    elif d.exception is not None and p.exit.status != 0:
        d.where = d.exception.frame
        d.summary += ": %s in %s" % (first_line(d.exception.text), where(d.where))
    elif p.exit.status != 0 and p.exit.call:
        d.summary += ": " + p.exit.call  # sys.exit(3) in load_config at cfg.py:5
    elif _lost_work(d):
        d.summary += ", but %s in %s" % (first_line(d.exception.text), where(d.exception.frame))
    elif p.exit.daemons and p.exit.status == 0:
        d.exit_note = "ended with daemon %s still at work (%s): Python stops daemon threads at exit without a " \
                      "word, wherever they are" % ("threads" if "," in p.exit.daemons else "thread", p.exit.daemons)
        d.exit_next = "if that work must finish (a checkpoint, an upload, a flush), join the thread before the " \
                      "program ends, or make it a non-daemon thread"
        d.summary += ": " + d.exit_note
    if p.signal is not None and p.signal.after_exit:
        # Its exit record is written before the interpreter shuts down; a supervisor's SIGTERM (torchrun
        # stopping the other ranks) can still end it there, and the status its parent sees is -15.
        d.summary += "; then it %s during its shutdown (its parent sees -15)" % p.signal.text


def _cut_short(p):
    """A hang cut short: the program's call stalled until the process ended (nothing but the exit
    record after the stall), and the clean exit came from a library frame that the stuck call was
    running inside (Ray's worker loop exits with sys.exit(0) when its driver gives up or shuts
    down, leaving a task's function that never returned), or was raised in the stuck call itself
    (a framework's stop request from its signal handler, as Ray's worker gets too: the SystemExit
    left the call at the line it was stuck on, through its `finally` blocks). The program's own exit
    after a slow call (from its own code, elsewhere) is no such story: its call returned."""
    at = p.exit.at
    if at is None or p.exit.status != 0 or p.stall.time is None or (p.exit.before or 0) > p.stall.time:
        return False
    frames = _stuck_thread(p.stall).frames if p.stall.threads else []
    user = next((i for i, f in enumerate(frames) if not library(f.file)), None)
    if user is None:
        return False
    for i, (path, line, func) in enumerate(frames[:user + 1]):
        if func == at.function and os.path.basename(path) == at.file and line == at.line:
            # A frame that called an exit itself (not a SystemExit raised into it) after the stall,
            # while the stall saw it waiting in a call below it: that call had returned. A console
            # script's `sys.exit(main())` ends so once main() returns (a launcher ending its job).
            if i > 0 and not (p.exit.call or "").startswith("raise "):
                return False
            return _INSIDE
    return any(func == at.function and os.path.basename(path) == at.file and library(path)
               for path, _line, func in frames[user + 1:])


_INSIDE = "inside"  # _cut_short's answer for an exit raised in the stuck call itself


def _exit_call(e):
    """The exit call without the program's frame that led to it: `sys.exit(0) in main_loop at worker.py:1070`."""
    return e.call.rpartition(", from ")[0] if e.outer is not None else e.call


def _ray(d):
    return (d.title or "").startswith("ray::") or "/ray/" in (d.command or "")


def _os_exit(d, p):
    """os._exit called by the program's own code, or from a thread other than the main one: the
    process ended at once, and nothing it had left to do ran."""
    by, main_at = p.exit.by, p.exit.main_at
    skipped = "without running finally blocks or atexit callbacks or flushing buffered output"
    if by == "the main thread" and p.forked:
        return  # a child made by os.fork() ends so on purpose: its parent's atexit and buffers are not its own
    if by == "the main thread":
        d.exit_note = "ended by %s: os._exit ends the process at once, %s" % (p.exit.call, skipped)
        d.exit_next = "use sys.exit() unless skipping that clean-up is meant"
        return True
    d.exit_note = "ended by %s, called from %s%s: os._exit ends the whole process from any thread, at once, " \
                  "%s, so the main thread's work stopped there" % (
                      p.exit.call, by, " while the main thread was in " + where(main_at) if main_at else "", skipped)
    d.exit_next = "if that thread meant to end only itself, return from its function (or raise); to end the " \
                  "program, tell the main thread (a threading.Event it checks) and let it exit with sys.exit()"
    return True


def _flush_failed(d, p):
    """Status 120: the program ended, then the interpreter's last flush of its output failed."""
    stream, error, gone = p.exit.flush
    d.summary += ": the program ended, then flushing its %s at exit failed with %s" % (stream, error)
    if gone:
        d.summary += ": the reader of its output went away (`| head`, a closed terminal or GUI) before it " \
                     "had read everything"
        d.exit_next = known.next_step("BrokenPipeError") + "; to end quietly when the reader goes, " \
            "`signal.signal(signal.SIGPIPE, signal.SIG_DFL)` at start"
    last = p.stdout if stream == "stdout" else p.output
    if last is not None:
        d.summary += "; the last line it printed, at %s, was %r" % (
            time.strftime("%H:%M:%S", time.localtime(last[0])) if last[0] else "an unknown time", last[1][:100])


# An error that ended a part of a process that exits 0 all the same: the work of a thread that
# died, or what an atexit callback was to save, is lost without a word in the exit status.
# sys.exit() in a thread ends that thread alone, on purpose as a rule: only a wait for its work says otherwise.
_ATEXIT_FAILED = records.UNRAISABLE + "Exception ignored in atexit callback"  # Python's words after ours


def _lost_work(d):
    if d.exception is None:
        return False
    text = d.exception.text
    died = records.parse_in_thread(text)
    return died[1].partition(":")[0] != "SystemExit" if died else text.startswith(_ATEXIT_FAILED)


def _raised(p):
    """The exception that ended the process: our `exception:` record, else, for one that exited
    with an error, the last traceback it printed on stderr (multiprocessing's children do so)."""
    if p.exception is not None or p.exit.status in (None, 0):
        return p.exception
    return p.printed


def _signalled(d, p):
    d.state, d.end = "killed", p.last
    main = _main_thread(p.signal.threads)
    d.where = user_frame(main.frames) if main else None
    d.summary = "%s in %s and ended" % (p.signal.text, where(d.where))


def _stall_summary(d, p, now, local):
    """`stalled for 41 s in load at train.py:12 (phase X); blocked: ...`, as the summary of a
    process still stalled, or appended to how it ended."""
    upto = now if d.state in ("stalled", "idle", "busy") and local else p.last
    silent = (upto or now) - (p.stall.since or d.stall.since or p.first or now)
    d.stall.seconds = round(silent, 1)
    main = d.stall.main  # the thread the stall names as stuck, else the main thread
    # Its place, not d.where: of a process a signal ended, that is where the main thread was then.
    place = where(main.frame) if main else "an unknown place (no stack was written)"
    awaited = None if d.idle or not main else _awaited(_stuck_thread(p.stall), p.stall.task, p.stall.greenlet)
    if awaited is not None:
        frame, waits = awaited
        place = "%s (%s)" % (where(frame), waits)
        if d.state == "stalled":
            d.where = frame
    if d.idle:
        text = "idle for %s: %s, in %s" % (secs(silent), d.idle, place)
    else:
        # Computing, as the watchdog saw CPU time rise, whatever ended it since (a timeout's SIGTERM).
        word = "busy" if d.state == "busy" or busy(p.stall.text) else "stalled"
        text = "%s for %s in %s" % (word, secs(silent), place)
        if p.stall.steps:  # `stalled: no training step for 41 s (steps came every ~0.2 s before; last step 5), in ...`
            text = "%s: no training step for %s (%s), in %s" % (word, secs(silent), p.stall.steps, place)
        elif p.stall.task:
            text += ", while its event loop ran on (task %s made no progress)" % p.stall.task
        elif p.stall.greenlet:  # named in the place's words where the dump listed it
            text += ", while its hub ran the other greenlets" + (
                "" if awaited else " (greenlet %s made no progress)" % p.stall.greenlet)
        elif p.stall.noisy:
            text += ", while other threads kept printing (thread %s made no progress)" % main.name
        if d.phase:
            text += " (phase %s)" % d.phase
        if main and main.collective:  # the futex it blocks on is the collective's: name that one
            text += "; " + stalls.waiting_for_peers(main.collective.where, main.collective.peer)
        elif main and main.state and not p.stall.task and not p.stall.greenlet:  # a loop's thread says nothing of its task
            text += "; " + main.state
        if word == "busy" and main and not main.busy:
            # The main thread waits (a join, a queue) for a thread that computes: name that one.
            worker = next((t for t in d.stall.threads if t.busy), None)
            if worker is not None:
                text += "; thread %s %s in %s" % (worker.name, worker.state.partition(": ")[2],
                                                  where(worker.frame))
    d.stall.summary = text
    d.summary = text if d.state in ("stalled", "running", "idle", "busy") else \
        d.summary + "; it had " + ("been " if d.idle or text.startswith("busy") else "") + text


def _awaited(main, task=None, greenlet=None):
    """A main thread parked in its asyncio event loop waits where its tasks wait: (the frame of the
    user's code in the tasks that wait for something other than tasks, the most of them in one
    place, or in the task the stall names (`Task-1 (main)`), and `2 asyncio tasks await a Future
    there`), else None. A gevent or eventlet hub's thread waits where its greenlets wait, the one
    the stall names (`greenlet`) first."""
    if greenlets.in_hub(main.frames):  # the same for gevent's hub and its greenlets
        return greenlets.awaited(main, greenlet)
    if not in_event_loop(main.frames):
        return None
    named = task.partition(" (")[0] if task else None
    leaves = [(user_frame(frames), what) for name, frames, what in task_chains(main.notes)
              if frames and not library(user_frame(frames).file) and named in (None, name)
              and not (what or "").startswith(("task ", "gather of "))]
    if not leaves:
        return None
    frame, what = max(leaves, key=leaves.count)
    n = leaves.count((frame, what))
    return frame, "%s await%s %s" % ("an asyncio task" if n == 1 else "%d asyncio tasks" % n,
                                     "s" if n == 1 else "", awaited_words(what, " there") or "something there")


def _span(a, b):
    return secs(b - a) if a is not None and b is not None else "an unknown time"


def judge(folder, now=None):
    """The whole report as plain data (the --json schema, documented in docs/json-schema.md)."""
    return judged(folder, now).json()


def judged(folder, now=None):
    """The whole report as a model.Report: each process judged, the causes found, the verdict told."""
    now = time.time() if now is None else now
    here = records.safe_name(os.uname().nodename)
    procs = sorted(folder.procs.values(), key=lambda p: (p.first or 0, p.pid))
    out = [_process(p, now, here) for p in procs]
    by_key = {(d.host, d.pid): d for d in out}
    for d in out:
        parent = by_key.get((d.host, d.ppid))
        if parent is not None and parent is not d:
            parent.children.append(d.pid)
    _rejudge(_Judged(out, by_key, procs, folder))
    report = Report(schema=SCHEMA, earlylog=__version__, folder=os.path.abspath(folder.path), generated=round(now, 3),
                    host=here, hosts=sorted({d.host or "?" for d in out}), verdict=[],
                    problems=list(folder.problems), processes=out)
    report.causes = registry.find(report, folder)
    _supervisors(report)
    report.counts = {"processes": len(out)}
    for d in out:
        report.counts[d.state] = report.counts.get(d.state, 0) + 1
    report.verdict = _verdict(out, by_key, report.causes)
    return report


class _Judged:
    """What the passes read: each process's record (oldest first), the records by (host, pid),
    the logs in the records' order, and the folder."""

    def __init__(self, out, by_key, procs, folder):
        self.out, self.by_key, self.procs, self.folder = out, by_key, procs, folder


# The passes that judge the states again once every process has one (the classifier, _process,
# judged each alone), in this order, each with the fields it may change. A pass yields changes,
# (record, {field: value}), and each is applied as it comes: the rest of the pass, and every pass
# after it, read the states as changed so far (a supervisor is judged before what it started).
PASSES = (
    ("killed by notice", lambda j: _killed_by_notice(j.out, j.folder.kills), ("state", "killed_by", "summary")),
    ("killed while waited", lambda j: _killed_while_waited(j.out, j.by_key, j.procs),
     ("waited_by", "state", "summary")),
    ("retrying", lambda j: (c for p, d in zip(j.procs, j.out) for c in _retrying(d, p)),
     ("retrying", "state", "idle", "summary")),
    ("stopped at the end", lambda j: _stopped_at_end(j.out, j.by_key), ("state", "summary")),
    ("straggler rank", lambda j: _waited_on(j.out), ("state", "idle", "summary")),
    ("waits on working children", lambda j: _waits_on_working_children(j.out, j.by_key), ("state", "idle", "summary")),
)


def _rejudge(judged):
    for _name, run, _fields in PASSES:
        for d, change in run(judged):
            d.update(change)


# What to do when a supervisor says it killed a process, by who killed it.
_KILL_NEXT = {"Ray's memory monitor": "the node ran low on memory: lower the task's memory use, or give it a "
                                      "`memory=` resource so Ray runs fewer such tasks at once"}
_LONG_ID = re.compile(r"\bID=[0-9a-fA-F]{8,}")


def _killed_by_notice(out, kills):
    """A process another one's output says was killed (Ray's driver gets an OutOfMemoryError naming
    the worker's pid): killed, and by whom, whatever else its own log shows. The pid is looked up on
    the host of the line that names it, else on the one host that has it."""
    for (host, pid), (who, line) in kills.items():
        found = [d for d in out if d.pid == pid]
        here = [d for d in found if d.host == host]
        d = here[0] if len(here) == 1 else found[0] if len(found) == 1 else None
        if d is None or d.state in ("exited", "crashed"):
            continue
        yield d, {"state": "killed", "killed_by": who, "summary": "killed by %s, as the output of a process on %s "
                  "says: %s%s" % (who, host or "its host", _without_ids(line.strip())[:300],
                                  "; next: " + _KILL_NEXT[who] if who in _KILL_NEXT else "")}


def _retrying(d, p):
    """A thread that keeps failing and sleeping between tries is retrying, not idle (runtime/audit.py):
    its last stall dump shows it sleeping while it handles an exception (with the connects it made),
    or, as a retry loop that logs each failure is never silent, the runtime's `retrying:` notes
    still came near the end of its log. A process that exited is past it."""
    found = None
    for t in d.stall.threads if d.stall else ():
        handling = notes.first(t.notes, notes.Handling)
        counted = notes.first(t.notes, notes.Retries)
        if handling and handling.words and (t.sleeping or counted):  # a sleep inside an `except` block: a pause between tries
            found = Retrying(thread=t.name, handling=handling.words, count=counted.count if counted else None,
                             seconds=counted.seconds if counted else None, frame=t.frame)
            break
    thread, newest = max(p.retrying.items(), key=lambda r: r[1].time or 0) if p.retrying else (None, None)
    dumped_since = p.stall is not None and p.stall.time is not None and newest is not None and \
        newest.time is not None and p.stall.time > newest.time  # a later dump shows no retry: over
    if found is None and newest is not None and newest.time is not None and p.last is not None and \
            not dumped_since and newest.time >= p.last - max(60.0, 2 * (p.stall_after or records.DEFAULT_STALL)):
        found = Retrying(thread=thread, **newest._asdict())
    if found is None or p.exit.status is not None or p.crash is not None:
        return
    words = notes.parse("handling: " + found.handling)  # a dump's note, or the `retrying:` line's words
    found.error, found.raised_in, found.address = words.error, words.raised, words.target
    if records.polling(found.error, found.address):
        return  # `except queue.Empty: time.sleep(1)`: a worker polling for work, idle
    yield d, {"retrying": found}
    what = "connecting to %s (%s)" % (found.address, found.error) if found.address else "with %s" % (
        found.error)
    if found.count:
        text = "retrying: %d failures %s seen in the last %s" % (found.count, what, secs(found.seconds))
    else:
        text = "retrying: sleeping between tries after a failure %s" % what
    text += " in " + (found.raised_in or where(found.frame))
    if d.state in ("idle", "running", "busy", "stalled"):
        yield d, {"state": "stalled", "idle": None, "summary": text}
    else:
        if d.idle:  # it was never idle: drop the stall's words for it
            yield d, {"idle": None, "summary": d.summary.partition("; it had been idle")[0]}
        yield d, {"summary": d.summary + "; it was " + text}


_BLOCKING_WAITS = ("blocked: waiting for a child process to exit", "blocked: waiting to read from")


def _killed_while_waited(out, by_key, procs):
    """A child that ended by a signal (SIGKILL leaves no exit record: vanished) while its parent's
    last stall dump showed a thread waiting for it (`child: pid N` under Popen.wait(), run(),
    join()): the parent's wait is where the loss shows, and the child was not let go by a
    supervisor. The child's state becomes `killed`, `waited_by` names the wait (a cause tells it)."""
    for p in procs:
        parent = by_key.get((p.host, p.pid))
        stall = p.stall
        # The parent must have outlived the child: a run killed whole ends both at once (run-stopped).
        if stall is None or parent is None or stall.resumed is None and \
                parent.state in ("vanished", "killed", "crashed", "unknown"):
            continue
        for t in stall.threads:
            # A wait with no time limit (the kernel's do_wait, a pipe read): one with a timeout polls
            # and sleeps, and its caller may kill the child itself when the time is up.
            if not any(n.startswith(_BLOCKING_WAITS) for n in t.notes):
                continue
            for pid, command in ((c.pid, c.command) for c in notes.every(t.notes, notes.Child) if c.state):
                d = by_key.get((p.host, pid))  # the note says it was alive at that dump
                if d is None or d.state not in ("vanished", "killed") or d.killed_by or d.waited_by:
                    continue
                frame = user_frame(t.frames)
                code = t.code.get(t.frames.index(frame)) if frame in t.frames else None
                # No exit record: SIGKILL, which nothing can catch; a `killed` one wrote SIGTERM's stacks.
                signal = "SIGKILL" if d.state == "vanished" else "SIGTERM"
                yield d, {"waited_by": WaitedBy(pid=p.pid, thread=t.name, frame=frame, code=code,
                                                call=call_name(t.frames), until=stall.resumed, command=command,
                                                signal=signal),
                          "state": "killed", "summary": "killed by %s while pid %d (%s) waited for it in %s" % (
                              signal, p.pid, parent.tag if parent else "?", where(frame))}


def _without_ids(text):
    """The words of a notice less its long hex ids: `(task name=f, pid=9, ...)` stays readable."""
    return re.sub(r"\(([^()]*)\)", lambda m: "(%s)" % ", ".join(
        part for part in m.group(1).split(", ") if not _LONG_ID.search(part)), text)


# How a program that catches SIGTERM reports it (Ray's dashboard exits with 15; shells use 128+15),
# and a shell's SIGKILL (128+9).
_STOP_STATUSES = (15, 143, 137)


def _stopped_at_end(out, by_key):
    """A process its supervisor stopped is not trouble of its own: it ended by SIGTERM, by SIGKILL
    (vanished) or with SIGTERM's exit status, and then the process that started it exited with
    status 0 (its parent, or its parent's parent when the parent does not log: Ray's raylet stands
    between the driver and its workers and agents). multiprocessing pools stop their workers so at
    exit, Ray its daemons and workers at shutdown. One stuck when it was stopped is the story of the
    run: it stays stalled, and says how it ended (a busy one was computing: stopped as the others);
    but not one stuck in a library's own code only when the run ended well (_library_only).
    One idle or still starting (its log shows only its start-up) when it was stopped while its
    supervisor lived on, with no sign of memory pressure, was let go by that supervisor trimming its
    pool of workers (Ray ends idle workers, and prestarted ones it does not need, so)."""
    for d in out:  # oldest first: a supervisor is judged before what it started
        if d.killed_by or d.waited_by:
            continue
        if not (d.state in ("killed", "vanished") or (d.state == "failed" and d.status in _STOP_STATUSES)):
            continue
        how = {"killed": "ended by SIGTERM", "vanished": "ended with no exit record (SIGKILL)"}.get(
            d.state, "exited with status %s (SIGTERM's)" % d.status)
        boss, whose = by_key.get((d.host, d.ppid)), "its parent"
        if boss is None and d.grandparent:
            boss, whose = by_key.get((d.host, d.grandparent)), "its parent's parent"
        if boss is not None and boss is not d and boss.state in ("exited", "terminated") and \
                (boss.end or 0) >= (d.end or 0):
            then = "%s, then %s %d (%s) %s" % (how, whose, boss.pid, boss.title or boss.tag,
                                               "exited with status 0" if boss.state == "exited" else
                                               "was stopped so too")
            if _stuck(d) and not (boss.state == "exited" and _library_only(d)):
                yield d, {"state": "stalled", "summary": "%s until it was stopped at the end of the run (%s)" % (
                    d.stall.summary, then)}
            else:
                yield d, {"state": "terminated", "summary": "stopped at the end of the run: " + then}
        elif boss is not None and boss is not d and boss.state == "failed" and d.state != "failed" and \
                (boss.end or 0) >= (d.last_seen or 0) and _ended_by_parent(d, boss):
            then = "%s as %s %d (%s) failed, which ends its workers" % (how, whose, boss.pid, boss.title or boss.tag)
            if _stuck(d):
                yield d, {"state": "stalled", "summary": "%s until it was stopped (%s)" % (d.stall.summary, then)}
            else:
                yield d, {"state": "terminated", "summary": "stopped with its parent: " + then}
        elif boss is not None and boss is not d and (boss.end is None or boss.end >= (d.end or 0)) and \
                d.state != "failed" and not _memory_pressure(d, out):
            waiting = d.idle or idle.by_title(d.title)
            # A worker that showed nothing but its start-up may have died at its first task; its
            # supervisor stuck waiting since says that it was not let go: a parent that waits (for
            # a queue, a pipe) may wait for what this child would have sent.
            if not _stuck(boss) and (waiting or d.still_starting and not _stuck(d)):
                yield d, {"state": "terminated",
                          "summary": "stopped while %s: %s while %s %d (%s) ran on, as a supervisor does when it lets "
                                     "a worker go" % ("idle (%s)" % waiting if waiting else "still starting", how,
                                                      whose, boss.pid, boss.title or boss.tag)}


# A parent's error that says a worker of its pool died: a worker of its that vanished is a suspect,
# not a worker it stopped.
_WORKER_DIED = re.compile(r"BrokenProcessPool|terminated abruptly|exited unexpectedly|is killed by signal|"
                          r"worker\b.* died", re.I)
_PIDS = re.compile(r"\bpid(?:\(s\))?:?\s+(\d+(?:, \d+)*)")  # "worker (pid 12)", "pid(s) 12, 13", "(pid: 12)"


def _ended_by_parent(d, boss):
    """A failing parent ends its workers as it exits: multiprocessing terminates its daemonic
    children (SIGTERM) and a DataLoader its workers, which leave silently on their parent's SIGTERM
    (torch's own handler), with no exit record. One that vanished while the parent's error says a
    worker died (naming its pid, or no pid at all) is that worker, not one the parent ended."""
    if rank_of(d)[0] is not None:
        return False  # a rank's end is the job's story: the straggler, the first failure (_ranks)
    if d.state == "killed":
        return True
    if d.state != "vanished" or _memory_pressure(d, [d]):
        return False
    error = boss.exception.text if boss.exception else ""
    named = {int(n) for found in _PIDS.findall(error) for n in re.findall(r"\d+", found)}
    return d.pid not in named if named else not _WORKER_DIED.search(error)


# A program's own handler of a stop signal (Ray's monitor: `_signal_handler`), by its name.
_SIGNAL_HANDLER = re.compile(r"sig(?:nal|term|int)?_?handler$|handle_?sig(?:nal|term|int)?$", re.I)


def _library_only(d):
    """Its stall's stuck thread ran no code of the program: a library's own daemon (Ray's log
    monitor waiting on its GCS as a cluster shuts down). Stopped at the end of a run that succeeded,
    that is no story of the run; a program's code stuck when it was stopped is one."""
    main = d.stall.main if d.stall else None
    return main is not None and bool(main.frames) and all(library(f.file) for f in main.frames)


def _stuck(d):
    """Stalled, neither idle nor computing (busy is not stuck: docs/design.md#busy-is-not-stuck),
    nor already stopping: a process caught in its own SIGTERM handler when its supervisor killed
    it was being stopped (Ray's monitor reports its end to a GCS already gone)."""
    main = d.stall.main if d.stall else None
    return _stuck_by(d.stall is not None, d.idle, main and main.state,
                     [f.function for f in main.frames] if main else [])


stuck = _stuck  # public: the watchdog's judge (cli/judge.py) acts only on what this calls stuck


def stuck_in_json(d):
    """_stuck for a process as --json has it, which the report page draws from (html.py)."""
    main = d["stall"] and d["stall"]["main"]
    return _stuck_by(d["stall"] is not None, d["idle"], main and main["state"],
                     [f["function"] for f in main["frames"]] if main else [])


def _stuck_by(stalled, idle_why, main_state, main_functions):
    return stalled and not idle_why and not (main_state or "").startswith("busy:") and \
        not any(_SIGNAL_HANDLER.search(f) for f in main_functions)


def _memory_pressure(d, out):
    return bool(d.memory and (d.memory.near_limit or d.memory.oom_kill_rose) or
                any(o.memory and o.memory.oom_kill_rose for o in out))


def _waited_on(out):
    """An idle or busy rank is the straggler when another rank waits for it in a collective: stuck
    after all, or holding the others up."""
    ranks = [d for d in out if rank_of(d)[0] is not None]  # not a rank's DataLoader worker (it inherits RANK)
    waiting = any(_in_collective(d) for d in ranks if d.state == "stalled")
    for d in ranks:
        if waiting and d.state == "idle":
            yield d, {"summary": "stalled for %s in %s (%s, while other ranks wait for it)" % (
                secs(d.stall.seconds), where(d.where), d.idle), "state": "stalled", "idle": None}
        elif waiting and d.state == "busy":
            yield d, {"state": "stalled", "summary": d.summary + " (while other ranks wait for it)"}


_WORKING = ("running", "busy", "idle")


def _waited_pid(note):
    """The pid a `child:` note names, or the first process holding the other end of a `reads:` pipe."""
    if type(note) is notes.Child and note.command is not None:
        return note.pid
    if type(note) is notes.Reads and note.other.startswith("other end held by pid "):
        return notes.holders(note.other)[0][0]
    return None


def _waits_on_working_children(out, by_key):
    """A stalled process whose every blocked thread waits for a child of its own that is working
    (running, busy, or idle itself): a launcher waiting for its script (accelerate copies the
    child's stderr in a thread), a parent joining a worker that prints: idle, not stuck. Children
    are judged first, so a launcher of a launcher follows."""
    for d in reversed(out):
        if d.state != "stalled" or d.stall is None:
            continue
        family = [by_key.get((d.host, pid)) for pid in d.children]
        if any(k is not None and k.state in TROUBLE for k in family):
            continue  # the pipe it reads may be that child's: a working child holding it too says nothing
        children = set(d.children)
        waited, others = [], False
        for t in d.stall.threads:
            pids = [_waited_pid(note) for note in map(notes.parse, t.notes)]
            pids = [pid for pid in pids if pid is not None]
            if pids and all(pid in children for pid in pids):
                waited += pids
            elif t.main or not all(library(f.file) for f in t.frames):
                others = True  # a thread of the program's that waits for something else
        kids = [by_key.get((d.host, pid)) for pid in waited]
        if waited and not others and all(k is not None and k.state in _WORKING for k in kids):
            k = kids[0]
            why = "waiting for its child %d (%s), which is %s" % (k.pid, k.tag, k.state)
            yield d, {"state": "idle", "idle": why,
                      "summary": "idle for %s: %s, in %s" % (secs(d.stall.seconds), why, where(d.where))}


def _in_collective(d):
    """Does a stalled rank wait in a collective: its dump's `collective:` note, else (a torch whose
    Flight Recorder is off) a torch.distributed frame or a phase waiting for peers."""
    main = d.stall.main if d.stall else None
    return rank_causes.waiting(d) is not None or bool(main) and (
        any("torch/distributed" in f.file for f in main.frames) or "waiting for peers" in (main.phase or ""))


def _verdict(out, by_key, causes):
    """The short story, most important first: a headline, the causes with their next steps, with
    the lines of registry.LINES (STORIES tells them, in their order; registry.ENDINGS after
    registry.BEFORE_ENDINGS), then warnings and the hosts judged by their logs alone."""
    if not out:
        return ["no earlylog process logs here"]
    story = _Story(out, by_key, causes)
    lines = [_headline(out, story.troubled)]
    ending = [c for c in causes if c.kind in registry.ENDINGS]
    lines += _cause_lines([c for c in causes if c.kind not in registry.ENDINGS])
    for kinds, tell in STORIES:
        if ending and not set(kinds) <= set(registry.BEFORE_ENDINGS):
            lines += [_cause_line(c) for c in ending]
            ending = []
        lines += tell(story)
    lines += ["warning in %s: %s" % (label(d), w) for d in story.troubled for w in d.warnings[:2]][:3]
    lines += _other_hosts(out)
    return lines


def _cause_lines(causes):
    """A line per cause; causes of one process each that say the same thing (8 DataLoader workers
    waiting on one silent server: only their pids and the seconds differ) are one line, the
    others' pids after its text. --json keeps each cause."""
    groups, index = [], {}
    for c in causes:
        key = _alike_cause(c)
        if key is not None and key in index:
            groups[index[key]][1].append(c.pids[0])
            continue
        index[key] = len(groups)
        groups.append((c, []))
    return [_cause_line(c, same) for c, same in groups]


_SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")


def _alike_cause(c):
    """What a cause of one process says without its pid and durations; None for one about several."""
    if len(c.pids) != 1:
        return None
    pid = re.compile(r"\bpid %d\b" % c.pids[0])
    return c.kind, _SECONDS.sub("N s", pid.sub("pid *", c.text)), pid.sub("pid *", c.next or "")


def _cause_line(c, same=()):
    text = c.text
    if same:
        text += " (the same in pid%s %s)" % ("s" if len(same) > 1 else "", ", ".join(map(str, same[:8])) +
                                             (" and %d more" % (len(same) - 8) if same[8:] else ""))
    return "%s; next: %s" % (text, c.next) if c.next else text


class _Story:
    """What the verdict's lines read and share: the records (model.Process), by (host, pid), and the
    causes (causes.Cause); the processes in trouble; those a line or cause told already (explained, by
    id); the straggler ranks (by id); the (waiter, waited) pairs a cause told; and the pids of a run
    a cause told stopped as a whole."""

    def __init__(self, out, by_key, causes):
        self.out, self.by_key, self.causes = out, by_key, causes
        self.troubled = [d for d in out if d.state in TROUBLE]
        self.stragglers = set()
        # A cause that tells a process whole (a child killed while its parent waited, a process
        # EARLYLOG_STALL_EXIT ended) names it first: no line of its own.
        whole = {pid for c in registry.superseding(causes, "trouble")
                 for pid in (c.pids if c.kind in registry.RUN_KINDS else c.pids[:1])}
        self.explained = {id(d) for d in out if d.pid in whole}
        # A waiting process and what it waits for, already told (a run-level cause lists pids, not a pair).
        self.told = {frozenset(c.pids[:2]) for c in causes
                     if len(c.pids) > 1 and c.kind not in registry.RUN_KINDS}
        # A run stopped as a whole is one cause, not one "likely SIGKILL" guess per process.
        self.stopped = {pid for c in registry.superseding(causes, "vanished") for pid in c.pids}


def _troubled(story):
    """A line per process in trouble that nothing above told (several children of one parent that
    ended the same way share one); after a vanished one's, its likely cause. A process the "killed by
    notice" pass judged is told here too, in the words that pass gave it."""
    lines, explained = [], story.explained
    alike = _alike(story.troubled)
    for d in story.troubled:
        same = alike.get(id(d))
        if id(d) not in explained and same:
            lines.append("%s and %d more children of pid %s (%s) ended the same way: %s%s" % (
                label(d), len(same) - 1, same[0].ppid, d.tag, d.summary, _known(d)))
            explained.update(id(x) for x in same)
        elif id(d) not in explained:
            lines.append("%s %s%s" % (label(d), d.summary, _known(d)))
            explained.add(id(d))
        if d.state == "vanished" and d.pid not in story.stopped:
            lines.append(_vanished_cause(d, story.out))
    return lines


def _lost(story):
    """Not trouble by its status, yet work was lost: a thread that died, a failed atexit callback."""
    return ["%s %s" % (label(d), d.summary) for d in story.out if d.state == "exited" and _lost_work(d)]


def _quiet_ends(story):
    """Nor is a process that os._exit(0) ended from a thread or by the program's own call, or whose
    last flush failed as its reader went away (status 120)."""
    return ["%s %s; next: %s" % (label(d), d.exit_note, d.exit_next)
            for d in story.out if d.state == "exited" and d.exit_note]


def _known(d):
    """`; next: ...` for a failure whose text is a known error (read/known.py), else ''."""
    if d.exit_next and d.state == "failed":
        return "; next: " + d.exit_next
    step = known.next_step(d.exception.text) if d.exception and d.state in ("failed", "crashed") else None
    return "; next: " + step if step else ""


def _alike(troubled):
    """{id: group} for processes of one parent that failed or crashed the same way (a pool restarting
    workers that fail at start, 64 DataLoader workers with one error): one line for each group of
    ALIKE or more, on the group's first process."""
    groups = {}
    for d in troubled:
        if d.state in ("failed", "crashed"):
            key = (d.host, d.ppid, d.tag, re.sub(r" after [\d.]+ \w+", "", d.summary))
            groups.setdefault(key, []).append(d)
    return {id(group[0]): group for group in groups.values() if len(group) >= ALIKE}


def _other_hosts(out):
    """Say plainly which hosts' processes were judged by their logs alone."""
    hosts = sorted({d.host or "?" for d in out if not d.checked_here and d.end is None})
    if not hosts:
        return []
    return ["on %s, whether a process still runs cannot be checked from here: those are judged by their "
            "logs alone (stall dumps, exits); run `earlylog report` on %s to check" % (
                ", ".join(hosts), "that host" if len(hosts) == 1 else "each host")]


def _headline(out, troubled):
    n = len(out)
    if not troubled:
        states = {}
        for d in out:
            states[d.state] = states.get(d.state, 0) + 1
        return "%d process%s, none in trouble: %s" % (n, "es" if n != 1 else "", ", ".join(
            "%d %s" % (c, s) for s, c in sorted(states.items())))
    words = {"stalled": "stuck", "crashed": "crashed", "killed": "killed by a signal", "vanished": "vanished",
             "failed": "failed (non-zero exit)"}
    parts = []
    for state in TROUBLE:
        k = sum(1 for d in troubled if d.state == state)
        if k:
            parts.append("%d %s" % (k, words[state]))
    return "%d of %d process%s in trouble: %s" % (len(troubled), n, "es" if n != 1 else "", ", ".join(parts))


def _ranks(story):
    """Ranks side by side: the one(s) outside any collective (the straggler) while the others wait in
    one for them, each named with its collective, its ordinal and its step. Ranks that a rank cause
    (read/rank_causes.py) lined up are told there."""
    out, explained, stragglers = story.out, story.explained, story.stragglers
    ranks, world = {}, 0
    for d in out:
        rank, size = rank_of(d)
        if rank is not None:
            ranks[rank] = d  # a restarted rank: the newest process wins
            world = max(world, size or 0)
    told = {pid for c in registry.superseding(story.causes, "straggler") for pid in c.pids}
    stuck = [d for d in ranks.values() if d.stall is not None and d.pid not in told]
    if not stuck or len(ranks) < 2 and world <= len(ranks):
        return []
    waiting, late = {}, []
    for r in sorted(ranks):
        d = ranks[r]
        if d.pid in told:
            continue
        if d.state == "stalled" and _in_collective(d):
            found = rank_causes.waiting(d)
            waiting.setdefault(found[1].where if found else d.stall.main.call or "a collective", []).append(r)
        elif d.state in TROUBLE:
            late.append(d)
    if not waiting and not late:
        return []
    parts = []
    # Ranks on several hosts: the straggler's host is where to look.
    hosts = len({d.host for d in ranks.values()}) > 1
    for d in late:
        explained.add(id(d))
        stragglers.add(id(d))
        r = rank_of(d)[0]
        name = "rank %d on host %s" % (r, d.host) if hosts else "rank %d" % r
        if d.stall is not None and d.state == "stalled":
            parts.append("%s is in %s, outside any collective%s" % (
                name, where(d.where), " (%s)" % d.stall.main.doing if d.stall.main and d.stall.main.doing else ""))
        else:
            parts.append("%s %s" % (name, d.summary))
    for call, rs in sorted(waiting.items()):
        for r in rs:
            explained.add(id(ranks[r]))
        parts.append("%s %s %s in %s%s" % ("rank" if len(rs) == 1 else "ranks", ", ".join(map(str, rs)),
                                           "waits" if len(rs) == 1 else "wait", call, " for %s" % (
                                               "it" if len(late) == 1 else "them") if late else ""))
    masters = {r: _master(d) for r, d in ranks.items()}
    if not late and waiting and len(set(masters.values()) - {None}) > 1:
        # Ranks that rendezvous at different addresses never meet: each waits for a job of its own.
        parts.append("the ranks use different rendezvous addresses (%s): give every rank the same "
                     "MASTER_ADDR and MASTER_PORT (or init_method)" % ", ".join(
                         "rank %d %s" % (r, m) for r, m in sorted(masters.items()) if m))
    elif not late and waiting:
        missing = sorted(set(range(max(world, max(ranks) + 1))) - set(ranks))
        parts.append("no rank is elsewhere: %s" % (
            "rank%s %s never started (no log here%s)" % (
                "" if len(missing) == 1 else "s", ", ".join(map(str, missing[:8])) + (", ..." if missing[8:] else ""),
                "; or it runs on another host, or without EARLYLOG" if not hosts else "")
            if missing else "check that every rank reached the same collective, and the network "
            "(MASTER_ADDR, MASTER_PORT, firewalls)"))
    if late:
        parts[0] = parts[0].replace(" is in ", " is the straggler: it is in ", 1) if len(late) == 1 else parts[0]
    return ["; ".join(parts)]


def _slowing(story):
    """Ranks that waited for their peers in collectives and went on each time (a stall that ended,
    steps after it): a slower rank held them up. Told once, and no trouble: slow is not stuck."""
    by_rank = rank_causes.ranks(story.out)
    slowed = {r: d for r, d in by_rank.items() if d.peer_waits and d.state not in TROUBLE}
    if not slowed:
        return []
    others = sorted(r for r, d in by_rank.items() if r not in slowed and not d.peer_waits)
    lines = []
    for r, d in sorted(slowed.items()):
        w = d.peer_waits
        lines.append("rank %d was slowed, not stuck: it waited for its peer ranks up to %s in %s (%d time%s told) "
                     "and went on each time%s" % (
                         r, secs(w.longest), w.collective, w.count, "" if w.count == 1 else "s",
                         "; rank%s %s, which never waited, %s the slower" % (
                             "s" if len(others) > 1 else "", ", ".join(map(str, others)),
                             "is" if len(others) == 1 else "are") if others else ""))
    return lines


def _master(d):
    """The rendezvous address its init_process_group phase names (`master=H:P`), or None."""
    return records.parse_init(d.stall.main.phase if d.stall and d.stall.main else None)[1]


# A parent waiting for a child that has ended: what it waits for from that child never comes (a
# multiprocessing.Pool's lost task has a cause of its own).
_ENDED_CHILD_NEXT = "; next: fix what ended the child, and wait for its results with a timeout and a check of " \
                    "its exit status"


def _parents(story):
    """A stalled parent whose child is in trouble waits for that child: say so, name the child,
    unless a cause already tells that pair. Of a parent that was stalled when it was stopped (a
    job killed at its time limit), say which stalled child it had waited for, beside its own line."""
    out, by_key, explained, stragglers, told = story.out, story.by_key, story.explained, story.stragglers, story.told
    lines = []
    for d in out:
        supervising = d.state == "idle" and (d.idle or "").startswith(SUPERVISING)
        live = d.state == "stalled" or supervising
        if d.stall is None:
            continue  # stalled with no dump: a retry loop told by its notes
        if not live and (d.state not in ("killed", "vanished") or d.stall is None or d.idle):
            continue
        kids = [by_key[(d.host, pid)] for pid in d.children if (d.host, pid) in by_key]
        if rank_of(d)[0] is not None:
            # A rank that started the other ranks (Lightning's rank 0) waits for them as its peers in a
            # collective, which the ranks' story tells: the process tree is no relation of theirs.
            kids = [k for k in kids if rank_of(k)[0] is None]
        bad = sorted((k for k in kids if k.state in TROUBLE and (live or _stalled_child(k))),
                     key=lambda k: (id(k) not in stragglers, not _stalled_child(k)))
        if not bad:
            continue
        if live and not supervising:
            explained.add(id(d))
        bad = [k for k in bad if frozenset((d.pid, k.pid)) not in told]
        if not bad:
            continue
        call = d.stall.main.call if d.stall.main else None
        kid = bad[0]
        if live:
            what = ("is stalled in %s" % where(kid.where)) if kid.state == "stalled" \
                else "ended (%s)" % kid.summary
        elif kid.kernel_state:
            what = "is still stalled in %s" % where(kid.where)  # an orphan: a cause of its own
        elif busy(kid.stall.text):  # a slow child, not a stuck one: the run ran out of time
            what = "was still computing in %s when they ended" % where(kid.where)
        else:
            what = "had stalled in %s when they ended" % where(kid.where)
        lines.append("pid %d (%s) %s%s for child %d (%s), which %s" % (
            d.pid, d.tag, "waits" if live else "had waited", " in " + call if call else "", kid.pid,
            kid.tag, what) + ("" if len(bad) == 1 else " (and %d more in trouble)" % (len(bad) - 1))
            + (_ENDED_CHILD_NEXT if live and kid.state != "stalled" else ""))
    return lines


def _stalled_child(k):
    """A child that was stuck (not idle) when it was last seen."""
    return k.stall is not None and not k.idle and k.where is not None


def _vanished_cause(d, out):
    mem = d.memory
    rose = mem and mem.oom_kill_rose or any(o.memory and o.memory.oom_kill_rose for o in out)
    if rose or mem and mem.near_limit:
        why = "the cgroup's oom_kill count rose" if rose else "memory was at %s" % mem.last
        return "likely cause for %s: the kernel's OOM killer (%s); %s" % (label(d), why, _OOM_HOW)
    return ("likely cause for %s: killed by SIGKILL (kill -9, a job scheduler or the OOM killer; its last "
            "memory breadcrumbs show no pressure), or ended by C code calling exit(), which Python never sees (the "
            "status its launcher saw tells them apart: -9 or 137 is SIGKILL); %s" % (label(d), _OOM_HOW))


# Who tells each of registry.LINES, in its order, after the causes: (the kinds it tells, fn(story)
# -> lines). A line a teller tells marks its process explained, so a later one tells it no more.
STORIES = (
    (("straggler",), _ranks),
    (("child-ended",), _parents),
    (("slowing",), _slowing),
    (("trouble", "vanished", "killed"), _troubled),
    (("lost-work",), _lost),
    (("quiet-end",), _quiet_ends),
)
