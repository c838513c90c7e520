"""Idle or stuck: a silent process whose threads are parked waiting for work (an event loop with
nothing of the user's pending, a server's serve_forever, a pool worker's empty queue, a sleep loop)
is idle, not stuck. It decides from the frames of the last stall dump and the kernel state of each
thread (docs/design.md#idle-is-not-stuck). It only judges, and must never call idle a thread that
waits inside a task of the user's: for a reply, a lock, a child or a peer."""
from earlylog.grammar import parked, stalls
from earlylog.read import greenlets
from earlylog.read.frames import in_event_loop, is_file, library, task_chains
from earlylog.grammar import notes

# Library frames that may call the user's code without making it a task: the interpreter running a
# script or module, an import, a thread or a multiprocessing child running its target. Any other
# library frame that calls the user's code (a Ray worker, a pool, a test runner, a request handler)
# runs it as a task, and a task waiting for anything, a sleep included, is not idle.
_ENTRY = (("runpy.py", None), ("<frozen runpy>", None), ("<frozen importlib._bootstrap>", None),
          ("<frozen importlib._bootstrap_external>", None),
          ("threading.py", ("run", "_bootstrap_inner", "_bootstrap")),
          ("multiprocessing/process.py", ("run", "_bootstrap")))
# Where a thread parks between pieces of work, the queues and plumbing inside it, the asyncio awaits
# that mean work, a library's run loop: grammar/parked.py, the one rule the watchdog judges by too.
# Phases that span a worker's whole loop (runtime/marks.py opens them), by their names' start.
_LOOP_PHASES = ("DataLoader worker ",)
# Worker pools that retitle a worker with no task to run: the pool's own word that it waits for one.
_IDLE_TITLES = ("ray::IDLE",)
# Words of _thread() that mean a server waiting for requests.
_SERVING = ("serve_forever", "server")
_LOOP_WORK = "waiting for work in an asyncio event loop"


def reason(threads):
    """`waiting for work in serve_forever` when every thread that matters is parked waiting for
    work, else None. The threads that matter: those running the user's code, and the main thread;
    a library's own helper threads (a watcher, a GC thread) wait for their events whatever the
    program does. One busy Python thread (but a library's own run loop, working between rounds), or
    one inside a phase, and the process is not idle (CPU used by native threads alone, such as Ray's
    gRPC threads, does not count)."""
    if any(not _loop_phase(p.text) for t in threads for p in notes.every(t.notes, notes.Phase)):
        return None
    if any(_busy(t) and not _library_loop(t) for t in threads):
        return None
    mains = [t for t in threads if t.main]
    deciders = [t for t in threads if (t.main and not _exiting(t)) or any(not library(f.file) for f in t.frames)]
    if not deciders and not mains:
        deciders = threads
    found = [_thread(t) for t in deciders]
    if found and all(found):
        return found[0]
    serving = _serving(threads)
    main_waits = _main_parked(mains[0], threads) if serving and mains else None
    if main_waits and found and all(w or t.main for t, w in zip(deciders, found)):
        return "%s; the main thread waits %s" % (serving, main_waits)
    return None


def serves(t):
    """The words for thread t when it is a server waiting for requests (serve_forever, a gRPC or
    asyncio server), else None."""
    words = _thread(t)
    return words if words and any(w in words for w in _SERVING) else None


def _serving(threads):
    """What the first serving thread does, in words, or None."""
    for t in threads:
        words = serves(t)
        if words:
            return "%s in thread %s" % (words, t.name) if not t.main else words
    return None


def _main_parked(t, threads):
    """How a main thread waits while servers work in other threads, in words, or None: for a signal
    (signal.pause(), sigwait: Ctrl-C), on a threading.Event at its top level (set to stop), or in a
    join of the server's own thread. Beside a server these are how a program keeps serving; a join
    of any other thread, or a wait deeper in the user's code, is a wait for something."""
    users = [i for i, f in enumerate(t.frames) if not library(f.file)]
    if not users or users[0] != len(t.frames) - 1 - _module_depth(t.frames):
        return None  # not in the script's own top-level code
    inner = t.frames[:users[0]]
    if not inner and "waiting for a signal" in _kernel(t):
        return "for a signal (Ctrl-C)"
    if inner and all(is_file(f.file, "threading.py") for f in inner) and inner[-1].function == "wait":
        return "on an event (to stop)"
    join = t.joins
    target = next((o for o in threads if join and o.ident == join.ident), None)
    if target is not None and serves(target):
        return "in a join of the server's thread %s" % target.name
    return None


def _module_depth(frames):
    """How many library frames run the script's top-level code (runpy for -m, none for a file)."""
    return sum(1 for f in frames if _entry(f))


def _loop_phase(text):
    """Is the innermost phase of a `phase:` note's text one that earlylog opens around a worker's
    whole loop (a DataLoader worker's)? Waiting for work inside it is idle."""
    return text.rpartition(" > ")[2].startswith(_LOOP_PHASES)


def by_title(title):
    """`waiting for tasks (its title is ray::IDLE)` for a worker its pool titles idle, else None."""
    return "waiting for tasks (its title is %s)" % title if title in _IDLE_TITLES else None


def at_terminal(texts):
    """`waiting for input at the terminal (the pdb prompt)` for a thread whose person answers a
    prompt there (runtime/terminal.py), read from its `terminal:` note, or from the stall line for
    the interactive prompt, which has no Python stack; else None."""
    for note in texts:
        if type(notes.parse(note)) is notes.Terminal:
            return notes.parse(note).text
        line = stalls.parse(note)
        if line is not None and line.state == stalls.TERMINAL:
            return "%s (%s)" % (stalls.TERMINAL_WORDS, line.words.partition("at the terminal (")[2].partition(")")[0])
    return None


def _exiting(t):
    """The main thread at interpreter exit, waiting for the program's other threads: they decide."""
    return bool(t.frames) and t.frames[0].function == "_shutdown" and is_file(t.frames[0].file, "threading.py")


def _thread(t):
    frames = t.frames
    person = at_terminal(t.notes)
    if person:
        return person
    if not frames or _in_task(frames):
        return None
    if greenlets.in_hub(frames):  # gevent's hub: its greenlets wait, or do not, for work
        return greenlets.idle(t)
    words = parked.waits_for_work([(f.file, f.function) for f in frames], t.main)
    if words:
        return words
    kernel = _kernel(t)
    path, _line, func = frames[0]
    if "time.sleep" in kernel and (not library(path) or _library_loop(t)) and not _sleeps_in_c(t):
        return "sleeping in %s (time.sleep)" % func
    if _busy(t) and _library_loop(t):
        return "working in %s between rounds (a library's own run loop)" % func
    if "select/poll" in kernel and in_event_loop(frames):
        words = _loop_tasks(t)
        if words == _LOOP_WORK and any(f.function == "start" and is_file(f.file, "ipykernel/kernelapp.py") for f in frames):
            return "waiting for its next cell (a Jupyter kernel)"
        return words
    return _told_to_stop(t, kernel)


def _told_to_stop(t, kernel):
    """A thread that waits to be told, by a signal, to stop or go on: on an event that one of the
    program's signal handlers sets (`set by:`), or in signal.pause()/sigwait with handlers of the
    program's in place (`handles:`); a daemon's or a service's main thread, waiting for SIGTERM."""
    for note in map(notes.parse, t.notes):
        if type(note) is notes.SetBy:
            return "waiting to be told to stop: %s sets the event it waits on" % note.text
        if type(note) is notes.Handles and "waiting for a signal" in kernel:
            return "waiting for a signal (it handles %s)" % note.text
    return None


def _sleeps_in_c(t):
    """The innermost line calls no sleep, so a C call under it sleeps: a retry loop, such as
    SQLite's busy handler waiting for another connection's lock, not a pause between rounds."""
    code = t.code.get(0)
    return code is not None and "sleep" not in code


def _kernel(t):
    """The kernel's words for what the thread is blocked in (`blocked: ...` notes), or ''."""
    return " ".join(s.text for s in notes.every(t.notes, notes.State) if not s.busy)


def _busy(t):
    return any(s.busy for s in notes.every(t.notes, notes.State))


def _library_loop(t):
    """A library's own run loop (no frame of the user's), itself the innermost frame: between two
    rounds it sleeps or does its own work, such as Ray's log monitor reading log files."""
    return bool(t.frames) and parked.run_loop(t.frames[0].function) and all(library(f.file) for f in t.frames)


def _in_task(frames):
    """Is some frame of the user's called by a library frame that runs it as a task?"""
    for i, frame in enumerate(frames[:-1]):
        caller = frames[i + 1]
        if not library(frame.file) and library(caller.file) and not _entry(caller):
            return True
    return False


def _entry(frame):
    return any(is_file(frame.file, suffix) and (funcs is None or frame.function in funcs) for suffix, funcs in _ENTRY)


def _loop_tasks(t):
    """An event loop waits for work when each pending task is a library's own, or awaits a server,
    a queue, a sleep or a client's next request on a connection its server accepted; a task of the
    user's awaiting anything else (a reply) is stuck."""
    loop = notes.first(t.notes, notes.Asyncio)
    chains = task_chains(t.notes)
    if loop is None or loop.count is None:
        return None if any(not library(f.file) for f in t.frames) else _LOOP_WORK
    if loop.count > len(chains):
        return None  # not every task was written: nothing can be said of the rest
    serves = loop.serves
    for _name, frames, awaiting in chains:
        if awaiting == notes.SERVER_READ:
            continue  # a server's connection handler waiting for its client's next request
        if serves and _parked(frames, awaiting):
            continue  # `await asyncio.Future()` beside a server: serve until stopped
        if any(not library(path) for path, _line, _func in frames) and \
                not parked.awaits_work([(path, func) for path, _line, func in frames]):
            return None
    if serves:
        return "waiting for connections in an asyncio server on " + serves
    return _LOOP_WORK


def _parked(frames, awaiting):
    """Does the task's own coroutine await, itself, a bare Future or an asyncio Event (`await
    asyncio.Future()`, `await stop.wait()`)? Beside a server that is the idiom for "serve until
    stopped". A Future awaited deeper, inside a helper or a library (a reply, a read), is not."""
    sync = notes.parse_awaits_sync(awaiting)
    return (awaiting == "a Future" or sync is not None and sync.kind == "Event") and bool(frames) and \
        not library(frames[-1].file) and all(f.function == "wait" and is_file(f.file, "asyncio/locks.py")
                                             for f in frames[:-1])


