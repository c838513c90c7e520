"""The greenlets waiting on a gevent or eventlet hub, as extra dump lines under the thread that
runs the hub. A monkey-patched program's thread sits in the hub's loop (`run at hub.py:647`)
whenever every greenlet waits; the program's own work is in the greenlets the hub switches to.
Their stacks are read from each greenlet's `gr_frame` (its suspended frame), never by switching
to them. The lines (their grammar: grammar/notes.py):
  greenlets: N waiting on this thread's LIB hub[, M listed]      LIB: gevent or eventlet
  greenlet: NAME: FILE:LINE in FUNC > ... > waits on KIND[ `EXPR`] (TYPE)[; held by greenlet NAME; with
      block at FILE:LINE in FUNC | ; socket: peers.socket_line()'s words]   KIND: event, lock, queue get|put, greenlet join, joinall, socket OP,
      sleep, server, result; `waits in FUNC` when unknown. NAME: the function it runs, `main` for
      the thread's main greenlet. Frames are the program's (the library's own left out), outermost first.
  greenlets: not listed (REASON)
Greenlets are found by one scan of the garbage collector's objects (neither library keeps a list
of them), done only for a thread whose stack ends in the hub's run loop, and only while the heap
is small (MAX_BLOCKS) and the thread is not busy: a dump must stay cheap. It runs in the watchdog
thread at dump time, and for the progress look (runtime/stuck.py: waiting() and judge() tell a
greenlet that stayed at one wait while its hub ran the others); it never imports, switches, calls
the program's code (greenlet's own C descriptors are read, never a library's properties) or raises."""
import os
import sys

from earlylog.grammar import notes
from earlylog.runtime import holders, introspect, peers

MAX_BLOCKS = 1000000  # allocated memory blocks (about 2.5 per object) above which the heap is not scanned:
                      # the scan takes about 10 ms per 100,000 objects, holding the GIL
MAX_LISTED = 30       # greenlets written per hub
MAX_CHAIN = 12        # frames per greenlet
MAX_SOCKETS = 8       # socket waits described per hub (each reads /proc/net/tcp: milliseconds)
# The libraries' own waits, known by the function of their pure-Python frames inside the user's
# call (gevent's are mostly compiled: its waits are read from the user's call instead).
_FRAMES = (("gevent/hub.py", "sleep", "sleep"), ("gevent/thread.py", "acquire", "lock"),
           ("gevent/baseserver.py", "serve_forever", "server"), ("gevent/_socketcommon.py", None, "socket"),
           ("gevent/_socket3.py", None, "socket"), ("gevent/ssl.py", None, "socket"), ("gevent/hub.py", "join", "hub join"),
           ("eventlet/greenthread.py", "sleep", "sleep"), ("eventlet/semaphore.py", None, "lock"),
           ("eventlet/lock.py", None, "lock"), ("eventlet/event.py", "wait", "event"),
           ("eventlet/queue.py", "get", "queue"), ("eventlet/queue.py", "put", "queue"),
           ("eventlet/greenio/base.py", None, "socket"), ("eventlet/greenthread.py", "wait", "greenlet join"),
           ("eventlet/wsgi.py", "server", "server"), ("eventlet/convenience.py", "serve", "server"))
# (kind, label, module, class) of the objects a greenlet waits on, read from the user's call.
_OBJECTS = (("lock", "threading.Lock, patched by gevent", "gevent.thread", "LockType"),
            ("event", "gevent.event.Event", "gevent.event", "Event"),
            ("result", "gevent.event.AsyncResult", "gevent.event", "AsyncResult"),
            ("lock", "gevent.lock.RLock", "gevent.lock", "RLock"),
            ("lock", "gevent.lock.BoundedSemaphore", "gevent.lock", "BoundedSemaphore"),
            ("lock", "gevent.lock.Semaphore", "gevent.lock", "Semaphore"),
            ("queue", "gevent.queue.Queue", "gevent.queue", "Queue"),
            ("queue", "gevent.queue.JoinableQueue", "gevent.queue", "JoinableQueue"),
            ("queue", "gevent.queue.SimpleQueue", "gevent.queue", "SimpleQueue"),
            ("greenlet join", "gevent.Greenlet", "gevent.greenlet", "Greenlet"),
            ("socket", "socket.socket, patched by gevent", "gevent._socket3", "socket"),
            ("lock", "threading.Lock, patched by eventlet", "eventlet.lock", "Lock"),
            ("lock", "eventlet.semaphore.Semaphore", "eventlet.semaphore", "Semaphore"),
            ("event", "eventlet.event.Event", "eventlet.event", "Event"),
            ("queue", "eventlet.queue.Queue", "eventlet.queue", "LightQueue"),
            ("greenlet join", "eventlet.GreenThread", "eventlet.greenthread", "GreenThread"),
            ("socket", "socket.socket, patched by eventlet", "eventlet.greenio.base", "GreenSocket"))
_OWN = ("/gevent/", "/eventlet/")
_HUB_DEPTH = 6  # frames from the innermost to eventlet's hub run(): its poll, a sleep
_JOINS = ("joinall", "wait", "iwait", "killall")


def lines(frame, state=None):
    """The dump lines for a thread whose innermost frame is `frame` and whose kernel state is `state`
    (stacks.py's words); [] unless it runs gevent's hub, and no scan while that thread is busy (its
    greenlets run: none is stuck)."""
    if (state or "").startswith("busy:"):
        return []
    hub = waiting(frame, MAX_BLOCKS)
    if hub is None:
        return []
    lib, found = hub
    if type(found) is int:
        return [notes.greenlets_unlisted("a heap of %d blocks is too large to scan during a dump" % found)]
    out = [notes.greenlets(len(found), lib, MAX_LISTED if len(found) > MAX_LISTED else None)]
    listed = [(main, top) for _obj, top, main in found[:MAX_LISTED]]
    sockets = [0]
    for main, top in listed:
        kind, text, obj = _wait(top)
        holder = _holder(obj, top, listed) if obj is not None and kind == "lock" else None
        more = notes.greenlet_holder(*holder) if holder else ""
        if obj is not None and (kind or "").startswith("socket") and sockets[0] < MAX_SOCKETS:
            sockets[0] += 1
            line = _socket_line(obj)
            more = notes.greenlet_socket(line) if line else ""
        out.append(notes.greenlet("main" if main else _name(top), _chain(top), text, more))
    return out


def waiting(frame, max_blocks):
    """(`gevent` or `eventlet`, [(greenlet, its suspended frame, whether it is its thread's main
    greenlet)]) of the greenlets waiting on the hub this thread's stack ends in (innermost frame
    `frame`); the list is the heap's size in blocks instead where that is above max_blocks (one
    scan of the garbage collector's objects takes about 15 ms per million); None when the stack
    ends in no hub's loop."""
    lib, hub_frame = _hub_frame(frame)
    if hub_frame is None:
        return None
    module = sys.modules.get("greenlet")
    base = vars(module).get("greenlet") if module is not None else None
    if not isinstance(base, type):
        return None
    blocks = sys.getallocatedblocks()
    if blocks > max_blocks:
        return lib, blocks
    read = {name: vars(base)[name].__get__ for name in ("gr_frame", "parent", "dead")}
    hub = introspect.frame_locals(hub_frame).get("self")
    if lib == "eventlet":
        hub = introspect.field(hub, "greenlet")  # eventlet's hub object runs in a greenlet of its own
    if not issubclass(type(hub), base):
        return None
    root = _root(hub, read)
    import gc
    found = []
    for obj in gc.get_objects():
        # issubclass of the exact type: isinstance would ask a proxy's __class__, running its code
        if issubclass(type(obj), base) and obj is not hub and not read["dead"](obj):
            top = read["gr_frame"](obj)
            if top is not None and _root(obj, read) is root:
                found.append((obj, top, read["parent"](obj) is None))
    return lib, found


# The waits the progress look can judge: on an object set once, by another greenlet, with the
# answer. A greenlet seen at one place at each look, waiting on the same such object, has had no
# answer since; one that waits on a lock, a resettable Event, a full queue or a socket may have
# got it and waited again in between (contention, backpressure, a stream of messages): no greenlet
# counts its own switches, so those are told only by a silent process's dump.
_ONE_SHOT = ("gevent.event.AsyncResult", "eventlet.event.Event")


def judge(top, main):
    """(its name as a dump gives it, `waits on result `reply` (gevent.event.AsyncResult) in fetch at
    app.py:9`, the object) for a waiting greenlet (its suspended frame `top`) that waits on an
    answer set once (_ONE_SHOT), else '': not for the main greenlet's event (a service told to stop)."""
    kind, text, obj = _wait(top)
    if obj is None or _object_kind(obj)[1] not in _ONE_SHOT or kind == "event" and main:
        return ""
    frame = top
    while frame is not None and _own(frame):
        frame = frame.f_back
    user = frame or top
    return "main" if main else _name(top), "%s in %s at %s:%d" % (
        text, user.f_code.co_name, os.path.basename(user.f_code.co_filename), user.f_lineno), obj



def _socket_line(sock):
    """peers.socket_line() for a patched socket: the real one is a field of it (gevent's `_sock`
    slot, eventlet's `fd`), read without running code; its role (`server` for a connection a server of this process
    accepted) tells a handler waiting for its client's next request from a client awaiting a reply."""
    import _socket
    for real in (sock, introspect.attribute(sock, "_sock")[1], introspect.attribute(sock, "fd")[1]):
        if isinstance(real, _socket.socket):
            return peers.socket_line(_socket.socket.fileno(real), "read")
    return ""


def _holder(lock, waiter, listed):
    """(name, `; with block at FILE:LINE in FUNC`) of the listed greenlet whose frames hold the
    lock a greenlet waits on, else None (read as holders.py reads a thread's, from the source)."""
    for main, top in listed:
        if top is waiter:
            continue
        for text, ids in holders.held_in(top):
            if id(lock) in ids:
                return ("main" if main else _name(top)), text
    return None


def _hub_frame(frame):
    """(`gevent` or `eventlet`, the hub's run() frame) when this stack ends in a hub's loop, else
    (None, None): gevent's run() is the innermost frame, eventlet's has its poll inside."""
    depth = 0
    while frame is not None and depth < _HUB_DEPTH:
        code = frame.f_code
        if code.co_name == "run":
            path = code.co_filename.replace("\\", "/")
            if path.endswith("/gevent/hub.py") and depth == 0:
                return "gevent", frame
            if path.endswith("/eventlet/hubs/hub.py"):
                return "eventlet", frame
        if not _own(frame) and "/lib/python" not in code.co_filename:
            break  # the user's code runs here: not a hub waiting
        frame = frame.f_back
        depth += 1
    return None, None


def _root(g, read):
    """The main greenlet of g's thread: the end of its parent chain."""
    for _ in range(1000):
        parent = read["parent"](g)
        if parent is None:
            return g
        g = parent
    return None


def _own(frame):
    """Is this frame the library's own (gevent's, eventlet's)?"""
    path = frame.f_code.co_filename.replace("\\", "/")
    return any(part in path for part in _OWN)


def _chain(top):
    """`FILE:LINE in FUNC` of the greenlet's frames, outermost first, gevent's own left out."""
    out = []
    frame = top
    while frame is not None and len(out) < MAX_CHAIN:
        if not _own(frame):
            out.append(notes.frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out[::-1]


def _name(top):
    """A greenlet's name: the function it was spawned with, its outermost frame not gevent's."""
    name, frame = None, top
    while frame is not None:
        if not _own(frame):
            name = frame.f_code.co_name
        frame = frame.f_back
    return name or top.f_code.co_name  # only the library's frames: its innermost function


def _wait(top):
    """(KIND or None, `waits on KIND `EXPR` (TYPE)` for the greenlet's innermost call, or `waits in
    FUNC`; the object it waits on (a lock, an event, a socket...), or None)."""
    kind, frame = None, top
    lib = None
    while frame is not None and _own(frame):  # the library's pure-Python frames inside the user's call
        lib = lib or ("eventlet" if "/eventlet/" in frame.f_code.co_filename.replace("\\", "/") else "gevent")
        path, func = frame.f_code.co_filename, frame.f_code.co_name
        kind = next((k for f, name, k in _FRAMES if path.replace("\\", "/").endswith("/" + f) and name in (None, func)),
                    kind)
        frame = frame.f_back
    if frame is None:
        return None, notes.waits_in(top.f_code.co_name), None
    for expr, attr, text in holders.calls_at(frame):  # the user's call: what it is made on
        found, value = introspect.resolve(expr, frame)
        if not found:
            continue
        what, label = _object_kind(value)
        if what is None and attr in _JOINS and kind is None:
            joined = "%s.%s" % (_library(value) or lib or "gevent", attr)
            return "joinall", notes.waits_on("joinall", None, joined), None
        if what is None and kind in ("sleep", "server", "hub join"):
            return kind, notes.waits_on(kind, None, lib or _library(value) or "gevent"), None
        if what is None and kind is None:
            continue
        what = what or kind
        if what in ("queue", "socket"):
            what += " " + attr
        return what, notes.waits_on(what, text if len(text) <= 80 else text[:77] + "...", label), value
    return kind, (notes.waits_on(kind) if kind else notes.waits_in(top.f_code.co_name)), None


def _library(value):
    """`gevent` or `eventlet` for a module (or object of one) of theirs, else None."""
    name = (introspect.instance_dict(value) or {}).get("__name__") if type(value) is type(sys) else \
        vars(type(value)).get("__module__")
    return name.partition(".")[0] if type(name) is str and name.partition(".")[0] in ("gevent", "eventlet") else None


def _object_kind(value):
    """(kind, label) of a gevent object a greenlet waits on, else (None, None)."""
    for kind, label, module, name in _OBJECTS:
        cls = _class(module, name)
        if cls is not None and introspect.isa(value, cls):
            return kind, label
    return None, None


def _class(module, name):
    found = sys.modules.get(module)
    cls = vars(found).get(name) if found is not None else None
    return cls if isinstance(cls, type) else None
