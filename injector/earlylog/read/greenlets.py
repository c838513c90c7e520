"""gevent's and eventlet's greenlets as the reader tells them: a thread parked in a hub (`run at
hub.py:647`) waits where its greenlets wait, read from the `greenlet:` notes the runtime wrote
under it (runtime/greenlets.py). It says where a stalled hub's program waits (the place of the
stall), whether the hub only waits for work (idle: a server waiting for clients, nothing
pending), and the causes: which greenlet waits on what, with a next step. Pure functions of the
dump's threads; they never read files or raise."""
import re

from earlylog.read.causes import Cause, label
from earlylog.read.frames import is_file, library, user_frame, where
from earlylog.read.model import as_frames
from earlylog.grammar import notes
# Waits that mean a greenlet waits for work: a server's loop; a main greenlet joining the others
# (joinall, join) waits where they wait, so it decides nothing by itself.
_WORK = ("server",)
_FOLLOW = ("joinall", "greenlet join", "hub join")
_ORDER = ("lock", "event", "result", "queue", "socket", "sleep")


class Greenlet:
    """One waiting greenlet: its name, frames (innermost first), the wait's words and kind."""

    def __init__(self, note):
        self.name, self.frames, self.wait = note.name, as_frames(note.frames), note.wait
        self.kind, self.expr, self.type = note.kind, note.expr, note.type
        self.holder, self.how, self.socket = note.holder, note.how, note.socket

    @property
    def served(self):
        """A server's handler waiting for its client's next request: a read on a connection whose
        local port a socket of this process listens on (`..., ESTABLISHED, server; ...`)."""
        return self.base == "socket" and bool(self.socket) and ", server; " in self.socket

    @property
    def base(self):
        """`queue` for `queue get`, `socket` for `socket recv`, else the kind."""
        k = self.kind or ""
        return k.split(" ")[0] if k.startswith(("queue ", "socket ")) else k

    def what(self):
        """`event `ready` (gevent.event.Event)`, the wait in words."""
        return self.wait[len("waits on "):] if self.wait.startswith("waits on ") else self.wait


def in_hub(frames):
    """Is the thread parked in a hub's loop: gevent's run() the innermost frame, or eventlet's run()
    with only library frames (its poll) inside?"""
    if frames and frames[0].function == "run" and is_file(frames[0].file, "gevent/hub.py"):
        return True
    for path, _line, func in frames[:6]:
        if func == "run" and is_file(path, "eventlet/hubs/hub.py"):
            return True
        if not library(path):
            return False
    return False


def of(t):
    """The greenlets a dumped thread's notes list, or None when it is not a hub with its list."""
    if not in_hub(t.frames) or not any(g.count is not None for g in notes.every(t.notes, notes.Greenlets)):
        return None
    return [Greenlet(g) for g in notes.every(t.notes, notes.Greenlet)]


def idle(t):
    """`waiting for clients in a gevent server` when the hub's greenlets only wait for work (none,
    or a server's loop and those joining it); None otherwise or when not a hub."""
    found = of(t)
    if found is None:
        return None
    if any(g.kind in _WORK for g in found):
        rest = [g for g in found if g.kind not in _WORK and g.kind not in _FOLLOW and not g.served]
        return "waiting for clients in %s server" % ("an eventlet" if _lib(t) == "eventlet" else "a gevent") if not rest else None
    return "waiting for work in %s's hub (no greenlet waiting)" % _lib(t) if not found else None


def awaited(main, named=None):
    """(frame, `greenlet waiter waits on event `ready` there`) for a hub whose user greenlets wait:
    the one a stall names as stuck while the others ran, else the first by _ORDER; else None."""
    found = _ranked(of(main) or [], named)
    if not found:
        return None
    g = found[0]
    return user_frame(g.frames), "greenlet %s waits on %s there" % (g.name, g.what())


def _lib(t):
    """`gevent` or `eventlet`: whose hub the thread runs, from its `greenlets:` note."""
    return next((g.lib for g in notes.every(t.notes, notes.Greenlets) if g.count is not None), "gevent")


def _ranked(found, named=None):
    """The user's greenlets waiting on something themselves (not joins of others), most telling
    first: the one a stall names as stuck (`named`) before the rest."""
    own = [g for g in found if g.frames and any(not library(f.file) for f in g.frames)
           and g.base in _ORDER and not g.served]
    return sorted(own, key=lambda g: (g.name != named, _ORDER.index(g.base)))


def causes(d, threads, named=None):
    """The causes of a stalled process whose thread runs a hub (gevent's, eventlet's): each greenlet of the
    user's that waits on something (three at most; the one the stall names, `named`, first), with a
    next step."""
    out = []
    for t in threads:
        found = of(t)
        if not found or idle(t):
            continue
        for g in _ranked(found, named)[:3]:
            if g.base == "sleep":
                continue
            text, step = _words(g, found)
            out.append(Cause("greenlet", "%s: greenlet %s waits on %s in %s, under %s's hub in thread %s%s" % (
                label(d), g.name, g.what(), where(user_frame(g.frames)), _lib(t), t.name, text), step, [d.pid],
                [t.name]))
    return out


def _words(g, found):
    expr = g.expr or "it"
    if g.base == "lock":
        if g.holder:
            holder = next((h for h in found if h.name == g.holder), None)
            now = " and now waits on %s in %s" % (holder.what(), where(user_frame(holder.frames))) if holder else ""
            how = re.sub(r" at (?:.*/)?([^/]+:\d+) in ", r" at \1 in ", g.how)  # `with block at x.py:9 in f`
            return ("; greenlet %s holds it (%s)%s" % (g.holder, how, now),
                    "keep waits (sleeps, I/O, other locks) out of greenlet %s's `with %s:` block, or release it "
                    "before them" % (g.holder, expr))
        return ("; no waiting greenlet's stack shows it taken",
                "look for a %s.acquire() whose release() is skipped on some path; `with %s:` releases on every path"
                % (expr, expr))
    if g.base in ("event", "result"):
        return ("; nothing has set it", "find the code meant to call %s.set() (a greenlet that raised or never ran), "
                                        "and give the wait a timeout (%s.wait(timeout=...)) so a lost set() shows"
                % (expr, expr) if g.base == "event" else
                "find the code meant to call %s.set() or set_exception(); %s.get(timeout=...) makes a lost result "
                "an error" % (expr, expr))
    if g.base == "queue":
        if g.kind == "queue put":
            return "; the queue is full", "find why the consumer of %s stopped getting, or put(timeout=...)" % expr
        return ("; nothing puts into it", "find the producer of %s (did it raise or end early?), or "
                                          "get(timeout=...) so a missing item becomes an error" % expr)
    peer = notes.parse("socket: " + g.socket) if g.socket else None
    return ("; %s sends nothing" % (peer.remote if peer else "its peer"),
            "find why the peer of %s does not answer; %s.settimeout(...) or "
            "a Timeout (gevent's, eventlet's) turns the silence into an error" % (expr, expr))
