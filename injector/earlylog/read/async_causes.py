"""asyncio causes (see causes.py): an event loop blocked by a synchronous call inside a coroutine
(`loop-blocked`: while `time.sleep`, a blocking socket read or a lock's acquire() runs in one
task, no other task runs), a task waiting for an asyncio lock that it holds itself or that a task
waiting for something else holds (`task-lock`), a task in Queue.join() for items got without
task_done() (`task-done`, as for threads), and a task that died with an exception nobody retrieved while other
tasks wait for what it would have produced (`task-died`: the producer raised, the consumer awaits
queue.get() for ever). Read from the notes runtime/aio.py writes under a loop's thread (`running
task:`, `dead task:`) and from asyncio's own "Task exception was never retrieved" report on
stderr (read/logread.py: a task the program kept no reference to is freed, and reported, as it
fails). A loop computing in a coroutine is busy, not blocked: no cause. It only reads."""
import re

from earlylog.read import frames
from earlylog.read.causes import Cause, label
from earlylog.read.model import as_frames
from earlylog.grammar import notes

_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")  # the first call a line of source makes
# What a pending task's innermost library frame waits in, in words: (file, function) -> words.
_AWAITS = (("asyncio/queues.py", "queue.%s()"), ("asyncio/locks.py", "%s() of an asyncio lock or event"))
# Awaits that are a task's own pace or a server's idleness, not a wait for another task's work.
_NOT_WORK = (("asyncio/tasks.py", "sleep"), ("asyncio/base_events.py", "serve_forever"))
RECENT = 1.0  # seconds: a death reported on stderr this close to the last sign of life is the last thing that happened


def find(report, folder):
    """The asyncio causes of each stalled process of a judged report."""
    out = []
    for d in report.processes:
        p = folder.procs.get((d.host, d.pid))
        if p is None or d.stall is None or p.stall is None or p.stall.gil:
            continue
        for t in p.stall.threads:
            out += _blocked(d, t)
            out += [] if d.idle else _held_locks(d, t) + _unmarked(d, t)
        out += [_died(d, death, waiters) for death, waiters in orphaned(p)]
    return out


# --- a task waiting for an asyncio lock that is never released --------------------------------

def _held_locks(d, t):
    """A task waits for an asyncio Lock (or a Condition's) that it holds
    itself (asyncio's locks are not reentrant: it waits for ever), or that another task holds while
    that task waits for something else: one cause per lock, read from the task lines' `held by`
    (runtime/stacks.py finds the holder's `async with` block or `acquire()` in its await chain)."""
    chains = {name: (chain, awaiting) for name, chain, awaiting in frames.task_chains(t.notes)}
    out, told = [], set()
    for name, (chain, awaiting) in chains.items():
        sync = notes.parse_awaits_sync(awaiting)
        # A semaphore's holders are many by design (a limit on concurrent work, a slow holder): no cause.
        if sync is None or sync.kind not in ("Lock", "Condition") or sync.holder is None or \
                (sync.kind, sync.name, sync.holder) in told:
            continue
        told.add((sync.kind, sync.name, sync.holder))
        lock = frames.sync_name(sync)
        taken = "%s at %s:%s" % (sync.func, _base(sync.file), sync.line) if sync.file else "its await chain"
        waiter = "asyncio task %s waits for %s%s" % (name, lock, _at(frames.user_frame(chain)))
        if sync.holder == notes.THIS_TASK:
            out.append(Cause(
                "task-lock", "%s: %s, which it already holds: it took it in %s, and asyncio's locks are not "
                             "reentrant, so the task waits for itself" % (label(d), waiter, taken),
                "do not take %s again while it is held: call a helper that expects it held, or release it "
                "before the call (asyncio has no RLock)" % (("`%s`" % sync.name) if sync.name else "the lock"),
                [d.pid], [t.name]))
            continue
        holder = sync.holder[len("task "):]
        held_chain, held_awaits = chains.get(holder, ((), None))
        if any(f.function == "sleep" and frames.is_file(f.file, "asyncio/tasks.py") for f in held_chain[:1]):
            continue  # the holder paces itself: it lets go when it wakes
        again = notes.parse_awaits_sync(held_awaits)
        if again is not None and again.holder == "task " + name:
            what = "%s, which task %s holds: the two tasks wait for each other (a deadlock)" % (
                frames.awaited_words(held_awaits).partition(",")[0], name)
            step = "take the locks in one order in every task, or hold only one at a time"
        else:
            what = frames.awaited_words(held_awaits) or "something that was not written"
            step = "find why task %s's wait never ends; keep waits for other work out of the block that holds "                    "the lock, or bound them (`asyncio.wait_for`, `asyncio.timeout`)" % holder
        out.append(Cause(
            "task-lock", "%s: %s, held by task %s since %s, which itself waits for %s%s" % (
                label(d), waiter, holder, taken, what, _at(frames.user_frame(held_chain))),
            step, [d.pid], [t.name]))
    return out


def _unmarked(d, t):
    """A task awaits Queue.join() on an empty asyncio queue with unfinished items while its consumers
    await get() for more: an item was got without task_done() (the thread version: thread_causes)."""
    chains = [(name, chain, notes.parse_awaits_sync(awaiting)) for name, chain, awaiting in frames.task_chains(t.notes)]
    out = []
    for name, chain, sync in chains:
        if sync is None or not sync.unfinished or not sync.detail.endswith(", 0 queued"):
            continue
        getters = [(other, frames.user_frame(c)) for other, c, s in chains
                   if s is not None and s.kind == sync.kind and s.name == sync.name and s.detail == "empty"]
        what = frames.sync_name(sync)
        consumers = "; its consumer task%s %s await%s get() for more (%s)" % (
            "" if len(getters) == 1 else "s", ", ".join(g for g, _f in getters[:3]), "s" if len(getters) == 1 else "",
            ", ".join(_at(f)[len(" in "):] for _g, f in getters[:3])) if getters else ""
        out.append(Cause(
            "task-done", "%s: asyncio task %s awaits join()%s for %d unfinished item%s of %s, which is empty%s: an "
            "item was got without task_done(), so join() never returns" % (
                label(d), name, _at(frames.user_frame(chain)), sync.unfinished,
                "" if sync.unfinished == 1 else "s", what, consumers),
            "call task_done() once for every get(), in a `finally:` so that an exception or a `continue` cannot "
            "skip it", [d.pid], [t.name]))
    return out


def _base(path):
    return path.rpartition("/")[2]


def _at(frame):
    return " in %s at %s:%d" % (frame.function, _base(frame.file), frame.line) if frame is not None else ""


# --- a loop blocked by a synchronous call ----------------------------------------------------

def _blocked(d, t):
    running = notes.first(t.notes, notes.Running)
    state = notes.first(t.notes, notes.State)
    if running is None or state is None or state.busy:
        return []  # parked in its selector, or computing: busy is not stuck
    at = next((i for i, f in enumerate(t.frames) if f.file == running.file and f.line == running.line), None)
    if frames.library(running.file) and at is not None and any(not frames.library(f.file) for f in t.frames[:at]):
        return []  # a framework's coroutine running the user's code (a notebook's cell): that code is the story
    others = [name for name, _chain, awaiting in frames.task_chains(t.notes)
              if name != running.task and not (awaiting or "").startswith(("task ", "gather of "))]
    if not others:
        return []  # no other task to starve: what the call waits for is the cause (a child, a lock, a peer)
    call = running.call or frames.call_name(t.frames) or _source_call(t, running) or "a blocking call"
    place = "%s:%s" % (running.file.rpartition("/")[2], running.line)
    if running.how == "task":
        who = "task %s (%s) calls %s at %s inside a coroutine" % (running.task, running.coro, call, place)
    else:
        who = "a callback, %s, calls %s at %s" % (running.func, call, place)
    doing = state.doing
    return [Cause("loop-blocked", "%s: the asyncio event loop in thread %s is blocked: %s, so no other task "
                                  "runs (%s)" % (label(d), t.name, who, doing),
                  _unblock(call, running.how == "task"), [d.pid], [t.name])]


def _source_call(t, running):
    """The first call on the frame's source line, where the runtime could not name it."""
    code = next((t.code.get(i) for i, f in enumerate(t.frames) if f.line == running.line
                 and f.function == running.func), None)
    m = _CALL.search(code or "")
    return m.group(1) if m else None


def _unblock(call, coroutine):
    """The next step for a blocking call inside a coroutine (or a callback), by what the call is."""
    name = call.rpartition(".")[2]
    if call in ("time.sleep", "sleep") and not coroutine:
        return "`loop.call_later(delay, ...)` for the rest instead of time.sleep in a callback; any other " \
               "blocking call: `loop.run_in_executor(None, ...)`"
    if call in ("time.sleep", "sleep"):
        return "`await asyncio.sleep(...)` instead of time.sleep; any other blocking call: `await " \
               "asyncio.to_thread(...)` or `loop.run_in_executor(None, ...)`"
    if name in ("acquire", "wait", "join", "get", "result"):
        return "use asyncio's own primitive (asyncio.Lock, asyncio.Event, asyncio.Queue), or wait in a thread: " \
               "`await asyncio.to_thread(%s)` or `loop.run_in_executor(None, ...)`" % call
    return "run it in a thread, `await asyncio.to_thread(%s, ...)` or `loop.run_in_executor(None, ...)`, or " \
           "use an asyncio client (asyncio streams, aiohttp, httpx.AsyncClient)" % call


# --- a task that died while others wait for it -----------------------------------------------

def orphaned(p):
    """[(death, [(task name, what it waits for, its frame)])]: tasks of a stalled process that died
    with an exception nobody retrieved, each with the pending tasks waiting for what it would have
    produced. A death the runtime saw names its waiters itself (they wait on an object the dead
    task held), and counts only with them: a server's long-failed task beside a worker waiting for
    jobs is no cause. One asyncio reported on stderr (its task freed, its objects gone) counts when
    it was the last thing that happened and a task of the user's still waits on a queue, an event
    or a future. Empty for a process that
    did not stall; idle.py's `idle` yields to it (verdict.py)."""
    if p.stall is None or p.stall.gil:
        return []
    out = []
    for t in p.stall.threads:
        pending = {name: (chain, awaiting) for name, chain, awaiting in frames.task_chains(t.notes)}
        waiting = [name for name, (chain, awaiting) in pending.items() if _waits_for_work(chain, awaiting)]
        for dead in notes.every(t.notes, notes.DeadTask):
            death = (dead.task, dead.coro, dead.exc, as_frames(dead.frames[::-1]))
            who = [w for w in dead.waiters if w in pending]  # none: its work is no pending task's
            if who:
                out.append((death, [_waiter(w, *pending[w]) for w in who]))
        since = p.activity if p.activity is not None else p.last
        for died in p.task_deaths[-3:]:
            if died.time is None or since is None or since - died.time > RECENT or not waiting or \
                    any(o[0][0] == died.task for o in out):
                continue
            out.append(((died.task, died.coro, died.text, died.frames),
                        [_waiter(w, *pending[w]) for w in waiting]))
    return out


def _waits_for_work(chain, awaiting):
    """Does a pending task of the user's wait for something another task produces (an item, an
    event, a future), rather than pace itself, serve, or wait for a client?"""
    if not chain or all(frames.library(f.file) for f in chain) or awaiting == notes.SERVER_READ or \
            (awaiting or "").startswith(("task ", "gather of ")):
        return False  # a task awaiting other tasks waits where they wait
    return not any(f.function == func and frames.is_file(f.file, suffix) for f in chain for suffix, func in _NOT_WORK)


def _waiter(name, chain, awaiting):
    user = frames.user_frame(chain)
    inner = chain[0] if chain else None
    what = None
    for suffix, words in _AWAITS:
        if inner is not None and frames.is_file(inner.file, suffix):
            what = words % inner.function
    if what is None:
        what = awaiting or "a Future"
    return name, what, user


def _died(d, death, waiters):
    name, coro, exc, chain = death
    frame = frames.user_frame(chain)
    place = " at %s:%d" % (frame.file.rpartition("/")[2], frame.line) if frame else ""
    waits = "; ".join("task %s (%s) waits for %s at %s" % (
        w, user.function if user else "?", what, "%s:%d" % (user.file.rpartition("/")[2], user.line) if user else "?")
        for w, what, user in waiters[:3])
    return Cause("task-died", "%s: asyncio task %s (%s) died%s with %s, and nobody awaited it; %s for what it "
                              "would have produced" % (label(d), name, coro, place, exc, waits),
                 "fix the %s%s; to fail fast instead of hanging, await the task (or `asyncio.gather(...)` it with "
                 "the waiters, which raises its exception) or add a done callback that stops the loop "
                 "(`task.add_done_callback(...)`)" % (exc.partition("(")[0], " in %s" % frame.function if frame else ""),
                 [d.pid], [])
