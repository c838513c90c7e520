"""Causes in the state of the object threads wait on (see causes.py): a barrier that can never
trip, a semaphore drained by failures that kept their permits, a condition whose notify came
before the wait (a lost wakeup), a queue nothing can fill, an event nothing can set, and in
asyncio a Future, Event, Condition or Queue nothing else refers to (its own `nothing completes:`
note). Each rests on
two notes of the dump (grammar/notes.py): the object's state under `waits for:` (a barrier's
parties, a semaphore's permits, `held by:`) and `can change it:` saying that no other live thread
refers to it (runtime/reach.py, which writes nothing where a thread could still be handed work
that might). One cause per object, naming every thread that waits on it and those that join them.
It reads the judged report and the folder's raw facts only; it never writes, prints or guesses."""
import re

from earlylog.read import frames
from earlylog.read.causes import Cause, label, place, secs, what
from earlylog.grammar import notes

_ARRIVED = re.compile(r"^(\d+) of (\d+) arrived$")
_FREE = re.compile(r"^(\d+)(?: of (\d+))? free$")
_NONE = "no other live thread refers to it"


def find(s):
    """The causes of one stalled process (s: thread_causes.Stall): one per object its threads wait
    on that nothing left can change."""
    groups = {}
    for t in s.threads:
        if t.wait and t.wait.kind in _FINDERS and not t.busy and not t.sleeping:  # a timed wait ends by itself
            groups.setdefault((t.wait.kind, t.wait.address), []).append(t)
    out = [_future(s.d, t, alone.task) for t in s.threads for alone in notes.every(t.notes, notes.NothingCompletes)]
    for (kind, _address), waiters in groups.items():
        reach = [notes.first(t.notes, notes.CanChange) for t in waiters]
        if all(r is not None and r.none and not r.after for r in reach):  # (a change after a join: the join's cause)
            joiners = [t for t in s.threads if t.joins and any(t.joins.ident == w.ident for w in waiters)]
            cause = _FINDERS[kind](s.d, s.p, sorted(waiters, key=lambda t: (not t.main, t.name)), joiners)
            out += [cause] if cause is not None else []
    return out


def _barrier(d, p, waiters, joiners):
    m = _ARRIVED.match(waiters[0].wait.detail or "")
    if m is None:
        return None
    arrived, parties = int(m.group(1)), int(m.group(2))
    missing = parties - arrived
    died = _deaths(p)
    return Cause("barrier-short", "%s: %s can never trip: %d of its %d parties have arrived (%s %s), and %s, so "
                                  "the %s never come%s%s" % (
                                      label(d), what(waiters[0].wait), arrived, parties, _names(waiters),
                                      _waiting(waiters), _NONE,
                                      "last party" if missing == 1 else "last %d parties" % missing,
                                      "s" if missing == 1 else "", _joined(joiners) + died),
                 "make the barrier for as many parties as threads that call its wait() (threading.Barrier(len("
                 "threads))), and give wait() a timeout: a party that never comes then breaks the barrier "
                 "(BrokenBarrierError in every party) instead of hanging them",
                 [d.pid], _thread_names(waiters, joiners))


def _semaphore(d, p, waiters, joiners):
    m = _FREE.match(waiters[0].wait.detail or "")
    held = [notes.first(t.notes, notes.HeldBy) for t in waiters]
    if m is None or int(m.group(1)) != 0 or not all(h is not None and h.name is None and not h.self and not h.gone
                                                     for h in held):
        return None  # permits left, or a holder the lock cause tells
    start = " of its %s" % m.group(2) if m.group(2) else ""
    name = _expr(waiters[0].wait, "sem")
    return Cause("semaphore-drained", "%s: %s has 0%s permits free and no thread holds one (no stack shows one "
                                      "taken): they were taken by acquire()s whose release() never came, and %s, "
                                      "so %s %s forever%s%s" % (
                                          label(d), what(waiters[0].wait), start, _NONE, _names(waiters),
                                          _waiting(waiters), _joined(joiners), _failures(d, p)),
                 "release on every path: `with %s:` (or try/finally: %s.release()) around the work that can fail "
                 "after the acquire() in %s" % (name, name, frames.where(waiters[0].frame)),
                 [d.pid], _thread_names(waiters, joiners))


def _condition(d, p, waiters, joiners):
    if p.deaths:
        return None  # a thread that died: the dead-thread cause tells it, with its exception
    predicate = any(f.function == "wait_for" and frames.is_file(f.file, "threading.py") for f in waiters[0].frames)
    if predicate:
        return Cause("condition-unnotified", "%s: %s %s in wait_for() for %s whose predicate is false, and %s: "
                                             "nothing can make it true and notify%s" % (
                                                 label(d), _names(waiters), _waiting(waiters), what(waiters[0].wait),
                                                 _NONE, _joined(joiners)),
                     "find the code meant to change the state and notify (a thread that ended before it, a path "
                     "that skips it), and give wait_for() a timeout", [d.pid], _thread_names(waiters, joiners))
    return Cause("lost-wakeup", "%s: %s %s in wait() for a notify on %s, with no predicate, and %s: no notify can "
                                "come. A notify made before the wait began wakes no one and is not kept (a lost "
                                "wakeup)%s" % (label(d), _names(waiters), _waiting(waiters), what(waiters[0].wait),
                                               _NONE, _joined(joiners)),
                 "wait for the state, not the notify: keep a flag or value beside the condition and call "
                 "%s.wait_for(lambda: <it is ready>), which returns at once when it already is (and give it a "
                 "timeout)" % _expr(waiters[0].wait, "cond"), [d.pid], _thread_names(waiters, joiners))


def _queue(d, p, waiters, joiners):
    if waiters[0].wait.detail != "get" or p.deaths:
        return None  # room in a full queue, or a join (the consumer's or task_done()'s causes tell those), or
        # a producer that died (the dead-thread cause tells it, with its exception)
    why = "%s %s for %s in join: no end of work (a sentinel) was ever sent" % (
        _names(joiners), "waits" if len(joiners) == 1 else "wait", "it" if len(waiters) == 1 else "them") \
        if joiners else "the producer ended, by a return or an exception it caught"
    return Cause("queue-orphaned", "%s: %s %s for an item from %s, and %s: nothing can put one in it (%s)" % (
        label(d), _names(waiters), _waiting(waiters), what(waiters[0].wait), _NONE, why),
                 "make the producer put a sentinel (or its exception) on the queue on every path out (try/finally), "
                 "and give get() a timeout with a check of the producer's is_alive()",
                 [d.pid], _thread_names(waiters, joiners))


def _event(d, p, waiters, joiners):
    if p.deaths:
        return None
    return Cause("event-unset", "%s: %s %s for %s, which is not set, and %s: nothing can set it%s" % (
        label(d), _names(waiters), _waiting(waiters), what(waiters[0].wait), _NONE, _joined(joiners)),
                 "find the code meant to call set() on it (a thread that ended before it, a path that skips it): "
                 "set it in a finally, and give wait() a timeout", [d.pid], _thread_names(waiters, joiners))


def _future(d, t, task):
    """An asyncio task awaiting, in its own code, a bare Future or an asyncio Event, Condition or
    Queue that no other task, callback, reader or thread refers to."""
    chain, awaiting = next(((chain, awaiting) for name, chain, awaiting in frames.task_chains(t.notes)
                            if name == task), ([], None))
    user = frames.user_frame(chain)
    where = " in %s" % frames.where(user) if user else ""
    sync = notes.parse_awaits_sync(awaiting or "")
    if sync is not None:
        verb = {"Event": "set it", "Condition": "notify it", "Queue": "put an item in it"}.get(
            sync.kind[len("Priority"):] if sync.kind.startswith("Priority") else
            sync.kind[len("Lifo"):] if sync.kind.startswith("Lifo") else sync.kind, "change it")
        return Cause("async-unset", "%s: asyncio task %s awaits %s%s that no other task, callback, reader or thread "
                                    "refers to: nothing can %s" % (label(d), task, frames.sync_name(sync), where, verb),
                     "find the code meant to %s (a task that ended before it, a path that skips it), and await it "
                     "under asyncio.wait_for(..., timeout)" % verb, [d.pid], [t.name])
    return Cause("future-orphaned", "%s: asyncio task %s awaits a Future%s that no other task, callback, reader or "
                                    "thread refers to: nothing can complete it (its set_result() was never "
                                    "registered, or the reply that would reach it was dropped)" % (
                                        label(d), task, where),
                 "find the code meant to call set_result() on it (a table of pending replies it was taken out of, "
                 "a callback never registered), and await it under asyncio.wait_for(..., timeout) so a lost reply "
                 "becomes an error", [d.pid], [t.name])


_FINDERS = {"barrier": _barrier, "semaphore": _semaphore, "condition": _condition, "queue": _queue,
            "event": _event}


def _names(waiters):
    """`thread a`, `threads a and b`, `threads a, b and c`."""
    names = [t.name for t in waiters]
    if len(names) == 1:
        return "thread " + names[0]
    return "threads %s and %s" % (", ".join(names[:-1]), names[-1])


def _waiting(waiters):
    """`waits in scan at a.py:6`, `wait in scan at a.py:6`, or `wait at a.py:6 and b.py:9`."""
    places = []
    for t in waiters:
        here = frames.where(t.frame) if t.frame else place(None)
        if here not in places:
            places.append(here)
    verb = "waits" if len(waiters) == 1 else "wait"
    return "%s in %s" % (verb, " and ".join(places[:3]) + (" and elsewhere" if len(places) > 3 else ""))


def _joined(joiners):
    if not joiners:
        return ""
    return "; %s %s for them in join" % (_names(joiners), "waits" if len(joiners) == 1 else "wait")


def _deaths(p):
    """`; thread loader died with ValueError: x in load at a.py:3` for the threads that died of an exception."""
    return "".join("; thread %s died with %s" % (death.thread, death.text.partition("\\n")[0])
                   for death in p.deaths[-2:])


def _failures(d, p):
    """`; the program reported 3 failures before the wait: "upload failed: 0" (2.1 s after start), ...`"""
    since = d.stall.since if d.stall is not None and d.stall.since is not None else None
    before = [(when, text) for when, text in p.failures if since is None or when is None or when <= since]
    if not before:
        return ""
    shown = ", ".join('"%s"%s' % (text if len(text) <= 100 else text[:97] + "...",
                                  " (%s after start)" % secs(when - p.first) if None not in (when, p.first) else "")
                      for when, text in before[-3:])
    return "; the program reported %d failure%s before: %s" % (p.failed, "" if p.failed == 1 else "s", shown)


def _expr(wait, default):
    """The object as the program's code names it (`self.slots`), for code in a next step."""
    return wait.name if wait.name != "?" else default


def _thread_names(waiters, joiners):
    return [t.name for t in waiters] + [t.name for t in joiners]
