"""The rich stack dump: every thread's name, ids, daemon flag, kernel state, phase and frames,
plus each pending asyncio task's await chain (`task NAME: FILE:LINE in CORO > ... > awaiting WHAT`,
WHAT being `a Future`, `task NAME`, `gather of N tasks`, notes.SERVER_READ or the object's repr), the
addresses the loop serves, and aio.py's lines (the task a blocked loop runs, tasks that died
unheard); under a thread running gevent's or eventlet's hub, its waiting greenlets
(greenlets.py); notebook cells by their In[N] names (cells.py). It only reads; it must never
block or raise."""
import _collections
import sys
import time

from earlylog.grammar import notes, records
from earlylog.runtime import cells, greenlets, introspect, peers, retries, signals, waits
from earlylog.runtime import threads as our_threads

MAX_FRAMES = 40
_DEQUE = _collections.deque
SAMPLE = 0.2  # seconds between two CPU readings, to tell a busy thread from a blocked one


def cpu_shares():
    """{native tid: share of a core it ran or queued for over SAMPLE seconds}, and their sum."""
    from earlylog.runtime import kstate
    before = {tid: kstate.cpu_seconds(tid) for tid in kstate.tids()}
    start = time.monotonic()
    our_threads.sleep(SAMPLE)  # time.sleep may be gevent's by now
    took = time.monotonic() - start
    shares = {}
    for tid, spent in before.items():
        after = kstate.cpu_seconds(tid)
        if spent is not None and after is not None:
            shares[tid] = (after - spent) / took
    return shares, sum(shares.values())


def lines(shares=None, skip_ident=None):
    """The continuation lines of a `dump:` event, one block per Python thread; (lines, count)."""
    from earlylog.runtime import kstate, phases
    frames = our_threads.current_frames()
    threads = our_threads.program_threads()
    main = our_threads.main_ident()
    natives = our_threads.native_ids()
    shares = shares or {}
    out, reached = [], {}  # (who can change each waited object: one search for all its waiters)
    for ident, frame in sorted(frames.items(), key=lambda item: item[0] != main):
        if ident == skip_ident:
            continue
        thread = threads.get(ident)
        # Ours first: threading's native_id of the main thread is the parent's after a fork (3.11).
        tid = natives.get(ident) or getattr(thread, "native_id", None)
        ours = our_threads.name_of(ident)
        name = thread.name if thread is not None else ours or (
            "MainThread" if ident == main else "(no threading.Thread)")
        daemon = ours is not None or (thread is not None and thread.daemon)
        out.append(notes.thread_head(name, tid, ident, daemon, ident == main))
        state = _state(kstate, tid, shares)
        for part in (lambda: [notes.INDENT + state] if state else [],
                     lambda: _handles(state) if ident == main else [],
                     lambda: _terminal(tid, frame, ident == main) if tid else [],
                     lambda: [notes.phase(phases.describe(ident))] if phases.describe(ident) else [],
                     lambda: waits.notes(ident, frame, frames, threads, reached),
                     lambda: _collective(ident, frame),
                     lambda: peers.lines(tid, ident, frame) if tid else [],
                     lambda: retries.lines(ident, frame),
                     lambda: cells.notes(frame),
                     lambda: frame_lines(frame),
                     lambda: _asyncio_lines(frame),
                     lambda: greenlets.lines(frame, state)):
            try:
                out.extend(line for line in part() if line.strip())
            except Exception as exc:  # one odd thread must not cost the dump of the others
                out.append("  (earlylog could not read this part: %r)" % (exc,))
    native = len(kstate.tids()) - len(frames)
    if native > 0:
        out.append("(%d more OS thread%s with no Python stack: faulthandler's timer, native libraries such as "
                   "OpenMP, CUDA, gloo)" % (native, "" if native == 1 else "s"))
    return out, len(frames) - (1 if skip_ident in frames else 0)


def _collective(ident, frame):
    """The `collective:` note (runtime/collectives.py), read only where torch.distributed is loaded:
    any other process never loads that module (the watchdog's memory is a budget)."""
    if "torch.distributed" not in sys.modules:
        return []
    from earlylog.runtime import collectives
    return collectives.lines(ident, frame)


def _state(kstate, tid, shares):
    """The thread's kernel state in words, or None (unknown tid, or one that could not be read)."""
    try:
        return kstate.describe(tid, shares.get(tid)) if tid else None
    except Exception:
        return None


def _terminal(tid, frame, main):
    """`terminal: waiting for input at the terminal (input())` for a thread a person answers."""
    from earlylog.runtime import terminal
    line = terminal.note(tid, frame, main)
    return [line] if line else []


def _handles(state):
    """For a main thread waiting for a signal (signal.pause, sigwait): the program's Python handlers,
    `handles: SIGHUP with reload at app.py:12`, which say what it waits to be told."""
    if not state or "waiting for a signal" not in state:
        return []
    found = signals.handlers()
    return [notes.handles(found)] if found else []


def frame_lines(frame):
    """notes.frame_line()'s lines, most recent call first, at most MAX_FRAMES."""
    from earlylog.runtime import fds
    out = []
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        lines = fds.getlines(code.co_filename)  # linecache's, read through a high descriptor
        source = lines[frame.f_lineno - 1].strip() if 0 < frame.f_lineno <= len(lines) else ""
        out.append(notes.frame_line(code.co_filename, frame.f_lineno, code.co_name, source))
        frame = frame.f_back
    if frame is not None:
        out.append(notes.INDENT + "... (older frames cut)")
    return out


def _asyncio_lines(frame):
    """A thread running an event loop is parked in select; its tasks show where it really waits."""
    loop = running_loop(frame)
    if loop is None:
        return []
    import asyncio
    from earlylog.runtime import aio
    found = aio.lines(frame, loop)  # the task it runs, if any; its tasks that died unheard
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    except RuntimeError:  # the task set changed while we read it; the next dump will have it
        return [notes.ASYNCIO_CHANGED] + found
    serving = _serving(loop)
    out = [notes.asyncio(len(tasks), serving)]
    sockets = []
    walks = [(task.get_name(), _walk(task.get_coro())) for task in tasks[:50]]
    shown = [(name, frames) for name, (frames, _end) in walks]
    for task, (name, (frames, end)) in zip(tasks, walks):
        out.append(notes.task(name, await_chain(frames, end, _waiter(task),
                                                lambda obj, name=name: _task_holder(obj, name, shown))))
        sockets += _client_read(frames)
    from earlylog.runtime import reach
    out += [notes.nothing_completes(name) for name in reach.alone(
        loop, [(task, name, frames) for task, (name, (frames, _end)) in zip(tasks, walks)], our_threads.current_frames())]
    # Under the tasks: a thread note, as a blocking socket call's own (read/process_causes.py).
    return out + found + [notes.socket_line(text) for text in sockets[:8]]


def _client_read(frames):
    """The `socket:` line of a task (the frames of its await chain) awaiting a reply on a client
    connection (a stream read on a transport no server accepted), ending `; awaited in FUNC at
    FILE:LINE`, the task's own innermost frame; [] for anything else."""
    last = frames[-1] if frames else None
    user = next((f for f in reversed(frames) if "/asyncio/" not in f.f_code.co_filename), None)
    streams = sys.modules.get("asyncio.streams")
    if last is None or user is None or streams is None or last.f_code.co_filename != streams.__file__:
        return []
    reader = introspect.frame_locals(last).get("self")
    if type(reader) is not streams.StreamReader or server_read(last):
        return []
    try:
        sock = vars(vars(reader).get("_transport")).get("_sock")
    except TypeError:
        return []
    import _socket
    if not isinstance(sock, _socket.socket):
        return []
    text = peers.socket_line(_socket.socket.fileno(sock), "read")
    return [notes.awaited(text, records.place(user.f_code.co_name, user.f_code.co_filename, user.f_lineno))] \
        if text else []


def _serving(loop):
    """The addresses this loop accepts connections on, read from its selector (asyncio keeps no
    list of its servers): a listening socket's reader is the loop's own _accept_connection. A loop
    with no stdlib selector (uvloop) says nothing."""
    import asyncio
    import selectors
    selector = vars(loop).get("_selector")
    if not isinstance(selector, selectors.BaseSelector) or type(selector).__module__ != "selectors":
        return []
    import socket
    out = []
    for key in list(selector.get_map().values())[:1000]:
        reader = key.data[0] if type(key.data) is tuple and key.data else None
        if type(reader) is not asyncio.Handle or getattr(reader._callback, "__name__", None) != "_accept_connection":
            continue
        sock = reader._args[1] if len(reader._args) > 1 else None  # (protocol_factory, sock, ...)
        if type(sock) is socket.socket:
            try:
                name = sock.getsockname()
            except OSError:
                continue
            out.append("%s:%s" % name[:2] if type(name) is tuple else str(name) or "a Unix socket")
    return out[:8]


def _waiter(task):
    """What a task's bare `await` waits on, where that is other tasks: `task NAME`, or `gather of N
    tasks`; else None. Read from the task's own `_fut_waiter` slot, which asyncio keeps for it."""
    import asyncio
    waiter = getattr(task, "_fut_waiter", None)
    if isinstance(waiter, asyncio.Task):
        return "task " + waiter.get_name()
    children = getattr(waiter, "_children", None) if type(waiter) is getattr(asyncio.tasks, "_GatheringFuture", None) \
        else None
    return "gather of %d tasks" % len(children) if type(children) is list else None


def running_loop(frame):
    while frame is not None:
        if frame.f_code.co_name == "run_forever" and "asyncio" in frame.f_code.co_filename:
            return frame.f_locals.get("self")
        frame = frame.f_back
    return None


def task_chains(frame):
    """For each pending task on the event loop that the thread whose innermost frame is `frame`
    runs: ([(file, function) of its coroutine frames, outermost first], whether its innermost frame
    is a stream read on a connection a server accepted); None when it runs no loop. The tasks are
    read as aio.py reads them: no method of theirs is called."""
    loop = running_loop(frame)
    if loop is None:
        return None
    from earlylog.runtime import aio
    return [(chain, last is not None and server_read(last)) for chain, last in aio.pending_chains(loop)]


def _walk(coro):
    """(the frames of a coroutine's await chain, outermost first; what its innermost one awaits
    that has no frame, a Future's iterator say, or None)."""
    frames = []
    while coro is not None and len(frames) < MAX_FRAMES:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            return frames, coro
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return frames, None


def await_chain(frames, end, waiter=None, holder=None):
    """['main.py:10 in worker', 'main.py:20 in fetch', 'awaiting <Future pending>'], outermost first,
    of a task's await chain as _walk() reads it; a bare Future at the end is named by waiter (`task
    NAME`) when that is known, else by the stream read or the asyncio lock, event, semaphore or
    queue the frames before it are in (holder(obj): who holds such a lock)."""
    chain = [notes.frame(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) for f in frames]
    if end is not None:
        if type(end).__name__ == "FutureIter":  # a bare Future's iterator, which says nothing more
            last = frames[-1] if frames else None
            what = waiter or (notes.SERVER_READ if last is not None and server_read(last) else
                              _async_sync(frames, holder) or "a Future")
        else:
            what = _short(end)
        chain.append("awaiting " + what)
    return chain


# asyncio's primitives whose waits end in a bare Future, by the file of the method a task waits in
_ASYNC_SYNCS = {"locks.py": ("Lock", "Event", "Condition", "Semaphore", "BoundedSemaphore"),
                "queues.py": ("Queue", "PriorityQueue", "LifoQueue")}


def _async_sync(frames, holder):
    """notes.awaits_sync() of the asyncio lock, event, condition, semaphore or queue whose method
    the innermost frames wait in (its `self`; the outermost of them: Queue.join waits in an Event's
    wait), named as the code that awaits it writes it (`lock`, `self.jobs`), with who holds a lock
    or semaphore; None for any other Future."""
    found = None
    for i in range(len(frames) - 1, -1, -1):
        folder, _, base = frames[i].f_code.co_filename.rpartition("/")
        if not folder.endswith("asyncio"):
            break
        obj = introspect.frame_locals(frames[i]).get("self") if base in _ASYNC_SYNCS else None
        kind = next((k for k in _ASYNC_SYNCS.get(base, ()) if type(obj) is introspect.stdlib("asyncio." + base[:-3], k)),
                    None)
        if kind is not None:
            found = i, obj, kind
    if found is None:
        return None
    i, obj, kind = found
    user = frames[i - 1] if i else None
    name = waits.name_of(user, obj, anywhere=True) if user is not None else None
    who, where, detail = None, "", None
    if kind in ("Lock", "Semaphore", "BoundedSemaphore", "Condition") and holder is not None:
        target = introspect.field(obj, "_lock") if kind == "Condition" else obj
        who, where = holder(target) or (None, "")
    if kind in ("Semaphore", "BoundedSemaphore"):
        value = introspect.field(obj, "_value")
        detail = "%d free" % value if type(value) is int else None
    elif kind.endswith("Queue"):
        detail = _queue_detail(obj, frames[i].f_code.co_name)
    return notes.awaits_sync(kind, name, who, where, detail)


def _queue_detail(queue, method):
    """`empty` (a get), `full` (a put), `join, 2 unfinished, 0 queued`: an asyncio Queue's wait, read
    from its fields (a deque or list: len() runs no program code)."""
    items, unfinished = introspect.field(queue, "_queue"), introspect.field(queue, "_unfinished_tasks")
    if type(items) not in (list, _DEQUE):
        return None
    if method == "join" and type(unfinished) is int:
        return "join, %d unfinished, %d queued" % (unfinished, len(items))
    return {"get": "empty" if not items else None, "put": "full"}.get(method)


def _task_holder(obj, me, shown):
    """(THIS_TASK or `task NAME`, notes.held_where() text) of the task whose await chain holds obj
    (an `async with` block or an `acquire()` not released since), this task first; else None."""
    from earlylog.runtime import holders
    for name, frames in sorted(shown, key=lambda pair: pair[0] != me):
        for frame in frames:
            for text, ids in holders.held_in(frame, depth=1):
                if id(obj) in ids:
                    return (notes.THIS_TASK if name == me else "task " + name), text
    return None


def server_read(frame):
    """Is this frame a stream read (`reader.readline()`) on a connection an asyncio server accepted?
    Such a read waits for the client's next request: a server's idle, not a reply that never comes.
    The transport a server accepted keeps that server in its `_server` slot; a client's is None."""
    streams = sys.modules.get("asyncio.streams")
    if streams is None or frame.f_code.co_filename != getattr(streams, "__file__", None):
        return False
    reader = introspect.frame_locals(frame).get("self")
    if type(reader) is not getattr(streams, "StreamReader", None):  # exactly: no subclass's code runs
        return False
    try:
        transport = vars(reader).get("_transport")
        return type(transport).__module__ == "asyncio.selector_events" and \
            vars(transport).get("_server") is not None
    except TypeError:  # a transport without an instance dict: not one a server made
        return False


def _short(obj):
    text = repr(obj)
    return text if len(text) <= 200 else text[:200] + "..."
