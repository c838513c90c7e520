"""Threads that stopped making progress while other threads print (docs/watchdog.md#progress),
loaded by runtime/progress.py in the watchdog thread. At each beat it looks at every program
thread: one made no progress since the last look when its stack signature (each frame's code
object and last instruction) is the same AND the kernel ran it not once (/proc/self/task/<tid>/
schedstat's timeslice count): a blocked futex, recv or waitpid never runs, a poll loop's sleep
wakes, a computation runs. One that made none for EARLYLOG_STALL seconds while it waits on a
partner (a lock, a queue, a socket, a child, a future) and is not parked waiting for work (a
server, a worker's queue, an event loop) gets a `stall:` line and a dump while the process is not
silent (silence is the watchdog's own rule); so does an asyncio task, or a gevent or eventlet
greenlet, that stood at one wait on a partner while its loop ran the others, and a training loop
with no step for several times its slowest recent interval (runtime/progress.py). It must never
pause a thread nor run the program's code: it reads sys._current_frames(), frame slots, a Thread's
instance dict, cheap /proc files and, for a hub's greenlets, one scan of the garbage collector's
objects (a few ms, on a small heap only); what it imports (kstate, waits, children, aio, stacks,
greenlets) it imports under threads.gated."""
import os
import sys
import time
import weakref
from _thread import get_ident

from earlylog.grammar import parked, places, records, stalls
from earlylog.runtime import kstate, threads as our_threads

MAX_FRAMES = 40     # frames in a stack signature, as in a dump
# Event loops' tasks are looked at only while there are at most this many (about 7 us each, with
# the GIL held): a loop with more is a server's, and a look at all of them would pause it.
MAX_WATCHED_TASKS = 256
# gevent's and eventlet's greenlets are found by a scan of the garbage collector's objects (about
# 15 ms per million blocks, with the GIL held): looked at only while the heap is at most this large.
MAX_LOOK_BLOCKS = 500000
try:
    _TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat's unit of CPU time
except (AttributeError, ValueError, OSError):
    _TICKS = 100
# System calls a thread blocked on a partner sits in (runtime/kstate.py's names): not `sleep`
# (a pause of its own), `signal` (a service waiting for SIGTERM) or `accept` (a server's idle).
PARTNER = ("futex", "read", "write", "poll", "connect", "wait", "waitid", "flock", "fcntl", "open")
# --- the look at each beat -------------------------------------------------------------------

class _Episode:
    """A stall told while others print: the keys stuck (thread idents, task keys), since when
    (monotonic), when it is told again (seconds into it), and whether the steps' pace was judged."""
    __slots__ = ("keys", "since", "next_at", "steps")

    def __init__(self, keys, since, next_at, steps):
        self.keys, self.since, self.next_at, self.steps = keys, since, next_at, steps


class _Seen:
    """One thread as last looked at: stack signature, timeslices run, since when both stood still,
    the verdict on its wait (None: not judged yet; '' : not a stall), for a wait on child
    processes, their pids and CPU time (a child that computes is the work going on), and whether it
    waits for peer ranks in a collective."""
    __slots__ = ("sig", "runs", "since", "verdict", "children", "peers")

    def __init__(self, sig, runs, since):
        self.sig, self.runs, self.since, self.verdict, self.children, self.peers = sig, runs, since, None, None, False


class _TaskSeen:
    """One asyncio task (or greenlet) as last looked at: weak references to it and to what its step
    waits for (a reference kept would keep them alive; a new object at a freed one's address is no match),
    its await chain's signature, since when all three stood still, the verdict on its wait (None:
    not judged yet; '': not a stall), and the loop thread's ident."""
    __slots__ = ("task", "waiter", "sig", "since", "verdict", "ident")

    def __init__(self, task, waiter, sig, since, ident):
        self.task, self.waiter, self.sig, self.since, self.ident = task, waiter, sig, since, ident
        self.verdict = None

    def same(self, task, waiter, sig):
        return self.task() is task and self.sig == sig and (self.waiter() if self.waiter else None) is waiter


class Tracker:
    """The bookkeeping of one process's watchdog: the threads' and event loops' tasks' last looks,
    and the open episode."""

    def __init__(self, watchdog, loop_file, beats_of):
        self.watchdog = watchdog
        self.loop_file = loop_file  # progress.loop_file: is this a file a loop's thread waits in, and whose?
        self.beats_of = beats_of    # progress.beats_of: the training steps a thread made (None: it makes none)
        self.pid = os.getpid()
        self.stall = watchdog.stall
        self.seen = {}          # ident -> _Seen
        self.tasks = {}         # ("task", id of a task) -> _TaskSeen
        self.stuck_tasks = {}   # those of them the last look found stuck
        self.tasks_due = 0.0    # when the loops' tasks are looked at next
        self.episode = None     # the _Episode told now, while others print

    def check(self, now, silent, beats):
        """beats: progress.heartbeat()'s Pace, or None while steps are not judged."""
        # While steps come at their pace, the training loop's thread is judged by them: a rank that
        # waits in each step's collective for a slower peer is slow, not stuck (docs/watchdog.md#progress).
        stuck = self._look(now, not silent, beats is not None and not beats.late())
        if silent:
            # The silence rule has the process; its `over` line, when output resumes, ends the
            # report's stall, so a thread still stuck then is told again.
            self.episode = None
            return
        late = beats is not None and beats.late()
        episode = self.episode
        if episode is not None:
            held = [ident for ident in episode.keys if ident in stuck]
            if not held and not (episode.steps and late):
                self._over(now - episode.since)
                self.episode = None
            elif now - episode.since >= episode.next_at:
                episode.next_at += min(episode.next_at, stalls.GROWTH_CAP)
                self._tell(now, stuck, beats if late else None, again=True)
            return
        if stuck or late:
            self._tell(now, stuck, beats if late else None)

    def _look(self, now, judge, steady=False):
        """{ident: _Seen} of the program's threads stuck on a partner for a whole stall (judged only
        when `judge`: a silent process is the silence rule's; the thread that makes the training
        steps not while they are `steady`). A step the thread made since the last look is progress,
        wherever the look finds it (each step waits at the same collective)."""
        frames = our_threads.current_frames()
        tids = kstate.kernel_ids()
        me = get_ident()
        seen, stuck, loops, hubs = {}, {}, [], []
        # A thread already told stuck stays so until its stack moves: a blocked wait can be woken
        # once for nothing (seen when a child of ours is spawned) and goes back to the same wait.
        held = self.episode.keys if self.episode is not None else ()
        for ident, frame in frames.items():
            tid = tids.get(ident)
            if ident == me or tid is None or our_threads.name_of(ident) is not None:
                continue
            if _in_selector(frame):
                loops.append((ident, frame))  # an event loop between steps: its tasks tell
            elif self.loop_file(frame.f_code.co_filename) == "hub":
                hubs.append((ident, frame))  # a gevent or eventlet hub between greenlets: theirs tell
            steps = self.beats_of(ident)
            sig, runs = (_signature(frame), steps), kstate.timeslices(tid)
            old = self.seen.get(ident)
            if old is None or old.sig != sig or old.runs != runs and ident not in held or runs is None:
                seen[ident] = _Seen(sig, runs, now)
                continue
            old.runs = runs
            seen[ident] = old
            if old.children is not None:
                if _cpu(old.children[0]) != old.children[1]:
                    seen[ident] = _Seen(sig, runs, now)  # the children it waits for work on
                    continue
                old.children[2] = True  # they used no CPU over a whole beat either
            if judge and now - old.since >= self.stall and not (steady and steps is not None):
                if old.verdict is None:
                    old.verdict, old.children, old.peers = our_threads.gated(_judge, ident, tid, frame)
                if old.verdict and (old.children is None or old.children[2]):
                    stuck[ident] = old
        self.seen = seen
        if judge and now >= self.tasks_due:
            # Every quarter of a stall at most; a task found stuck stays so until the next look.
            self.tasks_due = now + self.stall / 4
            self.stuck_tasks = our_threads.gated(self._look_at_tasks, now, loops, hubs)
        elif not judge:
            self.tasks, self.stuck_tasks = {}, {}
        stuck.update(self.stuck_tasks)
        return stuck

    def _look_at_tasks(self, now, loops, hubs):
        """{key: _TaskSeen} of the program's asyncio tasks that waited at one await on a partner (a
        reply, a lock, a full queue), and of its greenlets that waited on one (a lock, an event, a
        result) in a hub's loop, for a whole stall while their loop ran on (a heartbeat task or
        greenlet printing): the loop's thread moves, so only its tasks can say that one is stuck."""
        from earlylog.runtime import aio, stacks
        seen, stuck = {}, {}
        if loops and aio.task_count() > MAX_WATCHED_TASKS:
            loops = []
        for ident, frame in loops:
            loop = stacks.running_loop(frame)
            tasks = aio.pending(loop) if loop is not None else ()
            for task, chain, waiter in tasks:
                sig = tuple((f.f_code, f.f_lasti) for f in chain)
                self._track(seen, stuck, now, ("task", id(task)), task, waiter, sig, ident,
                            lambda: _judge_task(task, chain, waiter, lambda: _alone(loop, task, tasks)))
        if hubs:
            from earlylog.runtime import greenlets
            for ident, frame in hubs:
                hub = greenlets.waiting(frame, MAX_LOOK_BLOCKS)
                for g, top, main in hub[1][:greenlets.MAX_LISTED] if hub is not None and type(hub[1]) is list else ():
                    # What it waits on is read once it stood at one place for a look: a new object
                    # (the next reply's) starts its clock again. One not worth judging stays so.
                    key, sig = ("greenlet", id(g)), _signature(top)
                    old = self.tasks.get(key)
                    verdict = "" if old is None or old.sig != sig or old.task() is not g or old.verdict == "" \
                        else greenlets.judge(top, main)
                    self._track(seen, stuck, now, key, g, verdict[2] if verdict else None, sig, ident,
                                lambda: verdict[:2] if verdict else "")
        self.tasks = seen
        return stuck

    def _track(self, seen, stuck, now, key, task, waiter, sig, ident, judge):
        """One task or greenlet at this look: a new place starts its clock; one that stood still for
        a whole stall is judged once (judge()), and is stuck when that names a partner."""
        old = self.tasks.get(key)
        if old is None or not old.same(task, waiter, sig):
            seen[key] = _TaskSeen(weakref.ref(task), _weak(waiter), sig, now, ident)
            return
        seen[key] = old
        if now - old.since >= self.stall:
            if old.verdict is None:
                old.verdict = judge()
            if old.verdict:
                stuck[key] = old

    def _tell(self, now, stuck, beats, again=False):
        """The `stall:` line and a dump, unless the other threads compute (work in progress)."""
        wd = self.watchdog
        kids = _children()
        before, began = _cpu(kids), time.monotonic()
        # The CPU sample sleeps: outside the gate, so no fork waits for it (watchdog.stall_dump).
        shares, whole = our_threads.gated(_stacks).cpu_shares()
        took = max(time.monotonic() - began, 0.01)
        used = sum(b - a for a, b in zip(before, _cpu(kids)) if a is not None and b is not None)
        tids = kstate.kernel_ids()
        mine = {tids.get(ident) for ident in stuck if type(ident) is int}
        others = sum(share for tid, share in shares.items() if tid not in mine) + used / took
        if stuck and beats is None and others >= stalls.BUSY_SHARE:
            return  # a thread waits while other threads or child processes compute: work going on
        main = our_threads.main_ident()
        parts = []
        if beats is not None:
            parts.append(stalls.no_step(beats.since, beats.word, _secs(beats.typical), beats.count))
        if stuck:
            # A thread first (the main one first), then a task; of each, the one stuck longest.
            first = min(stuck, key=lambda k: (type(k) is not int, k != main, stuck[k].since))
            more = len(stuck) - 1
            seen = stuck[first]
            if type(first) is int:
                from earlylog.runtime import phases
                parts.append(stalls.no_progress(_name(first, main), now - seen.since, seen.verdict,
                                                phases.describe(first), more))
            else:  # first: ("task" or "greenlet", its id)
                parts.append(stalls.no_loop_progress(first[0], seen.verdict[0], _name(seen.ident, main),
                                                     now - seen.since, seen.verdict[1], more))
        if not stuck and whole >= stalls.BUSY_SHARE:
            parts.append(stalls.busy(whole))
        since = min([s.since for s in stuck.values()] + ([now - beats.since] if beats is not None else []))
        if self.episode is None:
            self.episode = _Episode(set(stuck), since, now - since, beats is not None)
            self.episode.next_at += min(self.episode.next_at, stalls.GROWTH_CAP)
        # A computing process with no thread stuck (a long evaluation, a checkpoint) is no alarm
        # beside its own output: its line stays in the log; so is, at its first telling, a rank
        # whose threads only wait for their peer ranks in a collective (a slower peer, most often).
        peers = bool(stuck) and all(type(k) is int and stuck[k].peers for k in stuck)
        wd.say("stall", stalls.noisy(parts, wd.logger.path),
                  console=stalls.console_noisy(bool(stuck), whole, peers, again))
        our_threads.gated(wd._dump, "stall after %.0f s without progress%s" % (
            now - since, " (again)" if again else ""), shares)

    def _over(self, seconds):
        self.watchdog.say("stall", stalls.over(seconds, silence=False))


def _stacks():
    """The stacks module (with kstate, which its CPU sample reads with), imported under threads.gated."""
    from earlylog.runtime import stacks
    return stacks


def _secs(s):
    return "%.1f" % s if s < 10 else "%.0f" % s


def _signature(frame):
    sig = []
    while frame is not None and len(sig) < MAX_FRAMES:
        sig.append((id(frame.f_code), frame.f_lasti))
        frame = frame.f_back
    return tuple(sig)



_is = parked.is_file


def _name(ident, main):
    return our_threads.program_thread_name(ident) or ("MainThread" if ident == main else "0x%x" % ident)


def _judge(ident, tid, frame):
    """(`waiting for lock _lock at train.py:12 in load`, None, False) for a thread blocked on a
    partner, or ('', None, False) for one that is not a stall: a sleep, a library's own helper
    thread, a thread parked waiting for work (a server, a pool worker, a worker's queue), an event
    loop (its tasks say), a join (the joined thread is judged itself), a main thread parked at its
    top level (a service), a wait for children that run earlylog (their own watchdogs judge them).
    For a wait on other children, the second item is (their pids, their CPU time): while it rises,
    they work. The third is True for a wait on peer ranks in a collective (runtime/collectives.py)."""
    from earlylog.runtime import aio, children
    call = kstate.syscall(tid)
    stack, users = _stack(frame)
    if call is not None and call[0] in PARTNER + ("sleep",) and users and aio.in_step(frame):
        # Still inside one task's step (or callback) of an event loop: no other task of that loop
        # runs, a sleep included (a coroutine's time.sleep is no poll loop). read/async_causes.py
        # names the task and the call from the dump's `running task:` note.
        user = stack[users[0]]
        return "blocking its asyncio event loop (%s) at %s:%d in %s" % (
            _waiting(frame, tid), os.path.basename(user[0]), user[2], user[1]), None, False
    if call is None or call[0] not in PARTNER:
        return "", None, False
    main = ident == our_threads.main_ident()
    if not users and not main:
        return "", None, False
    inner = stack[:users[0]] if users else stack
    if _parked(stack, inner, main, users):
        return "", None, False
    user = stack[users[0]] if users else stack[0]
    peers = _collective(ident, frame)
    if peers:
        return "%s at %s:%d in %s" % (peers, os.path.basename(user[0]), user[2], user[1]), None, True
    pids, logged, _printed = children.waited_children(tid, frame)
    if logged:
        return "", None, False
    return "%s at %s:%d in %s" % (_waiting(frame, tid), os.path.basename(user[0]), user[2], user[1]), \
        [pids, _cpu(pids), False] if pids else None, False


def _collective(ident, frame):
    """collectives.words() where torch.distributed is loaded, as stacks._collective."""
    if "torch.distributed" not in sys.modules:
        return None
    from earlylog.runtime import collectives
    return collectives.words(ident, frame)


def _stack(frame):
    """([(file, function, line)] innermost first, the indexes of the program's own frames)."""
    stack = []
    while frame is not None and len(stack) < MAX_FRAMES:
        stack.append((frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno))
        frame = frame.f_back
    return stack, [i for i, (path, _func, _line) in enumerate(stack) if not places.foreign(path)]


def _children():
    """The pids of this process's child processes (/proc/self/task/<tid>/children)."""
    pids = []
    try:
        from earlylog.runtime import fds
        tids = fds.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tids:
        pids += [int(w) for w in (our_threads.read("/proc/self/task/%s/children" % tid, 65536) or b"").split()]
    act = sys.modules.get("earlylog.runtime.act")  # EARLYLOG_ON_STALL's and STALL_EXIT's own children
    ours = act.live_pids() if act is not None else ()
    return [pid for pid in pids if pid not in ours][:256]


def _cpu(pids):
    """Seconds of CPU the processes and their waited-for children used, and each one's main thread
    queued for a core (None for one gone). Queueing counts, as for our own threads (kstate.cpu_seconds):
    on a crowded machine a computing child waits for a core, and its CPU time alone says it idles."""
    out = []
    for pid in pids:
        fields = (our_threads.read("/proc/%d/stat" % pid, 1024) or b"").rpartition(b")")[2].split()
        queued = (our_threads.read("/proc/%d/schedstat" % pid, 256) or b"").split()
        try:
            out.append(sum(int(f) for f in fields[11:15]) / _TICKS + (int(queued[1]) / 1e9 if len(queued) >= 2 else 0.0)
                       if len(fields) >= 15 else None)
        except ValueError:
            out.append(None)
    return out


def _in_selector(frame):
    """Is this thread's innermost frame an event loop's selector, between two steps?"""
    return _is(frame.f_code.co_filename, "selectors.py") and frame.f_back is not None and \
        frame.f_back.f_code.co_name == "_run_once"


def _weak(obj):
    """A weak reference to obj, or None for None (or an object that takes none: never a match)."""
    if obj is None:
        return None
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: _NO_MATCH


_NO_MATCH = object()


def _judge_task(task, chain, waiter, alone):
    """(`Task-2 (fetch)`, `waiting for a Future in fetch at app.py:8`) for a task that waits on a
    partner, or '' for one that waits for work (a server's client, a queue, a sleep: as the report
    judges a loop), for other tasks (a gather, a task: each is judged by its own moves), or to be
    told to stop (an Event: a service's main task); unless what it awaits in its own code, an
    Event or a Queue, is something nothing else refers to (alone(): runtime/reach.py)."""
    from earlylog.runtime import aio, stacks
    if not chain:
        return ""
    files = [(f.f_code.co_filename, f.f_code.co_name) for f in chain]
    inner = chain[-1]
    user = next((f for f in reversed(chain) if not places.foreign(f.f_code.co_filename)), inner)
    if aio.awaits_tasks(waiter):
        return ""
    if _task_waits_for_work(files, stacks.server_read(inner)) or \
            inner.f_code.co_name == "wait" and _is(inner.f_code.co_filename, "asyncio/locks.py") or \
            _is(inner.f_code.co_filename, "asyncio/tasks.py"):
        # an Event (a service told to stop), a queue's work, asyncio.wait()/wait_for() on tasks
        if user is inner or not alone():
            return ""
        return aio.describe(task), "waiting for %s.%s in %s, which nothing else refers to" % (
            os.path.basename(inner.f_code.co_filename)[:-3], inner.f_code.co_name,
            records.place(user.f_code.co_name, user.f_code.co_filename, user.f_lineno))
    awaited = "a Future" if inner is user else "%s.%s" % (os.path.basename(inner.f_code.co_filename)[:-3],
                                                          inner.f_code.co_name)
    return aio.describe(task), "waiting for %s in %s" % (
        awaited, records.place(user.f_code.co_name, user.f_code.co_filename, user.f_lineno))


def _alone(loop, task, tasks):
    from earlylog.runtime import reach
    return reach.task_alone(loop, task, [(t, None, chain) for t, chain, _w in tasks], our_threads.current_frames())


def _parked(stack, inner, main, users):
    if parked.waits_for_work([(path, func) for path, func, _line in stack], main) is not None:
        return True  # a server or a pool's worker between pieces of work, a queue's consumer
    if any(func == "_run_once" and _is(path, "asyncio/base_events.py") for path, func, _l in stack):
        return True  # an event loop: its tasks tell what it waits for
    if inner and all(_is(p, "threading.py") for p, _f, _l in inner) and \
            any(f in ("join", "_wait_for_tstate_lock") for _p, f, _l in inner):
        return True  # a join: the joined thread is judged by its own progress
    if main and users and stack[users[0]][1] == "<module>" and inner and \
            all(_is(p, "threading.py") for p, _f, _l in inner) and inner[-1][1] == "wait":
        return True  # a main thread parked on an event at its top level: a service told to stop
    return False


def waiting_for_work():
    """True when every thread of the program is parked waiting for work: a Ray worker's or a
    server's loop, an event loop whose pending tasks are all library code (a web framework's, Ray's
    agents'), a pool's worker, a library's own helper threads; at least one thread must be so
    parked. Such a process's silence is its idleness: the watchdog keeps its stall line off the
    console (read/idle.py judges the dump the same way). Called in the watchdog thread under
    threads.gated; reads frames and the loop's task set, runs none of the program's code."""
    from earlylog.runtime import stacks
    main_ident = our_threads.main_ident()
    tids = kstate.kernel_ids()
    resting = serving = stopping = False
    for ident, frame in our_threads.current_frames().items():
        if ident == get_ident() or our_threads.name_of(ident) is not None:
            continue
        stack, users = _stack(frame)
        main = ident == main_ident
        serving = serving or any(func in ("serve_forever", "wait_for_termination") for _p, func, _l in stack)
        if not users and not main:
            continue  # a library's own helper thread (a pool's, a gRPC poller), or a server's
        if not users and stack and parked.run_loop(stack[0][1]) and tids.get(ident) is not None and \
                (kstate.syscall(tids[ident]) or ("",))[0] == "sleep":
            resting = True  # a library's run loop between rounds
            continue
        inner = stack[:users[0]] if users else stack
        if inner and all(_is(p, "threading.py") for p, _f, _l in inner) and (
                any(f in ("join", "_wait_for_tstate_lock") for _p, f, _l in inner) or
                main and users and stack[users[0]][1] == "<module>" and inner[-1][1] == "wait"):
            # A join, or a main thread on an event at its top level: waiting for the program to be
            # told to stop, which is a server's idleness only beside a thread that serves (a queue's
            # worker that is never told to stop keeps its join waiting forever).
            stopping = True
            continue
        if not _parked(stack, inner, main, users):
            return False
        if any(func == "_run_once" and _is(path, "asyncio/base_events.py") for path, func, _l in stack):
            if not _in_selector(frame):
                return False  # inside a task's step or a callback, not parked in its selector
            tasks = stacks.task_chains(frame)
            if tasks is None or not all(_task_waits_for_work(chain, serving) for chain, serving in tasks):
                return False  # a task of the program's waits there for something else: a reply, a result
        resting = True
    return serving or resting and not stopping


def _task_waits_for_work(chain, server_read):
    """A library's own task, or one that awaits a server, a queue, a sleep or its client's next
    request (read/idle.py's _loop_tasks)."""
    return server_read or bool(chain) and all(places.foreign(path) for path, _func in chain) or \
        parked.awaits_work(chain)


def _waiting(frame, tid):
    """`waiting for lock cache_lock`, `waiting for queue batches (get)`, or the kernel's words."""
    from earlylog.runtime import waits
    found = waits.waited(frame)
    if found is not None:
        kind, name, call = found
        if kind == "join":
            return "joining a thread"
        return "waiting for %s %s%s" % (kind, name or "?", " (%s)" % call if kind == "queue" else "")
    words = kstate.describe(tid)
    from earlylog.grammar import notes  # loaded by describe() itself
    state = notes.parse(words) if words else None
    return state.what if state is not None and not state.busy else words or "blocked"
