"""The causes the report can name, in one place: each kind of cause (the id reports and --json
show), its level (a thread, a process, the run), the name and sentence docs/causes.md gives it,
the kinds it supersedes, and the finder that looks for it; the stories the verdict tells as lines
of their own (LINES); and the one loop that runs the finders over a judged report (verdict.py
calls `find`). Adding a cause is one entry here (its doc is docs/causes.md's line for it, which
scripts/causes_doc.py writes there) and a scenario test that names its kind; tests/test_docs.py
fails when the page drifts from this list or a kind has no such test.

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
    rest), `title` (its name in docs/causes.md), `doc` (what it means, for users: its line in
    docs/causes.md, written from here by scripts/causes_doc.py), and
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
# The causes in the state of the object threads wait on, and who can still change it
# (object_causes.py); a finished program's wait at exit (the shutdown cause) tells them whole.
_OBJECTS = Finder(object_causes.find, "stall", Kind(
    "barrier-short", THREAD, "barrier that can never trip",
    "K of a `threading.Barrier`'s N parties wait in `wait()` and no other live thread refers to the barrier "
    "(the dump's `can change it:` note, see below), so the last parties never come: `barrier `barrier` can "
    "never trip: 3 of its 4 parties have arrived (threads scan-0, scan-1 and scan-2 wait in scan at "
    "scan.py:5), and no other live thread refers to it, so the last party never comes; thread MainThread "
    "waits for them in join`, naming a party that died of an exception; next: make it for as many parties as "
    "threads that call `wait()`, and give `wait()` a timeout (a missing party then raises "
    "`BrokenBarrierError` in every party).",
    supersedes=["join", "stranded"]), Kind(
    "semaphore-drained", THREAD, "semaphore drained by failures",
    "a semaphore has no permit free (`0 of its 3`, for a `BoundedSemaphore`), no thread's stack shows one "
    "taken, and no other live thread refers to it: `acquire()`s whose `release()` never came. Told once for "
    "every thread waiting on it, with the failures the program reported before the wait (its last output "
    "lines naming an exception or saying `failed`): `the program reported 3 failures before: \"WARNING upload "
    "failed: upload 0 refused\" (0.1 s after start), ...`; next: `with slots:` (or `try/finally`) around the "
    "work that can fail.", supersedes=["lock", "join", "stranded"]), Kind(
    "lost-wakeup", THREAD, "lost wakeup",
    "a thread waits in `Condition.wait()` without a predicate, and no other live thread refers to the "
    "condition: no notify can come, and one made before the wait began was lost; next: keep the state beside "
    "the condition and `cond.wait_for(lambda: ...)`, which returns at once when the state is already set. "
    "With a predicate (`wait_for`), the same evidence is told as the next cause.",
    supersedes=["join", "stranded"]), Kind(
    "condition-unnotified", THREAD, "condition nothing can notify",
    "a thread waits in `Condition.wait_for()` and no other live thread refers to the condition: nothing can "
    "make its predicate true; find the code meant to change the state and notify, and give `wait_for()` a "
    "timeout.", supersedes=["join", "stranded"]), Kind(
    "queue-orphaned", THREAD, "queue nothing can fill",
    "a thread waits in `get()` on a `queue.Queue` that no other live thread refers to: its producer ended "
    "(returned, or caught its own exception and ended) while other threads print on; next: put a sentinel (or "
    "the exception) on every path out of the producer, and `get(timeout=...)` with a check of its "
    "`is_alive()`. A producer that died of an uncaught exception is the **dead thread** cause above, with its "
    "traceback.",
    supersedes=["join", "stranded"]), Kind(
    "event-unset", THREAD, "event nothing can set",
    "a thread waits for an `Event` that is not set and that no other live thread refers to: find the code "
    "meant to `set()` it (set it in a `finally`), and give `wait()` a timeout.", supersedes=["join",
    "stranded"]), Kind(
    "future-orphaned", THREAD, "asyncio Future nothing can complete",
    "an asyncio task awaits, in its own code, a bare Future that no other task, no callback or timer of the "
    "loop, no reader or writer it watches (a transport's protocol, two attributes deep) and no other thread "
    "refers to: `asyncio task Task-1 awaits a Future in main at client.py:16 that no other task, callback, "
    "reader or thread refers to: nothing can complete it`; next: find the code meant to call `set_result()` "
    "(a table of pending replies it was taken out of), and await it under `asyncio.wait_for()`. A Future "
    "chained to another (`run_in_executor`, `wrap_future`) is never told so, nor one no variable names "
    "(`await asyncio.Future()`: parked until cancelled, on purpose).",
    supersedes=["loop-blocked"]), Kind(
    "async-unset", THREAD, "asyncio Event, Condition or Queue nothing can change",
    "the same, for an asyncio `Event`, `Condition` or `Queue` (`get()`) a task awaits in its own code: "
    "`asyncio task Task-1 awaits asyncio.Event `ready` in serve at app.py:9 that no other task, callback, "
    "reader or thread refers to: nothing can set it`. Tasks awaiting the same object are no help to one "
    "another.",
    supersedes=["loop-blocked"]))
_OBJECT_KINDS = tuple(k.kind for k in _OBJECTS.causes)
# The waiters' kinds whose finders skip a pair already told, in the order their finders last run.
_PAIRS = ("queue-join", "pipe-held", "child-died", "shared-lock", "pipe-deadlock", "pipe-full", "child")

# In the order the finders run, which is the order the report lists their causes (RUN causes last).
FINDERS = (
    Finder(acted.find, "run", Kind(
        "stall-exit", PROCESS, "ended by earlylog",
        "`EARLYLOG_STALL_EXIT` ended a stuck process with status 124 (where it was stuck, for how long; for a "
        "torchrun rank, its attempt and whether the next attempt ran): a restart hides the hang, it does not fix "
        "it; see why it waited there ([acting on a hang](acting.md)).",
        supersedes=["trouble"])),
    # --- one process's last dump (thread_causes.py) ---
    Finder(thread_causes.gil, "stall", Kind(
        "gil", THREAD, "GIL held",
        "C code in FUNC held the GIL for S seconds: that C call (a regex, a C extension) is the culprit.",
        supersedes=[ALL])),
    Finder(thread_causes.deadlocks, "stall", Kind(
        "deadlock", THREAD, "deadlock",
        "two threads each hold a lock the other wants; both frames shown: take the locks in one order.",
        supersedes=["lock", "fork-lock"])),
    Finder(thread_causes.starved, "stall", Kind(
        "pool-starved", THREAD, "starved thread pool",
        "every worker of a `ThreadPoolExecutor` waits for a future no worker has started: a task waits for work "
        "queued behind it in its own pool; use a separate executor for the inner work, or more workers.",
        supersedes=["future-unset"])),
    Finder(thread_causes.imports, "thread", Kind(
        "fork-lock", THREAD, "lock copied by fork",
        "a child made by `fork()` waits for a lock no thread of its own holds; the parent's other threads (named) "
        "held it at the fork; or it is blocked on a lock inside native code (a torch op) after its parent forked "
        "while threads with no Python stack ran (OpenMP's or a BLAS's pool, counted in the parent's `fork:` "
        "line): use the `spawn` or `forkserver` start method, or fork before starting threads (or before the "
        "first parallel computation).",
        supersedes=["import-deadlock", "import", "lock"]), Kind(
        "import-deadlock", THREAD, "import deadlock",
        "a thread waits to import a module another thread is importing, and that thread waits for the first (a "
        "thread started and joined in a module's top-level code, or a lock the first holds): start no thread and "
        "wait for none at import time.", supersedes=["lock", "join"]), Kind(
        "import", THREAD, "import that does not end",
        "a thread waits to import a module another thread is importing, and that thread's import does not end (it "
        "waits for something else, shown): find why, in that thread's frame.")),
    _OBJECTS,
    Finder(thread_causes.waits, "thread", Kind(
        "lock", THREAD, "lock held by thread X",
        "the waiter, the lock's name and the holder's frame: look at why X keeps it."), "fork-lock", Kind(
        "join", THREAD, "join",
        "a thread waits in `join()` for thread X, which is stuck where shown: fix X.")),
    Finder(thread_causes.shutdown, "stall", Kind(
        "shutdown", THREAD, "program finished, a thread keeps it alive",
        "the main code ended, non-daemon thread X runs on: stop it or make it `daemon=True`; or Python waits at "
        "exit for a ThreadPoolExecutor's running task (its workers are joined at exit, and "
        "`shutdown(cancel_futures=True)` drops only tasks not yet started): make the task return.",
        supersedes=_OBJECT_KINDS)),
    Finder(thread_causes.deaths, "stall", Kind(
        "thread-died", THREAD, "dead thread",
        "thread X died with an exception while others wait for its work: read its traceback.",
        supersedes=["stranded"]), Kind(
        "thread-exit", THREAD, "sys.exit() in a thread",
        "thread X called `sys.exit(N)`, which ends only that thread, silently, while the main thread waits for "
        "its work: tell the main thread (a sentinel on the queue, an Event) and exit there.", supersedes=["stranded"])),
    Finder(thread_causes.unmarked, "stall", Kind(
        "task-done", THREAD, "task_done() missing",
        "a thread waits in `Queue.join()` for N unfinished items of an empty queue while its consumers wait in "
        "`get()` for more (or an asyncio task awaits an `asyncio.Queue`'s `join()` while its consumer tasks await "
        "`get()`): an item was got without `task_done()`; call it once per `get()`, in a `finally:`.",
        supersedes=["stranded"])),
    Finder(thread_causes.unset, "stall", Kind(
        "future-unset", THREAD, "future nobody sets",
        "a thread waits in `result()` for a `concurrent.futures.Future` no executor runs (none of the process's "
        "threads is an executor's): only its `set_result()` can end the wait; find the code meant to call it, and "
        "give `result()` a timeout.")),
    Finder(thread_causes.stranded, "stall", Kind(
        "stranded", THREAD, "nothing left to wake the threads",
        "every thread of the program waits for another, for an item from a `queue.Queue` or room in one, a notify "
        "on a Condition, an Event, a Barrier's other parties, or in join, and none computes, sleeps, polls with a "
        "timeout or waits outside the process (a socket, a pipe, a child): `every thread waits for another, and "
        "none is left to wake them: thread MainThread waits for an item from queue `results` in main at a.py:10; "
        "thread worker waits for an item from queue `jobs` in worker at a.py:6`; next: find the thread meant to "
        "put into them (one that ended early, a sentinel never sent, fewer items put than got), and for a "
        "Condition, wait for the state (`cv.wait_for(...)`): a notify before the wait is lost. An executor's idle "
        "worker (a `ThreadPoolExecutor` thread waiting for its next task) is no party to it: beside one, a single "
        "thread waiting is enough (`thread MainThread waits for event `ready` ...; thread ThreadPoolExecutor-0_0 "
        "is an executor's idle worker: no task of its runs`), and the next step is to read the Future of the task "
        "that was to set it, since an exception in a task is kept in its Future and never printed; where the task "
        "raised, earlylog's record of it (`a task on thread ThreadPoolExecutor-0_0 raised FileNotFoundError: ... "
        "in load_config at app.py:5, kept in its Future (never printed)`) is named, and fixing it is the next "
        "step. Not told where a signal handler could wake it (one installed, or one that sets the Event), nor "
        "where a dead thread or a missing `task_done()` explains it.", supersedes=["join"])),
    Finder(thread_causes.hub, "stall", Kind(
        "greenlet", THREAD, "greenlet waits",
        "in a gevent program the thread sits in the hub's loop (`run at hub.py:647`), so the report names the "
        "greenlets instead: greenlet X waits on a gevent lock (and greenlet Y holds it, in its `with` block, "
        "waiting on what it waits on), an Event nothing sets, a Queue nothing fills or a socket whose peer is "
        "silent, at its own line: keep waits out of the `with` block, find the code meant to `set()` or `put()`, "
        "give the wait a timeout. A notebook's frames are named as the notebook names them: `cell In[2], line 8`.")),
    Finder(thread_causes.overflow, "process", Kind(
        "stack-overflow", THREAD, "stack overflow",
        "FUNC recursed N deep (by itself, or through a few functions) and crashed or raised RecursionError: bound "
        "the recursion.")),
    # --- the run, from all processes ---
    Finder(thread_causes.run_stopped, "run", Kind(
        "run-stopped", RUN, "whole run stopped",
        "N processes ended at the same moment: a scheduler limit or a kill from outside, not N separate failures.",
        supersedes=["vanished"])),
    Finder(thread_causes.first_failure, "run", Kind(
        "first-failure", RUN, "first failure",
        "rank R failed first (its error), the other ranks failed after it (a closed connection, an aborted "
        "collective): fix R's error; the rest follow from it.")),
    # --- the ranks of a distributed job, by the collective each waits in (rank_causes.py) ---
    Finder(rank_causes.find, "run", Kind(
        "ranks-differ", RUN, "ranks in different collectives",
        "the ranks of one group wait in different collectives, or at different ordinals, so none can return: each "
        "rank with its collective (`all_reduce #11 on group 0`; DDP's gradient all_reduce, which PyTorch issues "
        "from C++ in `backward`, is named as such), its line, and its training step. When a rank's DataLoader ran "
        "out and it left its loop while the others began another step: a different number of batches per rank "
        "(give every rank the same count: `DistributedSampler(drop_last=True)`, DDP's `join()`); else a "
        "collective that not every rank calls (one under `if rank == 0:`): call it on every rank, or on a group "
        "of only those that call it.", supersedes=["trouble", "straggler"]), Kind(
        "collective-stuck", RUN, "no rank returns from a collective",
        "every rank of the job is in the same collective at the same ordinal and none returns: not the program's "
        "order of calls but the transport (the network between hosts, `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME`, "
        "NCCL's own log).", supersedes=["trouble", "straggler"]),
        Kind(
        "p2p-unmatched", RUN, "send and recv unmatched",
        "two ranks both wait in `recv` from each other (or both in `send`): how many each sent and received on "
        "that pair says whose send is missing (`rank 1's recv #3 from rank 0 has no send to match: rank 0 sent 2 "
        "to it`); pair each recv with a send, or post both with `dist.batch_isend_irecv`.", supersedes=["trouble",
        "straggler"])),
    # --- asyncio (async_causes.py) ---
    Finder(async_causes.find, "run", Kind(
        "loop-blocked", THREAD, "event loop blocked",
        "a coroutine makes a synchronous call that blocks (`time.sleep`, a blocking socket's `recv`, "
        "`requests.get`, a `threading.Lock`'s `acquire()`), so the asyncio loop runs no other task: the task, its "
        "coroutine function, the line and the call, and what the call waits for: `await asyncio.sleep(...)`, or "
        "run the call in `await asyncio.to_thread(...)` / `loop.run_in_executor(None, ...)`. A plain callback "
        "(`call_soon`, `call_later`, a protocol's `data_received`) blocking the loop is named the same way. Only "
        "while other tasks wait to run (with none, what the call waits for is the cause), never for a framework's "
        "coroutine running the user's code (a notebook cell), and never for a loop computing in a coroutine: that "
        "is busy.")
        , Kind(
        "task-lock", THREAD, "asyncio lock held",
        "an asyncio task waits for an `asyncio.Lock` (or a Condition's) that it holds itself, taken in an outer "
        "coroutine of its own await chain (`asyncio task T waits for asyncio.Lock `lock` in save at a.py:11, "
        "which it already holds: it took it in step at a.py:15`; asyncio's locks are not reentrant: do not take "
        "it again while it is held), or that another task holds while it waits for something else (`held by task "
        "T2 since refresh at a.py:9, which itself waits for asyncio.Event `self.ready``; two tasks that each hold "
        "the lock the other wants are a deadlock: take the locks in one order). Read from the dump's task lines, "
        "which name asyncio's lock, event, semaphore or queue a task awaits as the code writes it and who holds a "
        "lock (its `async with` block or `acquire()`). A semaphore's holders, and a holder that sleeps, are no "
        "cause.")
        , "task-done", Kind(
        "task-died", THREAD, "dead task",
        "an asyncio task died with an exception nobody retrieved (never awaited, no `result()`), while another "
        "task waits for what it would have produced (the producer raised, the consumer awaits `queue.get()` for "
        "ever): its exception and line, and the waiting task's line: fix the error; await the task (or `gather` "
        "it with its consumers) or add a done callback, so that its failure ends the wait. Such a process is "
        "stuck, not idle.")),
    # --- processes and the processes around them (process_causes.py) ---
    Finder(process_causes.killed_children, "run", Kind(
        "child-killed", PROCESS, "child killed while its parent waits",
        "child C (its command) was killed by SIGKILL (the OOM killer or `kill -9`) at HH:MM:SS while pid P waited "
        "for it at `launcher.py:12 (proc.wait())`, and what P did then (exited 0 without the child's work, "
        "failed, still waits): find the killer with `dmesg -T | grep -i -e oom -e 'killed process'` on that host "
        "(the kernel log is often not readable without root), and check the child's status (`proc.wait()` returns "
        "-9). Only a wait with no time limit counts: a supervisor whose timed wait ran out kills the child "
        "itself, and a child killed while nothing waits for what it would send is let go (`terminated`).",
        supersedes=["trouble"])),
    Finder(process_causes.retries, "run", Kind(
        "retrying", THREAD, "retrying",
        "a thread that keeps failing the same way and sleeping between tries (a refused or timed-out connect, the "
        "same exception caught again and again at one place) is not idle: `N failures connecting to HOST:PORT "
        "(ConnectionRefusedError) seen in the last S s, in connect at client.py:14`, also while the loop logs "
        "every failure: start the server or fix the address (refused: nothing listens; a timeout: nothing "
        "answers), and give the loop a limit. See [the design](design.md#retrying-is-not-idle).")),
    # Each waiter finder reads every blocked thread before the next one starts. The kinds of _PAIRS
    # tell a parent and child pair only where no cause found before them told it (their finders
    # consult `told`): each kind supersedes those of _PAIRS whose finders run with or after its own.
    Finder(process_causes._read_deadlock, "waiter", Kind(
        "pipe-deadlock", PROCESS, "pipe deadlock",
        "a parent in `Popen.wait()` while its child is blocked writing to a full `stdout=PIPE` (or reading a "
        "`stdin=PIPE` the parent never writes): use `communicate()`. Also a parent reading the child's output "
        "(`for line in proc.stdout`) while the child waits for input on the `stdin=PIPE` the parent never writes: "
        "write and close its stdin first.",
        supersedes=_PAIRS),
        among=process_causes.stuck),
    Finder(process_causes._stdin, "waiter", Kind(
        "stdin", PROCESS, "stdin prompt",
        "blocked reading a stdin that is not a terminal (a login, licence or `[y/N]` prompt): answer it "
        "beforehand, or pass the option that skips it.",
        supersedes=_PAIRS),
        among=process_causes.stuck),
    Finder(process_causes._pipe_deadlock, "waiter", "pipe-deadlock", among=process_causes.stuck),
    Finder(process_causes._queue_join, "waiter", Kind(
        "queue-join", PROCESS, "join before reading",
        "a parent in `process.join()` while the child cannot end: what it put on a multiprocessing `Queue` (its "
        "feeder thread) or sent on a `Pipe` is more than the pipe holds, and only the parent reads it: `q.get()` "
        "/ `conn.recv()` everything first, then `join()`.",
        supersedes=_PAIRS), among=process_causes.stuck),
    Finder(process_causes._pipe_held, "waiter", Kind(
        "pipe-held", PROCESS, "output held open",
        "`subprocess.run(..., capture_output=True)` waits for the end of a child's output after the child exited, "
        "because a process it started in the background (P) holds the pipe: give that process its own output "
        "(`cmd > log 2>&1 &`).",
        supersedes=_PAIRS[1:]), among=process_causes.stuck),
    Finder(process_causes._pool, "waiter", Kind(
        "pool", PROCESS, "pool worker lost",
        "a `multiprocessing.Pool` worker vanished or crashed and the pool waits forever (while no worker "
        "computes: the workers a forking pool starts from its own thread have no watchdog, so the kernel's state "
        "says whether they sleep): use `concurrent.futures.ProcessPoolExecutor`, which raises "
        "`BrokenProcessPool`. Workers that fail as they start (an initializer's error), restarted for ever, are "
        "named once with their error.",
        supersedes=_PAIRS[2:]), among=process_causes.pool_waiters),
    Finder(process_causes._child_died, "waiter", Kind(
        "child-died", PROCESS, "writer died",
        "a read from a multiprocessing queue or pipe whose only writers, child processes, all ended (one with the "
        "error shown): fix that error, and read with a timeout while checking `process.exitcode`.",
        supersedes=_PAIRS[2:]),
        among=process_causes.stuck),
    Finder(process_causes._shared_lock, "waiter", Kind(
        "shared-lock", PROCESS, "shared lock lost",
        "a wait for a `multiprocessing.Lock` after a process sharing it was killed (likely while holding it, "
        "which never releases it): keep killable work out of the `with lock:` block; `lock.acquire(timeout=...)`.",
        supersedes=_PAIRS[3:]), among=process_causes.stuck),
    Finder(process_causes._network, "waiter", Kind(
        "network", PROCESS, "socket",
        "waiting on `HOST:PORT` for S seconds: is the server there and reachable? An asyncio task awaiting a "
        "reply on a client connection (`await reader.readline()`) gets the same cause, placed at the task's own "
        "line; next step `asyncio.wait_for(..., timeout=...)`.",
        supersedes=_PAIRS[4:]), among=process_causes.stuck),
    Finder(process_causes._file_lock, "waiter", Kind(
        "file-lock", PROCESS, "file lock",
        "waiting for a lock on a file (a model cache's `.lock`) that process P (its command) holds: let P finish "
        "or stop it; runs sharing one cache wait for each other. A lock file no process holds is stale: delete "
        "it. A SQLite statement retrying while another connection keeps the database locked (its busy handler "
        "sleeps in C, so it is no sleep loop) names the holder: commit or close its transaction, and give the "
        "connection a short `timeout=`.", supersedes=_PAIRS[4:]), among=process_causes.stuck),
    Finder(process_causes._full_stream, "waiter", "pipe-deadlock", Kind(
        "pipe-full", PROCESS, "pipe nobody reads",
        "blocked writing stdout to process P (its command), which does not read it: read the stream, or `stdio: "
        "'inherit'`/`'ignore'`.",
        supersedes=_PAIRS[4:]), among=process_causes.stuck),
    # Read after the run was stopped, a process's children ended with it: what it waited for is in
    # its last dump, but a child with no record of its end is no evidence, and the verdict itself
    # says whom a parent "had waited" for.
    Finder(process_causes._child_wait, "waiter", Kind(
        "child", PROCESS, "waiting for a child",
        "a parent waits for child C (its command, kernel state and own stall): fix the child; give the wait a "
        "timeout.", supersedes=_PAIRS[6:]), among=process_causes.stuck, live=True),
    Finder(process_causes.orphans, "run", Kind(
        "orphan", PROCESS, "children left running",
        "processes that still run (checked on this host) after their parent was killed, vanished or failed (a "
        "launcher SIGKILLed by a GUI's stop button or the OOM killer, a script that raised after starting its "
        "workers): nothing will stop them, and they keep the GPU memory, ports and locks the next run needs: "
        "`kill` them (the pids are given); stop a launcher with Ctrl-C or SIGTERM, and have a failing parent end "
        "its children (`proc.terminate()` in a `finally:`).")),
)

# Stories the verdict tells as lines of their own, not in "causes" (so --json keeps its shape), in
# the order it tells them, after the causes: declared here for their docs (docs/causes.md marks them
# "verdict line") and for what supersedes them; verdict.STORIES names who tells each.
LINES = (
    Kind("straggler", RUN, "straggler rank",
         "`rank R is the straggler: it is in FUNC at FILE:LINE, outside any collective (WHAT IT WAITS ON); ranks "
         "0, 1, 3 wait in all_reduce #11 on group 0 for it`: the rank outside any collective while the others "
         "wait for it in one (on several hosts, with its host), with its own cause (a lock, a socket...) among "
         "the causes; with no rank elsewhere, the ranks that never started or a rendezvous address that differs: "
         "look at rank R; the others only wait for it. Ranks are named as ranks whoever started them (torchrun, "
         "`torch.multiprocessing`, Lightning's rank 0 that starts the others): their relation is the "
         "collective's, never the process tree's.", supersedes=["trouble"]),
    Kind("child-ended", PROCESS, "child ended",
         "a parent waits for a child that crashed or failed, with no cause more precise: fix what ended the "
         "child; wait with a timeout and check its exit status.", supersedes=["trouble"]),
    Kind("slowing", RUN, "slowed by a slower rank",
         "`rank 0 was slowed, not stuck: it waited for its peer ranks up to 3.9 s in all_reduce #4 on group 0 (2 "
         "times told) and went on each time; rank 1, which never waited, is the slower`: a healthy job whose "
         "ranks wait each step for the slowest; no cause, no trouble. A rank waiting in a collective is told in "
         "its log at `EARLYLOG_STALL` and on the console only from twice it, and not at all while its training "
         "steps keep coming at their pace."),
    Kind("trouble", PROCESS, "process in trouble",
         "a process stalled, crashed, killed, vanished or failed that no cause or line above explains: its state, "
         "where it was, and the next step a known error needs (`read/known.py`); several children of one parent "
         "that ended the same way share one line."),
    Kind("vanished", PROCESS, "likely SIGKILL",
         "a process that vanished (no exit record) gets `likely cause for P: the kernel's OOM killer (...)` when "
         "its memory lines show pressure, else `killed by SIGKILL (kill -9, a job scheduler or the OOM killer "
         "...), or ended by C code calling exit()` (which Python never sees: the status the launcher saw tells "
         "them apart), unless the whole run stopped at once: confirm with `dmesg -T | grep -i oom` on that host."),
    Kind("killed", PROCESS, "killed, as another process says",
         "another process's output names this one as killed (Ray's memory monitor, in the driver's "
         "`OutOfMemoryError`): `killed by Ray's memory monitor, as the output of a process on HOST says: ...`, "
         "with the next step, whatever its own log shows.", supersedes=["child-killed"]),
    Kind("lost-work", PROCESS, "work lost in a clean exit",
         "a process that exited with status 0 after one of its threads died of an error (`sys.exit()` in a "
         "thread, which ends only that thread on purpose, is not told) or an atexit callback failed: the status "
         "hides the lost work."),
    Kind("quiet-end", PROCESS, "ended without a word",
         "an exit that ends the work without a word, told even with status 0: `os._exit()` called from a thread "
         "(which thread, where, where the main thread was: nothing after it ran, no `finally`, no atexit, no "
         "flush) or by the program's own code; a last flush of stdout that failed because its reader went away "
         "(`| head`): status 120, with the last line it printed; and an end while daemon threads of the program's "
         "were still at work (writing a checkpoint, uploading), which Python stops at exit wherever they are: "
         "join them if their work must finish."),
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


def doc_lines():
    """docs/causes.md's list, one line per kind in the order the report tells them, then one per
    story the verdict tells as a line: `- **title** (`kind`): doc` and `- **title** (verdict line): doc`
    (scripts/causes_doc.py writes it there; tests/test_docs.py fails when the page drifts from it)."""
    return ["- **%s** (`%s`): %s" % (k.title, k.kind, k.doc) for k in KINDS.values()] + \
        ["- **%s** (verdict line): %s" % (k.title, k.doc) for k in LINES]


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
