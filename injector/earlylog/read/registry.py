"""The causes the report can name, in one place: each kind of cause (the id reports and --json
show), its level (a thread, a process, the run), the name and sentence docs/causes.md gives it,
the kinds it supersedes, and the finder that looks for it; the stories the verdict tells as lines
of their own (LINES); and the one loop that runs the finders over a judged report (verdict.py
calls `find`). Adding a cause is one entry here and its test; tests/test_docs.py holds
docs/causes.md to this list.

It owns the order finders run in and the rule of supersession; the finders own the evidence (their
bodies stay in thread_causes.py, process_causes.py, async_causes.py, acted.py). It only reads the
judged report and the folder: it never writes, and a finder that fails costs only its own room's
causes (one line in the report's problems)."""
from earlylog.read import acted, async_causes, object_causes, process_causes, rank_causes, thread_causes

THREAD, PROCESS, RUN = "thread", "process", "run"
ALL = "*"  # supersedes every cause read from its process's dump: it is told alone


class Kind:
    """A kind of cause: `kind` (its id), `level` (THREAD: found in one thread's wait; PROCESS: a
    process and those around it, children, pipes, peers; RUN: the whole run, told after the
    rest), `title` (its name in docs/causes.md), `doc` (what it means, for users), and
    `supersedes`: kinds it outranks. Where both are found in one process's dump and the cause
    superseded concerns a thread the superseding one names (a lock wait inside a deadlock), only
    the superseding one is told; a waiter finder skips a parent and child pair that a cause found
    before it, of a kind that supersedes its own, told; and the verdict tells no line of LINES a
    cause that supersedes it names (a whole run stopped: no "likely SIGKILL" for each process)."""
    __slots__ = ("kind", "level", "title", "doc", "supersedes")

    def __init__(self, kind, level, title, doc, supersedes=()):
        self.kind, self.level, self.title, self.doc, self.supersedes = kind, level, title, doc, tuple(supersedes)


class Finder:
    """A function that looks for causes, and how it is run (`scan`):
    "run": fn(report, folder), once;
    "process": fn(stall), for each process with a log here (stall: thread_causes.Stall);
    "stall": fn(stall), for each process that stalled;
    "thread": fn(stall, t), for each thread of a stalled process's last dump;
    "waiter": fn(seen, told), for each thread of the processes `among(report)` returns (only those
    still stalled at the end when `live`), see process_causes.waiting.
    `causes`: the kinds it finds, each a Kind, or the id of one an earlier finder declares."""
    __slots__ = ("fn", "scan", "causes", "among", "live")

    def __init__(self, fn, scan, *causes, among=None, live=False):
        self.fn, self.scan, self.causes, self.among, self.live = fn, scan, causes, among, live


_PER_PROCESS = ("process", "stall", "thread")
# The causes in the state of an object threads wait on: a finished program's wait at exit tells them whole.
_OBJECT_KINDS = ("barrier-short", "semaphore-drained", "lost-wakeup", "condition-unnotified", "queue-orphaned",
                 "event-unset", "future-orphaned", "async-unset")
# The waiters' kinds whose finders skip a pair already told, in the order their finders last run.
_PAIRS = ("queue-join", "pipe-held", "child-died", "shared-lock", "pipe-deadlock", "pipe-full", "child")

# In the order the finders run, which is the order the report lists their causes (RUN causes last).
FINDERS = (
    Finder(acted.find, "run", Kind(
        "stall-exit", PROCESS, "ended by earlylog",
        "EARLYLOG_STALL_EXIT ended a stuck process with status 124 (where it was stuck, for how long; for a torchrun "
        "rank, whether the next attempt ran): a restart hides the hang, it does not fix it.",
        supersedes=["trouble"])),
    # --- one process's last dump (thread_causes.py) ---
    Finder(thread_causes.gil, "stall", Kind(
        "gil", THREAD, "GIL held",
        "C code held the GIL for S seconds, so no other thread ran: that C call (a regex, a C extension) is the "
        "culprit.", supersedes=[ALL])),
    Finder(thread_causes.deadlocks, "stall", Kind(
        "deadlock", THREAD, "deadlock",
        "Two threads each hold a lock the other wants; both frames shown: take the locks in one order.",
        supersedes=["lock", "fork-lock"])),
    Finder(thread_causes.starved, "stall", Kind(
        "pool-starved", THREAD, "starved thread pool",
        "Every worker of a ThreadPoolExecutor waits for a future no worker has started: a task waits for work "
        "queued behind it in its own pool.", supersedes=["future-unset"])),
    Finder(thread_causes.imports, "thread", Kind(
        "fork-lock", THREAD, "lock copied by fork",
        "A child made by fork() waits for a lock no thread of its own holds, which the parent's other threads (or "
        "a native pool's) held at the fork: use the spawn or forkserver start method, or fork before starting "
        "threads.",
        supersedes=["import-deadlock", "import", "lock"]), Kind(
        "import-deadlock", THREAD, "import deadlock",
        "A thread waits to import a module another thread is importing, and that thread waits for the first: "
        "start no thread and wait for none at import time.", supersedes=["lock", "join"]), Kind(
        "import", THREAD, "import that does not end",
        "A thread waits to import a module another thread is importing, and that import does not end: the other "
        "thread's frame says why.")),
    # --- the state of the object threads wait on, and who can still change it (object_causes.py) ---
    Finder(object_causes.find, "stall", Kind(
        "barrier-short", THREAD, "barrier that can never trip",
        "K of a barrier's N parties wait in wait() and no other live thread refers to the barrier: the last "
        "parties never come. Make it for as many parties as threads that call wait(), with a timeout.",
        supersedes=["join", "stranded"]), Kind(
        "semaphore-drained", THREAD, "semaphore drained by failures",
        "A semaphore has no permit free, no thread holds one and no other live thread refers to it: acquire()s "
        "whose release() never came (the failures the program reported before the wait are quoted). Release on "
        "every path: `with sem:`.", supersedes=["lock", "join", "stranded"]), Kind(
        "lost-wakeup", THREAD, "lost wakeup",
        "A thread waits in Condition.wait() without a predicate and no other live thread refers to the condition: "
        "a notify made before the wait began was lost. Wait with wait_for(predicate).",
        supersedes=["join", "stranded"]), Kind(
        "condition-unnotified", THREAD, "condition nothing can notify",
        "A thread waits in Condition.wait_for() and no other live thread refers to the condition: nothing can "
        "make its predicate true.", supersedes=["join", "stranded"]), Kind(
        "queue-orphaned", THREAD, "queue nothing can fill",
        "A thread waits in get() on a queue that no other live thread refers to: its producer ended (a return, "
        "an exception it caught). Put a sentinel on every path out of the producer.",
        supersedes=["join", "stranded"]), Kind(
        "event-unset", THREAD, "event nothing can set",
        "A thread waits for an Event that is not set and that no other live thread refers to: nothing can set "
        "it.", supersedes=["join", "stranded"]), Kind(
        "future-orphaned", THREAD, "asyncio Future nothing can complete",
        "An asyncio task awaits a bare Future that no other task, callback, watched reader or thread refers to: "
        "nothing can complete it (a dropped reply). Await it under asyncio.wait_for() with a timeout.",
        supersedes=["loop-blocked"]), Kind(
        "async-unset", THREAD, "asyncio Event, Condition or Queue nothing can change",
        "An asyncio task awaits an asyncio Event, Condition or Queue (get) in its own code that no other task, "
        "callback, watched reader or thread refers to: nothing can set, notify or fill it.",
        supersedes=["loop-blocked"])),
    Finder(thread_causes.waits, "thread", Kind(
        "lock", THREAD, "lock held by thread X",
        "A thread waits for a lock: its name, and the holder's frame (or why no thread holds it): look at why the "
        "holder keeps it."), "fork-lock", Kind(
        "join", THREAD, "join",
        "A thread waits in join() for thread X, which is stuck where shown: fix X.")),
    Finder(thread_causes.shutdown, "stall", Kind(
        "shutdown", THREAD, "program finished, a thread keeps it alive",
        "The main code ended and a non-daemon thread runs on (or a ThreadPoolExecutor's task, which Python waits "
        "for at exit): stop it or make it daemon=True.", supersedes=_OBJECT_KINDS)),
    Finder(thread_causes.deaths, "stall", Kind(
        "thread-died", THREAD, "dead thread",
        "A thread died with an exception while others wait for its work: read its traceback.",
        supersedes=["stranded"]), Kind(
        "thread-exit", THREAD, "sys.exit() in a thread",
        "A thread called sys.exit(), which ends only that thread, silently, while the main thread waits for its "
        "work: tell the main thread and exit there.", supersedes=["stranded"])),
    Finder(thread_causes.unmarked, "stall", Kind(
        "task-done", THREAD, "task_done() missing",
        "A thread (or an asyncio task) waits in Queue.join() for unfinished items of an empty queue while its "
        "consumers wait for more: an item was got without task_done().", supersedes=["stranded"])),
    Finder(thread_causes.unset, "stall", Kind(
        "future-unset", THREAD, "future nobody sets",
        "A thread waits in result() for a Future no executor runs: only its set_result() can end the wait.")),
    Finder(thread_causes.stranded, "stall", Kind(
        "stranded", THREAD, "nothing left to wake the threads",
        "Every thread waits for another (a queue, an event, a condition, a barrier, a join) and none runs, sleeps "
        "or waits outside the process (an executor's idle worker waits for work: a task that raised left it so): "
        "nothing is left to wake them.", supersedes=["join"])),
    Finder(thread_causes.hub, "stall", Kind(
        "greenlet", THREAD, "greenlet waits",
        "In a gevent program, the greenlet that waits (on a lock another greenlet holds, an Event nothing sets, a "
        "Queue nothing fills, a silent socket), at its own line.")),
    Finder(thread_causes.overflow, "process", Kind(
        "stack-overflow", THREAD, "stack overflow",
        "A function recursed N deep (by itself or through a few others) and crashed or raised RecursionError: "
        "bound the recursion.")),
    # --- the run, from all processes ---
    Finder(thread_causes.run_stopped, "run", Kind(
        "run-stopped", RUN, "whole run stopped",
        "N processes ended at the same moment: a scheduler limit or a kill from outside, not N separate "
        "failures.", supersedes=["vanished"])),
    Finder(thread_causes.first_failure, "run", Kind(
        "first-failure", RUN, "first failure",
        "Rank R failed first and the other ranks failed after it: fix R's error; the rest follow from it.")),
    # --- the ranks of a distributed job, by the collective each waits in (rank_causes.py) ---
    Finder(rank_causes.find, "run", Kind(
        "ranks-differ", RUN, "ranks in different collectives",
        "The ranks of a group wait in different collectives, or at different ordinals (each rank's collective, "
        "its ordinal in the group and its training step are named): none can return. Most often a rank ran out "
        "of batches and left its loop while the others began another step, or a collective runs under a rank "
        "condition: give every rank the same batches (DistributedSampler(drop_last=True), DDP's join()), call "
        "each collective on every rank.", supersedes=["trouble", "straggler"]), Kind(
        "collective-stuck", RUN, "no rank returns from a collective",
        "Every rank of the job waits in the same collective at the same ordinal and none returns: the transport "
        "(the network between hosts, NCCL), not the program's order of calls.", supersedes=["trouble", "straggler"]),
        Kind(
        "p2p-unmatched", RUN, "send and recv unmatched",
        "Two ranks both wait in recv from each other (or both in send): the counts of sends and receives on that "
        "pair say whose send is missing; pair each recv with a send.", supersedes=["trouble", "straggler"])),
    # --- asyncio (async_causes.py) ---
    Finder(async_causes.find, "run", Kind(
        "loop-blocked", THREAD, "event loop blocked",
        "A coroutine or callback makes a synchronous call that blocks, so the asyncio loop runs no other task: "
        "await an async call, or run it in a thread.")
        , Kind(
        "task-lock", THREAD, "asyncio lock held",
        "An asyncio task waits for an asyncio.Lock that it holds itself, which never ends since "
        "asyncio's locks are not reentrant, or that another task holds while waiting for something else.")
        , "task-done", Kind(
        "task-died", THREAD, "dead task",
        "An asyncio task died with an exception nobody retrieved while another task waits for what it would have "
        "produced: fix the error, and await the task.")),
    # --- processes and the processes around them (process_causes.py) ---
    Finder(process_causes.killed_children, "run", Kind(
        "child-killed", PROCESS, "child killed while its parent waits",
        "A child was killed by a signal (the OOM killer, kill -9) while its parent waited for it without a time "
        "limit: find the killer, and have the parent check the child's status.", supersedes=["trouble"])),
    Finder(process_causes.retries, "run", Kind(
        "retrying", THREAD, "retrying",
        "A thread keeps failing the same way and sleeping between tries (a refused connect): it is not idle; fix "
        "what fails, and give the loop a limit.")),
    # Each waiter finder reads every blocked thread before the next one starts. The kinds of _PAIRS
    # tell a parent and child pair only where no cause found before them told it (their finders
    # consult `told`): each kind supersedes those of _PAIRS whose finders run with or after its own.
    Finder(process_causes._read_deadlock, "waiter", Kind(
        "pipe-deadlock", PROCESS, "pipe deadlock",
        "A parent waits for a child (or reads its output) while the child is blocked on a stdout=PIPE or "
        "stdin=PIPE the parent never serves: use communicate().",
        supersedes=_PAIRS),
        among=process_causes.stuck),
    Finder(process_causes._stdin, "waiter", Kind(
        "stdin", PROCESS, "stdin prompt",
        "Blocked reading a stdin that is not a terminal (a login or [y/N] prompt): answer it beforehand, or pass "
        "the option that skips it.",
        supersedes=_PAIRS),
        among=process_causes.stuck),
    Finder(process_causes._pipe_deadlock, "waiter", "pipe-deadlock", among=process_causes.stuck),
    Finder(process_causes._queue_join, "waiter", Kind(
        "queue-join", PROCESS, "join before reading",
        "A parent joins a child that cannot end until the parent reads what it put on a multiprocessing Queue or "
        "Pipe: read everything first, then join().",
        supersedes=_PAIRS), among=process_causes.stuck),
    Finder(process_causes._pipe_held, "waiter", Kind(
        "pipe-held", PROCESS, "output held open",
        "subprocess.run(capture_output=True) waits for the end of a child's output after the child exited, "
        "because a process it started in the background holds the pipe.",
        supersedes=_PAIRS[1:]), among=process_causes.stuck),
    Finder(process_causes._pool, "waiter", Kind(
        "pool", PROCESS, "pool worker lost",
        "A multiprocessing.Pool worker vanished or crashed and the pool waits forever: use "
        "concurrent.futures.ProcessPoolExecutor, which raises BrokenProcessPool.",
        supersedes=_PAIRS[2:]), among=process_causes.pool_waiters),
    Finder(process_causes._child_died, "waiter", Kind(
        "child-died", PROCESS, "writer died",
        "A read from a multiprocessing queue or pipe whose only writers, child processes, all ended: fix their "
        "error, and read with a timeout.", supersedes=_PAIRS[2:]),
        among=process_causes.stuck),
    Finder(process_causes._shared_lock, "waiter", Kind(
        "shared-lock", PROCESS, "shared lock lost",
        "A wait for a multiprocessing.Lock after a process sharing it was killed, likely while holding it: keep "
        "killable work out of the lock.", supersedes=_PAIRS[3:]), among=process_causes.stuck),
    Finder(process_causes._network, "waiter", Kind(
        "network", PROCESS, "socket",
        "Waiting on HOST:PORT for S seconds: is the server there and reachable?",
        supersedes=_PAIRS[4:]), among=process_causes.stuck),
    Finder(process_causes._file_lock, "waiter", Kind(
        "file-lock", PROCESS, "file lock",
        "Waiting for a lock on a file that another process holds (or no process: a stale lock file): let it "
        "finish, or stop it.", supersedes=_PAIRS[4:]), among=process_causes.stuck),
    Finder(process_causes._full_stream, "waiter", "pipe-deadlock", Kind(
        "pipe-full", PROCESS, "pipe nobody reads",
        "Blocked writing stdout to a process that does not read it: read the stream, or let the child inherit it.",
        supersedes=_PAIRS[4:]), among=process_causes.stuck),
    # Read after the run was stopped, a process's children ended with it: what it waited for is in
    # its last dump, but a child with no record of its end is no evidence, and the verdict itself
    # says whom a parent "had waited" for.
    Finder(process_causes._child_wait, "waiter", Kind(
        "child", PROCESS, "waiting for a child",
        "A parent waits for a child (its command, kernel state and own stall): fix the child; give the wait a "
        "timeout.", supersedes=_PAIRS[6:]), among=process_causes.stuck, live=True),
    Finder(process_causes.orphans, "run", Kind(
        "orphan", PROCESS, "children left running",
        "Processes still run after their parent was killed, vanished or failed, holding GPU memory, ports and "
        "locks: kill them; stop a launcher with Ctrl-C or SIGTERM.")),
)

# Stories the verdict tells as lines of their own, not in "causes" (so --json keeps its shape), in
# the order it tells them, after the causes: declared here for their docs (docs/causes.md marks them
# "verdict line") and for what supersedes them; verdict.STORIES names who tells each.
LINES = (
    Kind("straggler", RUN, "straggler rank",
         "The rank elsewhere while the other ranks wait for it in a collective: look at that rank; the others only "
         "wait for it.", supersedes=["trouble"]),
    Kind("child-ended", PROCESS, "child ended",
         "A parent waits for a child that crashed, failed or stalled, with no cause more precise: fix what ended "
         "the child; wait with a timeout and check its exit status.", supersedes=["trouble"]),
    Kind("slowing", RUN, "slowed by a slower rank",
         "A rank waited for its peer ranks in collectives and went on each time: a slower rank holds the job up "
         "(named when it never waited itself). Slow, not stuck: no cause, no trouble."),
    Kind("trouble", PROCESS, "process in trouble",
         "A process in trouble that no cause or other line explains gets a line of its own: its state, where it "
         "was, and the next step its error is known to need."),
    Kind("vanished", PROCESS, "likely SIGKILL",
         "A process vanished with no exit record: the kernel's OOM killer when its memory lines show pressure, "
         "else SIGKILL from a person or a scheduler, or C code calling exit()."),
    Kind("killed", PROCESS, "killed, as another process says",
         "Another process's output says it killed this one (Ray's memory monitor): killed, by whom, and the next "
         "step, whatever its own log shows.", supersedes=["child-killed"]),
    Kind("lost-work", PROCESS, "work lost in a clean exit",
         "A process exited with status 0 after a thread of it died of an error, or an atexit callback failed: the "
         "status hides the lost work."),
    Kind("quiet-end", PROCESS, "ended without a word",
         "os._exit() ended a process from a thread or from the program's own code, skipping finally blocks, atexit "
         "and the last flush; that last flush failed as its reader went away (status 120); or daemon threads were "
         "still at work, which Python stops at exit wherever they are."),
)

# The verdict's order: the causes read from what the processes were stuck on; then the stories
# of where the work stood (BEFORE_ENDINGS of LINES); then ENDINGS, the causes that tell how the run
# ended from outside, which a person reads as the consequence (a job killed at its time limit
# because a pool's child hung: the hang first); then the other causes of the run and the rest of
# LINES.
BEFORE_ENDINGS = ("straggler", "child-ended")
ENDINGS = ("run-stopped",)

KINDS = {k.kind: k for f in FINDERS for k in f.causes if isinstance(k, Kind)}
LINE_KINDS = {k.kind: k for k in LINES}
RUN_KINDS = frozenset(k for k, v in KINDS.items() if v.level == RUN)


def superseding(causes, kind):
    """The causes (causes.Cause) whose kind supersedes `kind`, one of LINES: the verdict tells
    no such line for the processes they name."""
    return [c for c in causes if kind in KINDS[c.kind].supersedes]


def kinds(f):
    """The ids of the kinds a finder finds."""
    return [k.kind if isinstance(k, Kind) else k for k in f.causes]


def _rank():
    """{kind: depth} for the kinds read from one process's dump: every kind after those that
    supersede it (tests/test_causes_registry.py checks they supersede in no circle)."""
    mine = {k for f in FINDERS if f.scan in _PER_PROCESS for k in kinds(f)}
    rank = {}

    def depth(kind, path):
        if kind not in rank:
            above = [k for k in mine if kind in KINDS[k].supersedes and k not in path]
            rank[kind] = 1 + max((depth(k, path + (kind,)) for k in above), default=-1)
        return rank[kind]
    for kind in mine:
        depth(kind, ())
    return rank


_RANK = _rank()


def find(report, folder):
    """Every cause the evidence shows, in the registry's order, the run's last (what each process
    was stuck on comes before how the run ended: a whole run stopped from outside is read after a
    timeout or a Ctrl-C). One failing room costs only its own causes."""
    found = []
    for batch in _batches():
        try:
            found.extend(_run(batch, report, folder))
        except Exception as exc:  # input nobody foresaw: say so, keep the rest of the report
            room = batch[0].fn.__module__.rpartition(".")[2].replace("_causes", "")
            report.problems.append("earlylog could not work out the %s causes (%r)" % (room, exc))
    # Once more across the rooms of one process's dump: an object's cause supersedes a join or a lock wait.
    kept = _supersede([c for c in found if c.kind in _RANK])
    found = [c for c in found if c.kind not in _RANK or any(c is k for k in kept)]
    return sorted(found, key=lambda c: c.kind in RUN_KINDS)


def _above(f):
    """The kinds that supersede one a finder finds."""
    mine = set(kinds(f))
    return frozenset(k for k, v in KINDS.items() if mine & set(v.supersedes))


def _family(f):
    return "process" if f.scan in _PER_PROCESS else f.scan


def _batches():
    """The finders in runs of one module and one way of running (per process, waiter, run)."""
    out = []
    for f in FINDERS:
        if out and (_family(f), f.fn.__module__) == (_family(out[-1][-1]), out[-1][-1].fn.__module__):
            out[-1].append(f)
        else:
            out.append([f])
    return out


def _run(batch, report, folder):
    family = _family(batch[0])
    if family == "waiter":
        return process_causes.waiting(report, folder, [(f.fn, f.among, f.live, _above(f)) for f in batch])
    if family == "run":
        return [c for f in batch for c in f.fn(report, folder)]
    found = []
    for s in thread_causes.stalls(report, folder):
        mine, alone = [], False
        for f in batch:
            if f.scan == "process":
                mine += f.fn(s)
            elif s.threads is not None and not alone:
                got = f.fn(s) if f.scan == "stall" else [c for t in s.threads for c in f.fn(s, t)]
                alone = any(ALL in KINDS[c.kind].supersedes for c in got)
                mine += got
        found += _supersede(mine)
    return found


def _supersede(found):
    """The causes less those a cause of the same process supersedes: one that names the thread the
    other is about (its first thread). A cause superseded is no evidence against others."""
    kept = []
    for c in sorted(found, key=lambda c: _RANK[c.kind]):
        if not any(c.kind in KINDS[s.kind].supersedes and c.threads and c.threads[0] in s.threads and
                   c.pids[:1] == s.pids[:1] for s in kept):
            kept.append(c)
    return [c for c in found if any(c is k for k in kept)]
