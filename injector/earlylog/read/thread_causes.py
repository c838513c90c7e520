"""Thread-level causes (see causes.py): a lock and the thread holding it (a deadlock when holders
wait on each other), a lock a fork copied locked, a thread pool whose workers all wait for work
queued behind them, a join and where the joined thread is, a finished program kept alive by a
non-daemon thread, a thread that died while the others wait, C code holding the GIL, a stack
overflow; and for a run, processes that all ended at the same moment, and peers that failed one
after another (the first failure first). Each is one sentence of evidence (thread, frame, pid)
and a next step, read from the judged report and the folder's raw facts, above all the notes the
runtime wrote under each thread (runtime/waits.py). It states only what the log says ("held by an
unknown thread"); it never writes, prints or guesses."""
import os
import re
import time

from earlylog.read import frames, greenlets, idle
from earlylog.read.causes import Cause, first_line, label, place as _place, rank as rank_of, secs, what as _what
from earlylog.read.model import Frame
from earlylog.grammar import notes, records  # the grammar of the runtime's notes and lines
_MODULE = re.compile(r"/(?:site|dist)-packages/(.+)\.py$|/lib/python\d[\d.]*/(.+)\.py$")
_LOCKS = ("lock", "semaphore")
_POOL_WORKER = re.compile(r"^(.+)_\d+$")  # ThreadPoolExecutor's thread names: `PREFIX_N`
_POOL_FILE = os.path.join("concurrent", "futures", "thread.py")
_POOL_BASE = os.path.join("concurrent", "futures", "_base.py")  # an executor's `with` block: __exit__
OVERFLOW = 50        # a stack whose innermost frame repeats this often is a stack overflow
MOMENT = 2.0         # seconds: the least time between a process's last line and its next one
FOLLOW = 120.0       # seconds: a failure this soon after a peer's may follow from it
APART = 0.1          # seconds: failures closer than this ended together, neither first


def _where(t):
    """`func at file.py:12`, the user's frame, naming the library call it is inside where no note
    says what it waits for."""
    call = None if t.wait or t.joins else t.call
    return frames.where(t.frame) + (" (in %s)" % call if call else "")


def _now(t):
    """`is now in f at x.py:3 (sleeping)`, or what it waits for."""
    if t.wait:
        return "itself waits for %s in %s" % (_what(t.wait), _where(t))
    return "is now in %s%s" % (_where(t), " (%s)" % t.doing if t.doing else "")


class Stall:
    """One process of a judged report, as its thread-level finders see it (read/registry.py runs
    them): its record d (model.Process), its log p, its parent's log, and, when it stalled, its
    dump's threads (logread.Thread: their notes read as fields; `threads` is None otherwise), by
    ident, and the lock cycles among them."""

    def __init__(self, d, p, parent):
        self.d, self.p, self.parent = d, p, parent
        self.threads = p.stall.threads if d.stall is not None and p.stall is not None else None
        self.by_ident = {t.ident: t for t in self.threads or () if t.ident}
        self.cycles = _cycles(self.threads, self.by_ident) if self.threads is not None else []
        self.in_cycle = {t.ident for c in self.cycles for t in c}


def stalls(report, folder):
    """A Stall for each process of the report that has a log here."""
    for d in report.processes:
        p = folder.procs.get((d.host, d.pid))
        if p is not None:
            yield Stall(d, p, folder.procs.get((d.host, d.ppid)))


# --- the finders the registry runs on one stalled process (s: a Stall, t: one of its threads);
# what one cause supersedes (a deadlock, the lock waits in it) is the registry's to drop ----------

def gil(s):
    return _gil(s.d, s.p) if s.p.stall.gil else []


def deadlocks(s):
    return [_deadlock(s.d, c) for c in s.cycles]


def starved(s):
    return _starved(s.d, s.threads)


def imports(s, t):
    """A thread waiting for an import: a lock a fork copied, an import deadlock, or an import."""
    if not (t.wait and t.wait.kind == "import" and not t.busy):
        return []
    return (_fork_copy(s.d, t, s.by_ident, s.parent) if s.p.forked else []) + _import(s.d, t, s.by_ident)


def waits(s, t):
    """A thread waiting for a lock (its holder, or a lock a fork copied) or in a join."""
    found = []
    if t.wait and t.wait.kind in _LOCKS and not t.busy:
        found += (_fork_copy(s.d, t, s.by_ident, s.parent) if s.p.forked else []) + _lock(s.d, t, s.by_ident)
    if t.joins and not t.busy and not _flush_for_parent(s.d, t, s.by_ident, s.parent):
        found += _join(s.d, t, s.by_ident, s.in_cycle)
    if s.p.forked and not t.wait and not t.joins:
        found += _fork_native(s.d, t, s.parent)
    return found


def shutdown(s):
    return _shutdown(s.d, s.threads)


def deaths(s):
    return _deaths(s.d, s.p, s.threads)


def unmarked(s):
    return _unmarked(s.d, s.threads)


def unset(s):
    return _unset(s.d, s.threads)


def stranded(s):
    return _stranded(s.d, s.threads, s.p.failed_tasks)


def hub(s):
    return greenlets.causes(s.d, s.p.stall.threads, s.p.stall.greenlet)


def overflow(s):
    return _overflow(s.d, s.p)


def run_stopped(report, folder):
    return _run_stopped(report, folder)


def first_failure(report, folder):
    return _first_failure(report)


def _holder(t, by_ident):
    """(the one thread of this dump holding what t waits for or None, its `held by` facts or None)."""
    facts = t.holders[0] if len(t.holders) == 1 else None
    return (by_ident.get(facts.ident) if facts and facts.ident else None), facts


def _cycles(threads, by_ident):
    """Threads that each wait for a lock the next one holds, round to the first: deadlocks."""
    found, seen = [], set()
    for start in threads:
        path, t = [], start
        while t is not None and t.ident not in seen and t.wait and t.wait.kind == "lock":
            seen.add(t.ident)
            path.append(t)
            t = _holder(t, by_ident)[0]
        if t is not None and t in path and len(path) - path.index(t) > 1:
            found.append(path[path.index(t):])
    return found


def _deadlock(d, cycle):
    parts = []
    for i, t in enumerate(cycle):
        before = cycle[i - 1]  # it waits for the lock this thread holds
        parts.append("thread %s holds %s (%s) and waits for %s at %s" % (
            t.name, _name(before.wait), _how(before.holders[0], func=False), _name(t.wait), _place(t.frame)))
    names = [_name(t.wait) for t in cycle]
    return Cause("deadlock", "deadlock in %s: %s" % (label(d), "; ".join(parts)),
                 "take the locks in one order everywhere (e.g. always %s before %s), or guard them with one lock"
                 % (names[-1], names[0]), [d.pid], [t.name for t in cycle])


def _lock(d, t, by_ident):
    """A thread waiting for a lock (not in a cycle): who holds it, and what that thread does."""
    head = "%s: thread %s waits for %s in %s" % (label(d), t.name, _what(t.wait), _where(t))
    holder, facts = _holder(t, by_ident)
    name = _name(t.wait)
    expr = t.wait.name if t.wait.name != "?" else "lock"  # for code in the next step
    if t.handler and (not facts or facts.self or not (facts.ident or facts.gone)):
        # Its own frames or an unknown holder: a handler called again and again while it waits
        # (a repeating timer) can push the interrupted code's frame out of the dump's reach.
        signal, _, handler = t.handler.partition(", ")
        held = "holds the lock (%s)" % _how(facts) if facts and facts.self else "most likely holds the lock"
        return [Cause("lock", "%s: %s is the %s handler, and the code it interrupted %s: a handler runs on top "
                              "of whatever the main thread was doing, so it waits for itself forever"
                      % (head, handler, signal, held),
                      "take no lock in a signal handler: set a flag (or an Event) there and do the work in the main "
                      "loop; an RLock would let the handler see the data half updated",
                      [d.pid], [t.name])]
    if facts and facts.self:
        return [Cause("lock", "%s, which it already holds (%s): a threading.Lock cannot be taken twice by one "
                              "thread, so it waits forever" % (head, _how(facts)),
                      "make %s a threading.RLock, or do not take it again while %s holds it" % (name, facts.func),
                      [d.pid], [t.name])]
    if holder is not None:
        if holder.busy:
            return []  # it waits its turn while the holder computes: contention, not a hang
        text = "%s; thread %s holds it (%s) and %s" % (head, holder.name, _how(facts), _now(holder))
        taken = frames.place(Frame(facts.file, int(facts.line), facts.func)) if facts.how else "?"
        if facts.how == "acquire()":
            step = "make %s release %s on every path (taken at %s); `with %s:` instead of acquire() does that" % (
                facts.func, name, taken, expr)
        elif holder.wait:
            step = "find why thread %s's wait at %s does not end, or move that wait out of the `with %s:` block " \
                   "(%s)" % (holder.name, _place(holder.frame), expr, taken)
        else:
            step = "keep slow or blocking calls out of the `with %s:` block at %s (thread %s is %s there)" % (
                expr, taken, holder.name, holder.doing or "stuck")
        return [Cause("lock", text, step, [d.pid], [t.name, holder.name])]
    if facts and facts.gone:
        return [Cause("lock", "%s, held by a thread that is no longer running (ident %s): a lock its owner never "
                              "released stays locked after the owner ends" % (head, facts.gone),
                      "release %s on every path of the thread that takes it (`with %s:` does)" % (name, expr),
                      [d.pid], [t.name])]
    if not facts or facts.ident or _can_end(t):
        return []  # several holders (a semaphore), one that ended during the dump (the dump shows them), or a
        # live thread whose code refers to it that may yet release it (a semaphore's refiller)
    return [Cause("lock", "%s, held by an unknown thread: no thread's stack shows it taken (an acquire() in a "
                          "function that has returned, or a thread that has ended)" % head,
                  "look for a %s.acquire() whose release() is skipped on some path (an exception, an early "
                  "return); `with %s:` releases on every path" % (expr, expr), [d.pid], [t.name])]


def _import(d, t, by_ident):
    """A thread waiting to import a module another thread of the process is importing: a deadlock
    when the importer waits for that very thread (a thread started and joined at import time, or a
    lock the waiting thread holds), else a wait on an import that does not end."""
    holder, _facts = _holder(t, by_ident)
    if holder is None or holder is t:
        return []
    module = t.wait.name
    head = "%s: thread %s waits to import `%s` (%s), which thread %s is importing" % (
        label(d), t.name, module, _where(t), holder.name)
    if holder.joins and holder.joins.ident == t.ident:
        how = "its top-level code waits in join at %s for thread %s" % (_place(holder.frame), t.name)
    elif holder.wait and _holder(holder, by_ident)[0] is t:
        how = "it waits for %s at %s, which thread %s holds" % (_what(holder.wait), _place(holder.frame), t.name)
    else:
        return [Cause("import", "%s, and thread %s %s" % (head, holder.name, _now(holder)),
                      "find why the import of `%s` does not end in thread %s" % (module, holder.name),
                      [d.pid], [t.name, holder.name])]
    return [Cause("import-deadlock", "%s and cannot finish: %s: a deadlock" % (head, how),
                  "start no thread and wait for none (join, result(), a lock another thread may hold) in a "
                  "module's top-level code: a thread that imports the module (or anything that imports it) "
                  "waits for that import to end; move that code into a function the program calls after the "
                  "import", [d.pid], [t.name, holder.name])]


def _fork_copy(d, t, by_ident, parent):
    """In a child made by fork() without exec, a lock no thread of the child holds was, most likely,
    held by another thread of the parent at the fork: the child's copy stays locked forever."""
    facts = _holder(t, by_ident)[1]
    if facts is None or facts.self or facts.name or not (facts.gone or facts.ident is None):
        return []
    ran = " while thread%s %s ran there" % ("" if parent.fork_threads[0] == 1 else "s", parent.fork_threads[1]) \
        if parent is not None and parent.fork_threads else ""
    return [Cause("fork-lock", "%s: thread %s waits for %s in %s, held by no thread of this process: it was "
                               "made by fork() from pid %d%s, and a lock another thread holds at the fork stays "
                               "locked in the child forever" % (label(d), t.name, _what(t.wait), _where(t),
                                                                 d.ppid, ran),
                  "start the child with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn'), "
                  "DataLoader(multiprocessing_context='spawn')), or fork before starting threads",
                  [d.pid, d.ppid], [t.name])]


def _fork_native(d, t, parent):
    """In a child made by fork() without exec, a thread blocked on a futex in native code (no Python
    lock named, no join), where the parent forked while threads with no Python stack ran (OpenMP's,
    a BLAS's pool): their locks and state were copied held, their threads were not, and the child's
    first parallel call waits for them forever (torch ops in a DataLoader worker forked after the
    parent computed)."""
    native = parent.fork_native if parent is not None else 0
    spin = _spinning(t)
    if not native or t.busy and not spin or d.idle or not spin and "(futex)" not in (t.state or "") or \
            _native_wait_explained(d, t):
        return []
    how = "is spinning inside native code in %s (%d%% of its CPU time in the kernel: a loop yielding to threads " \
          "that do not exist, not arithmetic)" % (_where(t), spin) if spin else \
        "is blocked on a lock inside native code in %s" % _where(t)
    return [Cause("fork-lock", "%s: thread %s %s, which no thread of this process can release: it was made by fork() "
                               "from pid %d while %d thread%s with no Python stack ran there (a native pool: OpenMP, "
                               "BLAS, gRPC), whose locks were copied held and whose threads were not" % (
                                   label(d), t.name, how, d.ppid, native, "" if native == 1 else "s"),
                  "start the child with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn'), "
                  "DataLoader(multiprocessing_context='spawn')), or fork before the parent's first parallel "
                  "computation (a pool starts at its first use: torch.set_num_threads(1) or OMP_NUM_THREADS=1 keeps "
                  "it from starting)", [d.pid, d.ppid], [t.name])]


# Where a futex wait in native code is a wait on a peer or a device, not on a lock fork copied: a
# collective (its Python call, or DDP's from C++ in backward or forward), a GPU's work.
_PEER_SITES = ("/torch/distributed/", "/torch/autograd/", "/torch/nn/parallel/")
_DEVICE_SITES = ("/torch/cuda/",)


SPIN = 50  # percent of a busy thread's CPU time in the kernel that makes it a spin, not a computation


def _spinning(t):
    """A busy thread's share of CPU time in the kernel when it spins there (SPIN or more), else 0."""
    state = notes.first(t.notes, notes.State)
    share = state.in_kernel if state is not None else None
    return share if share is not None and share >= SPIN else 0


def _native_wait_explained(d, t):
    """Evidence of an ordinary reason for a thread's native wait: it waits in a collective (its
    `collective:` note, or a rank's thread under torch.distributed, backward or DDP), or on a GPU
    (torch.cuda's frames, or a process that initialised CUDA)."""
    paths = [f.file.replace("\\", "/") for f in t.frames]
    if t.collective is not None or any(site in p for p in paths for site in _DEVICE_SITES):
        return True
    if any(p.name.startswith("CUDA initialisation") for p in d.phases):
        return True
    return rank_of(d)[0] is not None and any(site in p for p in paths for site in _PEER_SITES)


def _can_end(t):
    """Does the dump name a live thread whose stack refers to what t waits on (runtime/reach.py)? It
    may still put, set, notify, arrive or release: t's wait may end."""
    reach = notes.first(t.notes, notes.CanChange) if t.wait else None
    return reach is not None and not reach.none


def _flush_for_parent(d, t, by_ident, parent):
    """Does t wait for its multiprocessing Queue's feeder thread to flush into a pipe, while the
    parent waits for this process to end? The parent's queue-join cause tells that deadlock whole."""
    target = by_ident.get(t.joins.ident)
    if target is None or not any(f.function == "_feed" and frames.is_file(f.file, "multiprocessing/queues.py")
                                 for f in target.frames):
        return False
    stall = parent.stall if parent is not None else None
    return bool(stall) and any(c.pid == d.pid for pt in stall.threads for c in notes.every(pt.notes, notes.Child))


def _join(d, t, by_ident, in_cycle):
    target = by_ident.get(t.joins.ident)
    if target is None or target.busy or target.sleeping or idle.serves(target) or _can_end(target):
        return []  # it ended, computes, idles in a sleep loop, serves, or waits for what a live thread can
        # still bring: joining it is waiting, not stuck
    if t.main and _exiting(t):
        return []  # Python's own join at exit: the shutdown cause tells it
    if target.ident in in_cycle:
        now, step = "which is in the deadlock above", "end the deadlock above"
    else:
        now = "which %s" % (_now(target)[len("itself "):] if target.wait else _now(target))
        step = "find why thread %s does not finish: it %s" % (target.name, now[len("which "):])
    if any(f.function == "shutdown" and f.file.endswith(_POOL_FILE) for f in t.frames):
        return [_pool_shutdown(d, t, target, now)]
    return [Cause("join", "%s: thread %s waits in join at %s for thread %s, %s" % (
        label(d), t.name, _place(t.frame), target.name, now),
        "%s; join(timeout=...) with is_alive() lets the caller notice" % step, [d.pid], [t.name, target.name])]


def _pool_shutdown(d, t, task, now):
    """A ThreadPoolExecutor's shutdown(wait=True), at the end of its `with` block as a rule, waits
    for its running tasks: one that waits on a queue, event or condition of the program's waits for
    what the shut-down thread would have done next (the sentinel it puts after the block)."""
    block = any(f.function == "__exit__" and f.file.endswith(_POOL_BASE) for f in t.frames)
    head = "%s: thread %s waits at %s for a ThreadPoolExecutor's running task (%s waits for its tasks to " \
        "end): thread %s, %s" % (label(d), t.name, _place(t.frame), "leaving its `with` block, shutdown(wait=True)"
                                 if block else "shutdown(wait=True)", task.name, now)
    if task.wait and task.wait.kind in _IN_PROCESS:
        step = "give the task what it waits for (the items, a sentinel, the event's set()) before %s, or give its " \
               "wait a timeout: nothing %s does after %s reaches it" % (
                   "the `with` block ends" if block else "shutdown()", "thread " + t.name,
                   "the block" if block else "shutdown()")
    else:
        step = "find why the task does not return: it %s; `shutdown(wait=False, cancel_futures=True)` leaves " \
               "a running task behind instead of waiting" % now[len("which "):]
    return Cause("join", head, step, [d.pid], [t.name, task.name])


def _starved(d, threads):
    """Every worker of a ThreadPoolExecutor waits for a future, one for a future no worker has
    started: work waiting for its own pool, which has no worker left to run it."""
    pools = {}
    for t in threads:
        m = _POOL_WORKER.match(t.name)
        if m and _pool_worker(t):
            pools.setdefault(m.group(1), []).append(t)
    out = []
    for pool, workers in sorted(pools.items()):
        if not all(w.wait and w.wait.kind == "future" and not w.busy for w in workers):
            continue
        w = next((w for w in workers if w.wait.detail == "not started"), None)
        if w is None:
            continue
        n = len(workers)
        head = "the only worker of %s waits for a future, so it can start no other work" % pool if n == 1 else \
            "%s of %s wait for futures, so none can start other work" % (
                "both workers" if n == 2 else "all %d workers" % n, pool)
        out.append(Cause(
            "pool-starved", "%s: %s: thread %s waits in %s for the result of %s, which no worker has started; if "
            "it was submitted to this pool, it waits for a free worker that never comes" % (
                label(d), head, w.name, _where(w), _what(w.wait)),
            "do not wait inside a task for another task of the same pool: submit the inner work to a "
            "separate executor, return its future for the caller to wait on, or raise max_workers above "
            "the depth of the nesting", [d.pid], [t.name for t in workers]))
    return out


def _shutdown(d, threads):
    """The main thread in threading._shutdown: the program's code is done; non-daemon threads keep
    the process alive, or (from the atexit hook threading runs there) a ThreadPoolExecutor's
    running tasks, which Python waits for at exit."""
    main = next((t for t in threads if t.main), None)
    if main is None or not _exiting(main):
        return []
    keep = [t for t in threads if not t.main and t.daemon is False]
    if not keep:
        return []
    if any(f.function == "_python_exit" and f.file.endswith(_POOL_FILE) for f in main.frames):
        tasks = "; ".join("thread %s %s" % (t.name, _now(t)[len("itself "):] if t.wait else _now(t)) for t in keep[:3])
        return [Cause("shutdown", "%s: the program's main code has finished, but at exit Python waits for the "
                                  "running task%s of a ThreadPoolExecutor: %s" % (
                                      label(d), "" if len(keep) == 1 else "s", tasks),
                      "make the task return (a timeout on its wait, an Event it checks): an executor's running "
                      "tasks are waited for at exit, and `shutdown(cancel_futures=True)` drops only those not yet "
                      "started", [d.pid], [t.name for t in keep])]
    names = ", ".join("thread " + t.name for t in keep[:3]) + (" and %d more" % (len(keep) - 3) if keep[3:] else "")
    where = "; ".join("%s is in %s%s" % (t.name, _where(t), " (%s)" % t.doing if t.doing else "")
                      for t in keep[:3])
    return [Cause("shutdown", "%s: the program's main code has finished, but non-daemon %s keep%s the process "
                              "alive: %s" % (label(d), names, "s" if len(keep) == 1 else "", where),
                  "create %s with daemon=True, or make %s stop (e.g. an Event it checks) before the main code "
                  "ends" % (names, "it" if len(keep) == 1 else "them"), [d.pid], [t.name for t in keep])]


def _exiting(t):
    """Is the thread in threading._shutdown (the main thread after the program's code ended)?"""
    return any(f.function == "_shutdown" and os.path.basename(f.file) == "threading.py" for f in t.frames)


def _deaths(d, p, threads):
    """A thread that died of an exception while the others wait (on a queue, an event, a join)."""
    alive = {t.name for t in threads}
    waiting = sorted((t for t in threads if not t.busy and (t.joins or t.wait and t.wait.kind not in _LOCKS)),
                     key=lambda t: not t.main)
    out = []
    for death in p.deaths[-3:]:
        if death.thread in alive or not waiting:
            continue
        w, frame = waiting[0], frames.user_frame(death.frames)
        since = d.stall.since
        when = "%s after start" % secs(death.time - p.first) if None not in (death.time, p.first) else ""
        if not (p.stall is not None and p.stall.noisy):  # (while others print, no moment of silence to measure from)
            gap = since - death.time if None not in (since, death.time) else 0
            when += (", " if when else "") + ("%s before the process went silent" % secs(gap) if gap >= 0.1 else
                                              "just before the process went silent")
        when = when or "at a moment not known"
        waits = "in join for thread %s" % w.joins.name if w.joins else "for %s" % _waiting_on(w.wait)
        if death.text.startswith("SystemExit"):
            out.append(_thread_exit(d, death, frame, when, w, waits))
            continue
        out.append(Cause("thread-died", "%s: thread %s died with %s in %s, %s; thread %s has waited since, %s at %s"
                         % (label(d), death.thread, first_line(death.text), frames.where(frame), when, w.name, waits,
                            _place(w.frame)),
                         "fix the %s in %s; to fail fast instead of hanging, give the wait a timeout (%s) and "
                         "check the worker's is_alive()" % (death.text.partition(":")[0], frames.where(frame),
                                                            _timed(w)),
                         [d.pid], [death.thread, w.name]))
    return out


def _thread_exit(d, death, frame, when, w, waits):
    """sys.exit() called in a thread: it ends only that thread (threading says nothing of it), and
    the main thread waits for work the thread will never do."""
    code = death.text.partition(":")[2].strip()
    return Cause("thread-exit", "%s: thread %s called sys.exit(%s) in %s (%s): in a thread that ends only the "
                 "thread, silently, not the process; thread %s has waited since, %s at %s" % (
                     label(d), death.thread, code, frames.where(frame), when, w.name, waits, _place(w.frame)),
                 "to end the program from a thread, tell the main thread (put a sentinel or the error on the queue, "
                 "set an Event) and exit there; give the wait a timeout and check the thread's is_alive()",
                 [d.pid], [death.thread, w.name])



def _unmarked(d, threads):
    """Queue.join() on an empty queue whose consumers wait for more: items were got without
    task_done() (an exception or a `continue` skipped it), so the join never returns."""
    out = []
    for t in threads:
        if not (t.wait and t.wait.kind == "queue" and t.wait.unfinished):
            continue
        getters = [o for o in threads if o is not t and o.wait and o.wait.kind == "queue"
                   and o.wait.name.rpartition(".")[2] == t.wait.name.rpartition(".")[2]
                   and o.wait.detail == "get"]
        if not getters and t.wait.name == "?":
            continue
        consumers = "; its consumer%s %s wait%s in get() for more (%s)" % (
            "" if len(getters) == 1 else "s", ", ".join("thread " + g.name for g in getters[:3]),
            "s" if len(getters) == 1 else "", ", ".join(_where(g) for g in getters[:3])) if getters else ""
        out.append(Cause(
            "task-done", "%s: thread %s waits in join() at %s for %s unfinished item%s of %s, which is empty%s: "
            "an item was got without task_done(), so join() never returns" % (
                label(d), t.name, _place(t.frame), t.wait.unfinished, "" if t.wait.unfinished == 1 else "s", _what(t.wait),
                consumers),
            "call task_done() once for every get(), in a `finally:` so that an exception or a `continue` "
            "cannot skip it", [d.pid], [t.name] + [g.name for g in getters]))
    return out


def _unset(d, threads):
    """A Future no worker has started, waited on in a process with no executor's worker thread: a
    Future made by hand whose result nothing is left to set (or an executor already shut down)."""
    if any(_POOL_WORKER.match(t.name) or any("concurrent/futures/" in f.file for f in t.frames)
           for t in threads if not t.wait or t.wait.kind != "future"):
        return []  # an executor's work (a thread pool's worker, a process pool's manager): it may yet run it
    return [Cause(
        "future-unset", "%s: thread %s waits in result() at %s for %s, which no executor runs: only a call of "
        "its set_result() can end the wait, and none has come" % (label(d), t.name, _place(t.frame), _what(t.wait)),
        "find the code meant to call set_result() on it (a reply that never came, a callback never "
        "registered, a request never sent), and give result() a timeout so a lost reply becomes an error",
        [d.pid], [t.name]) for t in threads
        if t.wait and t.wait.kind == "future" and t.wait.detail == "not started" and not t.busy and not _can_end(t)]


# What a thread can wait on that only another thread of its process ends (a queue.Queue, a
# threading Event, Condition or Barrier; a multiprocessing queue waits on a pipe or a lock instead).
_IN_PROCESS = ("queue", "event", "condition", "barrier")


def _stranded(d, threads, failed=()):
    """Every thread of the program waits for another (an item from a queue or room in one, a
    notify, an event, the rest of a barrier's parties, a join), two or more on such objects (one, and
    the threads joining it, is the join cause's chain), and none computes, sleeps, polls
    with a timeout or waits outside the process: nothing is left to wake them. An executor's idle
    worker waits for a task the program has not submitted: beside one, a single thread waiting is
    enough, and the task that was to wake it has ended: one that raised (`failed`: the newest is
    named; its exception is kept in its Future, never printed), or returned without it. Not told
    where a signal handler of the program's could wake one (a handler setting the Event, any
    handler installed), nor for a process idle by its stacks."""
    mine = [t for t in threads if not t.name.startswith("earlylog")]
    workers = [t for t in mine if _idle_worker(t)]
    rest = [t for t in mine if t not in workers]
    waiting = [t for t in rest if t.wait and t.wait.kind in _IN_PROCESS and t.wait.detail != "join"]
    joining = [t for t in rest if t.joins and not t.wait]
    if d.idle or len(waiting) < (1 if workers else 2) or len(waiting) + len(joining) != len(rest) or \
            any(t.busy or t.sleeping or t.wakeable for t in mine):
        return []
    rest.sort(key=lambda t: not t.main)
    each = "; ".join("thread %s %s" % (t.name, "waits in join for thread %s" % t.joins.name if t in joining else
                                       "waits for %s in %s" % (_waiting_on(t.wait), _where(t))) for t in rest[:4])
    more = " (and %d more)" % (len(rest) - 4) if len(rest) > 4 else ""
    raised = failed[-1] if workers and failed else None
    raised_at = frames.where(frames.user_frame(raised.frames)) if raised else None
    if workers:
        each += "; %s %s an executor's idle worker%s: no task of %s runs" % (
            ", ".join("thread " + t.name for t in workers[:3]) + (" and %d more" % (len(workers) - 3) if workers[3:]
                                                                  else ""), "is" if len(workers) == 1 else "are",
            "" if len(workers) == 1 else "s", "its" if len(workers) == 1 else "theirs")
        if raised:
            each += "; a task on thread %s raised %s in %s, kept in its Future (never printed)" % (
                raised.thread, first_line(raised.text), raised_at)
    kinds = {t.wait.kind for t in waiting}
    wakes = " or ".join(sorted({_wakes(t.wait) for t in waiting}))
    step = "a notify() that came before the wait began is lost: wait for the state itself, `cv.wait_for(lambda: " \
           "ready)`; " if "condition" in kinds else ""
    if raised:
        step += "fix the %s in %s, which ended the task meant to %s; read each task's Future (`future.result()` " \
                "raises what the task raised) so the next failure shows, and give the wait a timeout (%s)" % (
                    raised.text.partition(":")[0], raised_at, wakes, _timed(waiting[0]))
    elif workers:
        step += "the executor's task meant to %s has ended without it: read its Future (`future.result()` raises " \
                "what the task raised; an exception in a task is kept in its Future, never printed), and give the " \
                "wait a timeout (%s) so that a lost wake-up becomes an error" % (wakes, _timed(waiting[0]))
    else:
        step += "find the thread meant to %s (%s), and give the wait a timeout (%s) so that a lost wake-up becomes " \
                "an error" % (wakes, "one that ended early, a sentinel never sent, fewer items put than got"
                              if "queue" in kinds else "one that ended early or never started", _timed(waiting[0]))
    return [Cause("stranded", "%s: every thread waits for another, and none is left to wake them: %s%s" % (
        label(d), each, more), step, [d.pid], [t.name for t in rest + workers])]


def _idle_worker(t):
    """A ThreadPoolExecutor's worker between tasks: waiting on its pool's work queue in _worker."""
    return bool(t.wait) and t.wait.kind == "queue" and t.wait.detail != "put" and _pool_worker(t)


def _pool_worker(t):
    """A ThreadPoolExecutor's worker thread: its stack runs the pool's _worker loop."""
    return any(f.function == "_worker" and f.file.endswith(_POOL_FILE) for f in t.frames)


def _wakes(wait):
    """What the thread that was to wake this wait does: `put into queue `results``."""
    return {"queue": ("get from %s" if wait.detail == "put" else "put into %s") % _what(wait),
            "event": "set %s" % _what(wait), "condition": "notify %s" % _what(wait),
            "barrier": "reach %s" % _what(wait)}[wait.kind]


def _timed(t):
    """A thread's wait as the program would write it with a timeout: `queue.put(timeout=...)`."""
    if t.joins:
        return "join(timeout=...)"
    kind = t.wait.kind
    if kind == "queue":
        return "queue.%s(timeout=...)" % ("put" if t.wait.detail == "put" else "get")
    return {"future": "result(timeout=...)", "event": "wait(timeout=...)", "condition": "wait(timeout=...)",
            "barrier": "wait(timeout=...)"}.get(kind, "e.g. queue.get(timeout=...)")


def _waiting_on(wait):
    what = _what(wait)
    return {"queue": ("room in %s" if wait.detail == "put" else "an item from %s") % what,
            "condition": "a notify on %s" % what, "future": "the result of %s" % what,
            "barrier": "the other parties at %s" % what}.get(wait.kind, what)


# --- C code holding the GIL ------------------------------------------------------------------

def _gil(d, p):
    threads = [t for t in p.stall.threads if t.frames]
    t = next((t for t in threads if t.main), threads[0] if threads else None)
    if t is None:
        return []
    call = _c_call(t.frames)
    hint = " (a regular expression with nested repeats, such as (a+)+, can backtrack for hours)" \
        if call and call.startswith("re.") else ""
    return [Cause("gil", "%s: C code has held the GIL for at least %s, so no other thread could run (earlylog's "
                         "watchdog neither; this stack is faulthandler's): thread %s is in %s, called from %s" % (
                             label(d), secs(p.gil.seconds), t.name, call or "a C function", frames.where(t.frame)),
                  "find what keeps %s busy at %s%s; `py-spy dump --native --pid %d` shows its C frames" % (
                      call or "the C call", _place(t.frame), hint, d.pid), [d.pid], [t.name])]


def _c_call(stack):
    """`re.match` for the innermost frame when it is a library's, else None (the C call is then
    on the user's own line)."""
    if not stack or not frames.library(stack[0].file):
        return None
    m = _MODULE.search(stack[0].file)
    if m is None:
        return stack[0].function
    module = (m.group(1) or m.group(2)).replace("/", ".")
    return "%s.%s" % (module[:-len(".__init__")] if module.endswith(".__init__") else module, stack[0].function)


# --- crashes ---------------------------------------------------------------------------------

def _overflow(d, p):
    """A stack whose innermost function, or cycle of a few functions, repeats far down is a stack
    overflow: in a crash (faulthandler writes 100 frames, then `...`) or a RecursionError's traceback."""
    if p.crash is not None:
        crashed = next((t for t in p.crash.threads if t.header.startswith("Current thread")), None)
        if crashed is None:
            return []
        stack, name, cut, ending = crashed.frames, crashed.name, "..." in crashed.notes, "the " + p.crash.what
        depth, cycle = _repeats(stack)
    elif p.exception is not None and p.exception.text.startswith("RecursionError"):
        stack, name, cut, ending = p.exception.frames, "MainThread", p.exception.cut > 0, p.exception.text
        depth, cycle = _repeats(stack)
    else:
        return []
    cut = cut or depth >= len(stack)  # no caller below the cycle: the record ends inside it
    if p.crash is None:
        depth += p.repeated  # `[Previous line repeated N more times]`
    if depth < OVERFLOW:
        return []
    # The recursive call: the line the cycle's frames stand on most often (the innermost may be
    # the function's first line, where the crash caught it entering).
    calls = [f for f in stack[:depth] if f.function == cycle[0].function and f.file == cycle[0].file]
    top = max(calls, key=calls.count)
    through = " (through %s)" % ", ".join(f.function for f in cycle[1:]) if len(cycle) > 1 else ""
    return [Cause("stack-overflow", "%s: stack overflow: %s%s recursed %s%d deep, until %s" % (
        label(d), frames.where(top), through, "at least " if cut else "", depth, ending),
        "make %s iterative, or bound its depth (%s)%s" % (
            top.function, _place(top), "; a sys.setrecursionlimit above what the C stack holds turns a RecursionError "
                                 "into this crash" if p.crash is not None else ""),
        [d.pid], [name])]


def _repeats(stack):
    """(how many frames from the innermost repeat one cycle of functions, that cycle's frames):
    one function calling itself, or a few calling each other round (visit > generic_visit)."""
    keys = [(f.file, f.function) for f in stack]
    best = (min(1, len(stack)), stack[:1])
    for k in range(1, 6):
        n = k
        while n < len(keys) and keys[n] == keys[n - k]:
            n += 1
        if n >= 2 * k and n > best[0]:
            best = (n, stack[:k])
    return best


# --- processes that all ended at one moment --------------------------------------------------

def _run_stopped(report, folder):
    """Processes that vanished or were killed at the same moment are one cause (a job stopped
    from outside), not one "likely SIGKILL" per process. Each ended between its last line and the
    moment its next line was due: a stalled one's next dump (at twice its silence), any other's
    first stall dump."""
    ended = []
    for d in report.processes:
        p = folder.procs.get((d.host, d.pid))
        if d.state not in ("vanished", "killed") or p is None or d.last_seen is None:
            continue
        late = p.stall_after or records.DEFAULT_STALL
        if d.stall and d.stall.since is not None:
            late = max(late, d.last_seen - d.stall.since)
        ended.append((d.last_seen, d.last_seen + max(late, MOMENT), d))
    group = max(([e for e in ended if e[0] <= lo <= e[1]] for lo, _, _ in ended), key=len, default=[])
    if len(group) < 2:
        return []
    procs = [d for _, _, d in group]
    clock = time.strftime("%H:%M:%S", time.localtime(max(lo for lo, _, _ in group)))
    whole = not [d for d in report.processes if d.status is None and d.state != "terminated"
                 and d not in procs]
    head = "the whole run was stopped at %s: %d processes at once" % (clock, len(procs)) if whole else \
        "%d processes were stopped at once at %s" % (len(procs), clock)
    pids = ", ".join(str(d.pid) for d in procs[:8]) + (", ..." if procs[8:] else "")
    oom = [d for d in procs if d.memory and (d.memory.oom_kill_rose or d.memory.near_limit)]
    if oom:
        return [Cause("run-stopped", "%s (pids %s), after %s's memory breadcrumbs showed the cgroup's memory "
                                     "full or its OOM killer at work: likely the kernel's OOM killer"
                      % (head, pids, label(oom[0])),
                      "lower the memory use (batch size, workers, cached data) or raise the job's memory limit; "
                      "confirm with `dmesg -T | grep -i oom` on that host", [d.pid for d in procs], [])]
    how = "by SIGTERM" if all(d.state == "killed" for d in procs) else "none with an exit record"
    return [Cause("run-stopped", "%s (pids %s), %s" % (head, pids, how),
                  "that came from outside the processes: check the job scheduler's record (a time limit, a "
                  "cancel, a preemption) or what killed the process group; `dmesg -T | grep -i oom` rules the "
                  "OOM killer in or out", [d.pid for d in procs], [])]


def _first_failure(report):
    """Ranks of a job, or processes of one parent, running side by side that failed one after the
    other: the first failure is the one to fix; the later ones (a peer's connection closed, a
    collective aborted) most likely follow from it."""
    groups = {}
    for d in report.processes:
        if d.state in ("failed", "crashed") and d.end is not None:
            key = ("ranks", d.job) if d.rank is not None else (d.host, d.ppid)
            groups.setdefault(key, []).append(d)
    out = []
    for group in groups.values():
        group.sort(key=lambda d: d.end)
        first = group[0]
        # Only peers that ran beside it: a process started after it ended did not follow from it.
        rest = [d for d in group[1:] if d.end - first.end <= FOLLOW and (d.start or 0) <= first.end]
        if not rest or rest[0].end - first.end < APART:
            continue  # alone, or no one failed first: nothing follows from anything
        then = "; ".join("%s %s after it (%s)" % (label(d), secs(d.end - first.end), _short(_failure(d)))
                         for d in rest[:3]) + ("; and %d more" % (len(rest) - 3) if rest[3:] else "")
        out.append(Cause("first-failure", "%s failed first: %s; then %s" % (label(first), _failure(first), then),
                         "fix the error of %s first: the later failures most likely follow from it (a peer "
                         "that stopped answering)" % label(first), [first.pid] + [d.pid for d in rest], []))
    return out


def _failure(d):
    """`ValueError: bad shard in load at x.py:8`, or `Segmentation fault in f at x.py:3`."""
    return d.summary.partition(": ")[2] if d.state == "crashed" else \
        d.summary.partition(" after ")[2].partition(": ")[2] or d.summary


def _short(text):
    """A failure in under 100 characters, without the source path a C++ library's message may
    start with (`RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer`)."""
    text = re.sub(r"^(\w+: )\[[^\]]*\]\s*", r"\1", text)
    return text if len(text) <= 100 else text[:97] + "..."


# --- words -----------------------------------------------------------------------------------

def _name(wait):
    """`cache_lock` as the code names it, or `an unnamed lock`."""
    return "`%s`" % wait.name if wait.name != "?" else "an unnamed %s" % wait.kind


def _how(facts, func=True):
    """`with block at x.py:6 in f` or `acquired in f at x.py:10, never released since`."""
    if not facts or not facts.how:
        return "where is not known"
    place = frames.place(Frame(facts.file, int(facts.line), facts.func))
    if facts.how == "with block":
        return "with block at %s%s" % (place, " in " + facts.func if func else "")
    return "acquired%s at %s, never released since" % (" in " + facts.func if func else "", place)
