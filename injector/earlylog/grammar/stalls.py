"""The `stall:` line: the contract that alerts, EARLYLOG_STALL_EXIT and the report act on, with one
writer per shape and one parser that types it (tests/test_notes.py round-trips each). Its shapes:

  silent    silent for S s[ (phase P)]; STATE; stacks in PATH
            STATE is the process's state while nothing printed, each with its own words below:
            busy, idle, blocked, terminal (a person at a prompt), children (a launcher waiting for
            children that log on their own), collective (ranks waiting for peer ranks)
  noisy     [no training step for S s (...)][; ]thread T made no progress for S s while other threads
            kept printing; VERDICT[ (phase P)][ (and N more)] | task/greenlet N on thread T made no
            progress ...[; busy: ...]; stacks in PATH
  gil       the GIL was held for S s: ...
  over      over: activity again after S s of silence | over: progress again after S s

It owns the words and which stalls reach the console (console_silent, console_noisy). It must
never look at a process or a file, and stays cheap to import: the runtime loads it at its first
stall only."""
from earlylog.grammar.patterns import Patterns

# The states of a silent process, by the first words of their sentence.
BUSY, IDLE, BLOCKED, MOVING, TERMINAL, CHILDREN, COLLECTIVE = (
    "busy", "idle", "blocked", "moving", "terminal", "children", "collective")
IDLE_WORDS = "idle: every thread waits for work (a server, a worker's loop, an event loop)"
BLOCKED_WORDS = "blocked: no CPU used; each thread below says on what"
MOVING_WORDS = "waiting: no CPU used, but a thread of it ran since the last look (a timed wait, a poll loop, " \
    "a peer that answers); each thread below says on what"
TERMINAL_WORDS = "waiting for input at the terminal"
CHILDREN_WORDS = "waiting for child"
COLLECTIVE_WORDS = "in a collective: "
_STACKS = "; stacks in "
_OVER_SILENCE, _OVER_PROGRESS = "over: activity again after ", "over: progress again after "
GIL_WORDS = "the GIL was held for "

_REGEXES = {
    "silent": r"^silent for (\d+) s(?: \(phase (.*?)\))?; (.*); stacks in (.*)$",
    "busy": r"^busy: CPU time still rising \((\d+)% of a core\)",
    "no step": r"^no training step for (\d+(?:\.\d+)?) s \(((?:steps|batches) came every ~[\d.]+ s before; "
               r"last (?:step|batch) \d+)\)",
    "no progress": r"(?:^|; )thread (.+?) made no progress for (\d+(?:\.\d+)?) s while other threads kept printing; ",
    "no loop progress": r"(?:^|; )(task|greenlet) (.+?) on thread (.+?) made no progress for (\d+(?:\.\d+)?) s "
                        r"while other (?:tasks|greenlets) kept running; ",
    "over": r"^over: (?:activity|progress) again after (\d+) s",
    "peers": r"\bwaiting in (.+?) for (?:peer ranks|rank \S+)",
    "gil": r"^the GIL was held for (\d+) s",
}
_re = Patterns(_REGEXES)


def busy(share):
    """The busy state's sentence: share is the process's share of a core (0.37)."""
    return "busy: CPU time still rising (%d%% of a core), computing rather than hung" % round(share * 100)


def in_collective(words):
    """The collective state's sentence: words say which thread waits where (waiting_for_peers())."""
    return COLLECTIVE_WORDS + words


def waiting_for_peers(where, peer=None):
    """A thread's wait in a collective of torch.distributed (runtime/collectives.py): where is
    `all_reduce #11 on group 0` or `recv #3 from rank 0`; peer, the one rank a send or recv waits for."""
    return "waiting in %s for %s" % (where, "rank %s" % peer if peer else "peer ranks")


# --- the writers ---------------------------------------------------------------------------------

def silent(seconds, phase, state, path):
    """A process that printed nothing for `seconds`; state: one of the sentences above."""
    return "silent for %.0f s%s; %s%s%s" % (seconds, " (phase %s)" % phase if phase else "", state, _STACKS,
                                             path or "the console")


def no_step(seconds, unit, every, last):
    """A noisy stall's part when the training heartbeat stopped (stuck.py): no optimizer step (unit
    `step`) or DataLoader batch (`batch`) for seconds; every: the cadence before, as text."""
    return "no training step for %.0f s (%s came every ~%s s before; last %s %d)" % (
        seconds, "batches" if unit == "batch" else unit + "s", every, unit, last)


def no_progress(thread, seconds, verdict, phase="", more=0):
    """A noisy stall's part for a thread that stopped while others printed (stuck.py)."""
    return "thread %s made no progress for %.0f s while other threads kept printing; %s%s%s" % (
        thread, seconds, verdict, " (phase %s)" % phase if phase else "", _more(more))


def no_loop_progress(unit, name, thread, seconds, verdict, more=0):
    """A noisy stall's part for an asyncio task (unit `task`: `Task-2 (fetch)`) that stopped at one
    await while its event loop ran on, or a gevent or eventlet greenlet (unit `greenlet`: the
    function it runs) that stayed at one wait while its hub ran the others; thread: the loop's."""
    return "%s %s on thread %s made no progress for %.0f s while other %ss kept running; %s%s" % (
        unit, name, thread, seconds, unit, verdict, _more(more))


def _more(more):
    return " (and %d more)" % more if more else ""


def noisy(parts, path):
    """A stall told while other threads printed: its parts (no_step, no_progress or
    no_loop_progress, busy) in that order."""
    return "; ".join(parts) + _STACKS + (path or "the console")


def gil(seconds, share):
    """The watchdog could not run for `seconds`: C code held the GIL, computing (share of a core
    at least BUSY_SHARE) or blocked."""
    how = "computing (%d%% of a core)" % round(share * 100) if share >= BUSY_SHARE else "blocked"
    return "%s%.0f s: the watchdog thread could not run while C code held it, %s; faulthandler's " \
           "\"Timeout\" stacks above show where" % (GIL_WORDS, seconds, how)


def over(seconds, silence):
    """The end of a stall: output again after a silent one, progress again after a noisy one."""
    return "%s%.0f s%s" % (_OVER_SILENCE if silence else _OVER_PROGRESS, seconds, " of silence" if silence else "")


# A stall is told again at S, 2S, 4S ... of it (S: EARLYLOG_STALL), at least once an hour after.
GROWTH_CAP = 3600.0
# The share of a core above which a process (or the threads beside a stuck one) computes: work
# going on, not a hang (docs/design.md#busy-is-not-stuck).
BUSY_SHARE = 0.2


# --- the console: which stalls a person sees (the log file has them all) ---------------------------

def console_noisy(stuck, share, peers, again):
    """A noisy stall reaches the console (True) when a thread is stuck, or when no step came and
    the process does not compute (a long evaluation is no alarm beside its own output: None, the
    watchdog's default). A rank whose threads only wait for their peer ranks in a collective is told
    there from its second telling: at its first, a slower peer is the likelier reason (False)."""
    if peers and not again:
        return False
    return True if stuck or share < BUSY_SHARE else None


def console_silent(state, relay, again):
    """Does a silent stall reach the console? A person answering a prompt would find the line in
    the middle of it, and an idle server's (Ray's daemons, whose output Ray forwards to the driver's
    terminal) would be a false alarm: never; nor a process that computes (busy is not stuck), nor one
    whose threads ran since the last look (quiet is not stuck: the report judges its dump). A launcher waiting for its children (a supervisor) is
    no hang of its own: its line reaches the console only to relay a stuck child whose own lines
    do not, or where its children keep no log (relay). A rank waiting for its peer ranks is told
    there from its second telling (again), as a noisy one (console_noisy)."""
    kind = _state(state)
    if kind in (TERMINAL, IDLE, BUSY, MOVING):
        return False
    if kind == CHILDREN:
        return relay
    return again if kind == COLLECTIVE else True


# --- the parser ----------------------------------------------------------------------------------

class Stall:
    """A `stall:` line, typed. shape: silent, noisy, gil or over; seconds: the silence, the first
    noisy part's, the GIL's, or the stall an `over` ends; phase; state (a silent one's: BUSY, IDLE,
    BLOCKED, TERMINAL, CHILDREN, COLLECTIVE; a noisy one's: BUSY when its threads computed, else
    None) and words, its sentence; share, a busy one's percent of a core; steps, the heartbeat's
    words when steps stopped (`steps came every ~0.2 s before; last step 5`); thread, the stuck
    thread (a task's or greenlet's loop thread); task, greenlet: a stuck task or greenlet; collective,
    the collective its thread waits in for peer ranks (`all_reduce #11 on group 0`); path."""
    __slots__ = ("shape", "seconds", "phase", "state", "words", "share", "steps", "thread", "task", "greenlet",
                 "collective", "path")

    def __init__(self, shape, seconds, **fields):
        self.shape, self.seconds = shape, seconds
        for name in self.__slots__[2:]:
            setattr(self, name, fields.get(name))

    def __repr__(self):
        return "Stall(%s)" % ", ".join("%s=%r" % (n, getattr(self, n)) for n in self.__slots__
                                       if getattr(self, n) is not None)


_parsed = {}


def parse(text):
    """The Stall a `stall:` line's words say (kept by text: read it, never change it), or None for
    words that are none of the shapes."""
    found = _parsed.get(text)
    if found is None and text not in _parsed:
        found = _parsed[text] = _parse(text or "")
    return found


def _parse(text):
    m = _re("over").match(text)
    if m:
        return Stall("over", float(m.group(1)))
    m = _re("gil").match(text)
    if m:
        return Stall("gil", float(m.group(1)))
    m = _re("silent").match(text)
    if m:
        words = m.group(3)
        share = _re("busy").match(words)
        return Stall("silent", float(m.group(1)), phase=m.group(2), state=_state(words), words=words,
                     share=int(share.group(1)) if share else None, collective=_peers(words), path=m.group(4))
    body, _, path = text.rpartition(_STACKS)
    step, stuck = _re("no step").match(body), _re("no progress").search(body)
    loop = _re("no loop progress").search(body) if stuck is None else None
    if step is None and stuck is None and loop is None:
        return None
    seconds = float(step.group(1) if step else stuck.group(2) if stuck else loop.group(4))
    unit, name = loop.group(1, 2) if loop else (None, None)
    working = body.rpartition("; ")[2] if "; busy: " in body or body.startswith("busy: ") else None
    share = _re("busy").match(working) if working else None
    return Stall("noisy", seconds, steps=step.group(2) if step else None,
                 thread=stuck.group(1) if stuck else loop.group(3) if loop else None,
                 task=name if unit == "task" else None, greenlet=name if unit == "greenlet" else None,
                 state=BUSY if share else None, share=int(share.group(1)) if share else None,
                 collective=_peers(body[stuck.start():]) if stuck else None, words=body, path=path or None)


def _peers(words):
    m = _re("peers").search(words)
    return m.group(1) if m else None


def _state(words):
    if words.startswith("busy: "):
        return BUSY
    if words.startswith("idle: "):
        return IDLE
    if words.startswith(TERMINAL_WORDS):
        return TERMINAL
    if words.startswith(CHILDREN_WORDS):
        return CHILDREN
    if words.startswith(COLLECTIVE_WORDS):
        return COLLECTIVE
    if words.startswith(MOVING_WORDS[:8]):
        return MOVING
    return BLOCKED
