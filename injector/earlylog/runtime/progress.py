"""Progress of the work, not the silence of its output: the training heartbeat, and the entry to
the per-thread look (runtime/stuck.py). A stall the silence of the whole process cannot see, because
other threads keep printing (a telemetry thread, a logging handler, a progress bar's refresh
thread), is a thread that stopped making progress, or a training loop with no step
(docs/watchdog.md#progress).

- beat(kind): called by the library marks (runtime/marks.py) at each optimizer step and DataLoader
  batch: a few list writes, no lock, no system call, no import.
- check(watchdog, now, silent): called by the watchdog thread at each beat. It loads runtime/stuck.py
  once the program has a second thread or its steps began: before that a stall is silence, the
  watchdog's own rule.

It must never raise into the program nor slow its step."""
import os
import time
from _thread import get_ident

from earlylog.runtime import state, threads as our_threads

GAPS = 16           # recent heartbeat intervals kept per kind
MIN_BEATS = 3       # heartbeats before the heartbeat is judged: the first steps compile and warm up
TIMES = 5           # no step for this many times the slowest recent interval (at least EARLYLOG_STALL)


# --- the training heartbeat: in the program's threads, at each step ----------------------------

class _Beats:
    """One kind of heartbeat: how many, the last (monotonic), the recent intervals, and the thread
    that beat last (the training loop's: its steps are its progress)."""
    __slots__ = ("count", "last", "gaps", "thread")

    def __init__(self):
        self.count, self.last, self.gaps, self.thread = 0, None, [0.0] * GAPS, None


_beats = {}  # "step" (an optimizer step) or "batch" (a DataLoader batch) -> _Beats
_resting = [False]  # a DataLoader ran out (an epoch's end) and no beat came since


def beat(kind):
    """One training step or batch happened now: a sign of life, as a printed line is (a training
    loop that prints nothing but steps is not silent). Cheap: a step may take a few ms."""
    now = time.monotonic()
    logger = state.logger
    if logger is not None:
        logger.last_activity = now
    b = _beats.get(kind)
    if b is None:
        b = _beats[kind] = _Beats()
    if b.last is not None:
        b.gaps[b.count % GAPS] = now - b.last
    b.count += 1
    b.last = now
    b.thread = get_ident()
    _resting[0] = False


def rest():
    """A DataLoader ran out: an epoch, or the training, ended. What follows (an evaluation, a
    checkpoint, the end of the program) is no missed step; the next beat ends the rest."""
    _resting[0] = True


def _reset_after_fork():
    _beats.clear()  # a DataLoader worker steps nothing; its parent's steps are not its own
    _resting[0] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class Pace:
    """The training steps' pace at one look (heartbeat()): seconds since the last step, the typical
    interval, the longest silence still healthy (`limit`), steps so far and their word."""
    __slots__ = ("since", "typical", "limit", "count", "word")

    def __init__(self, since, typical, limit, count, word):
        self.since, self.typical, self.limit, self.count, self.word = since, typical, limit, count, word

    def late(self):
        """No step for longer than the pace allows."""
        return self.since >= self.limit


def heartbeat(now, floor):
    """The Pace once the heartbeat is judged (MIN_BEATS steps, or batches where there are no
    optimizer steps), else None. Every kind counts as a sign of life: an evaluation pass between
    steps fetches batches."""
    kind = "step" if "step" in _beats else "batch"
    main = _beats.get(kind)
    if main is None or main.count < MIN_BEATS or _resting[0]:
        return None
    beats = list(_beats.values())
    last = max(b.last for b in beats if b.last is not None)
    slowest = max(max(b.gaps[:min(b.count - 1, GAPS)] or [0.0]) for b in beats)
    gaps = main.gaps[:min(main.count - 1, GAPS)]
    typical = sorted(gaps)[len(gaps) // 2] if gaps else 0.0
    return Pace(now - last, typical, max(floor, TIMES * slowest), main.count, kind)


def steps():
    """Training steps so far (optimizer steps, else DataLoader batches), or None before the first."""
    b = _beats.get("step") or _beats.get("batch")
    return b.count if b is not None else None


def resting():
    """A DataLoader ran out (an epoch's end, or the training's) and no step came since."""
    return _resting[0]


def beats_of(ident):
    """How many beats the thread `ident` made (a new one is progress of the training loop's
    thread, whatever place a look finds it at), or None for a thread that makes none."""
    counts = [b.count for b in list(_beats.values()) if b.thread == ident]
    return sum(counts) if counts else None


def check(watchdog, now, silent):
    """The per-thread and heartbeat look of one watchdog beat (see runtime/stuck.py)."""
    tracker = watchdog.progress
    if tracker is None or tracker.pid != os.getpid():
        # The program's one thread and ours: no other thread prints while it is stuck, unless it
        # runs an event loop (in its selector now) or a gevent or eventlet hub, whose other tasks or
        # greenlets may.
        frames = our_threads.current_frames()
        if len(frames) <= 2 and not _beats and \
                not any(loop_file(f.f_code.co_filename) for f in frames.values()):
            return
        tracker = watchdog.progress = our_threads.gated(_tracker, watchdog)
    try:
        tracker.check(now, silent, heartbeat(now, watchdog.stall))
    except Exception as exc:  # a frame or /proc file nobody foresaw: never the watchdog's other duties
        watchdog.progress = _Off()
        watchdog.say("earlylog", "the progress check stopped: %r" % (exc,), console=False)


def loop_file(path):
    """"selector" for a file an asyncio event loop's thread waits in between steps (as any
    selector's user does), "hub" for gevent's or eventlet's hub, else None."""
    path = path.replace("\\", "/")
    return "selector" if path.endswith("selectors.py") else \
        "hub" if path.endswith("/gevent/hub.py") or "/eventlet/hubs/" in path else None


class _Off:
    """The tracker of a process whose progress check failed once: it looks no more."""

    def __init__(self):
        self.pid = os.getpid()

    def check(self, now, silent, beats):
        pass


def _tracker(watchdog):
    from earlylog.runtime import stuck
    return stuck.Tracker(watchdog, loop_file, beats_of)
