"""The watchdog thread: stall, periodic and on-demand dumps, memory lines and the GIL-held check.
It loads in its own thread (fault.start arms faulthandler and starts it), so nothing
here is on the program's start-up path. It must never keep a process alive, block, pause a
process, steal a program's handler, signal or timer, or change an exit status."""
import os
import sys
import time

from earlylog.grammar import stalls
from earlylog.runtime import fault, threads


def _stacks():
    """The stacks module (with kstate, which its CPU sample reads with), imported under threads.gated."""
    from earlylog.runtime import stacks
    return stacks


def _waiting_for_work():
    from earlylog.runtime import stuck
    return stuck.waiting_for_work()


def _waiting_for_children(folder):
    """(`waiting for child pid 812 (python train.py)...` or None, and whether a person should see it)
    for a main thread that waits for children or sleeps while they run: a supervisor. Its children
    that log say in their own logs whether they are stuck, and print that where they print: its line
    reaches the console only to relay a child stuck where that child's own lines do not reach it."""
    from earlylog.runtime import children, procs
    main = threads.main_ident()
    tid, frame = threads.native_ids().get(main), threads.current_frames().get(main)
    if not tid or frame is None:
        return None, False
    pids, logged, printed = children.waited_children(tid, frame)
    if not pids:
        return None, False
    named = ", ".join("pid %d (%s)" % (pid, procs.command(pid) or "?") for pid in pids[:3])
    if len(pids) > 3:
        named += " and %d more" % (len(pids) - 3)
    own = "; %s own log%s whether %s stuck" % (("its", " says", "it is") if len(pids) == 1 else
                                              ("their", "s say", "they are")) if logged else ""
    stuck = children.stuck_child(pids, folder) if logged and not printed and folder else None
    return "waiting for child%s %s%s%s" % ("" if len(pids) == 1 else "ren", named, own,
                                           "; stuck: " + stuck if stuck else ""), not logged or bool(stuck)


def _waiting_for_peers():
    """`the main thread waits in all_reduce #11 on group 0 for peer ranks` when it waits in a
    collective of torch.distributed (runtime/collectives.py), else None."""
    if "torch.distributed" not in sys.modules:
        return None
    from earlylog.runtime import collectives
    main = threads.main_ident()
    frame = threads.current_frames().get(main)
    found = collectives.words(main, frame) if frame is not None else None
    return "the main thread is " + found if found else None  # stalls.waiting_for_peers()'s words


def _names():
    """{ident: name} of the program's threads for a retrying note, read without threading's lock."""
    active = getattr(sys.modules.get("threading"), "_active", None) or {}
    names = {ident: getattr(t, "_name", "?") for ident, t in dict(active).items()}
    names.setdefault(threads.main_ident(), "MainThread")
    return names


def _act(watchdog):
    """EARLYLOG_ON_STALL / EARLYLOG_STALL_EXIT's acting state, or None (then act.py is never loaded)."""
    config = watchdog.logger.config
    if not (getattr(config, "on_stall", "") or getattr(config, "stall_exit", 0)):
        return None
    from earlylog.runtime import act
    return act.Act(watchdog)


def _checks():
    """(progress, retries, kstate): the per-thread and heartbeat check, the retry count, and the
    timeslices the program's threads ran, of each beat."""
    from earlylog.runtime import kstate, progress, retries
    return progress, retries, kstate


def _timeslices(kstate):
    """The timeslices the program's threads (not ours) have run so far, summed: a thread blocked
    for good never runs, one in a timed wait, a poll loop or a collective that completes does."""
    total = 0
    for ident, tid in kstate.kernel_ids().items():
        if threads.name_of(ident) is None:
            total += kstate.timeslices(tid) or 0
    return total


def _sampler():
    from earlylog.runtime import breadcrumbs
    return breadcrumbs.Sampler()


class Watchdog:
    """One process's watchdog thread: run() is its whole life. What faulthandler was aimed at,
    and the beat, come from fault.Armed, which it re-arms at every beat."""

    def __init__(self, armed):
        self.armed = armed
        self.logger = armed.logger
        self.pid = armed.pid
        self.stall = self.logger.config.stall
        self.every = self.logger.config.dump_every
        self.beat = armed.beat
        self.request = armed.request
        self.wake = threads.Wakeup()
        self.native_done = False
        self.last_beat = time.monotonic()
        self.cpu_at_beat = None
        self.title = None  # the process title last written in a note
        self.stall_dumps = 0  # stall dumps written, silent or per-thread (runtime/act.py reads it)
        self.checks = None  # (progress, retries, kstate), loaded at the first beat (_loop)
        # The per-thread tracker (runtime/stuck.py), made by progress.check once a second thread
        # or a beat is seen; its .episode is a thread's stall while others print.
        self.progress = None
        # The program's threads' timeslices (_timeslices) as two samples (when, count), older and
        # newer, a beat apart: whether a thread ran is judged against one at least a beat old, since
        # a stall's deadline can wake the loop a few milliseconds after a beat, too soon for a
        # thread in a 0.1 s sleep loop to have run again (a healthy rank read as blocked).
        self.slices = (None, None)
        # The loop's own state, kept here so that the loop goes on where it was after a fork
        # (run() ends for it and starts again). The first look comes after a short wait, so the
        # thread takes no GIL time from start-up.
        self.memory = None
        self.next_mem = time.monotonic() + 1.0
        self.next_every = time.monotonic() + self.every
        self.episode, self.next_at = None, self.stall
        self.act = threads.gated(_act, self)
        armed.watchdog = self

    def run(self):
        """The thread's life; it ends early for a fork and goes on in a new thread after it
        (threads.pause_for_fork), its state kept here."""
        try:
            threads.on_pause(self.wake)
            self._loop()
            if threads.stopping():
                threads.parked(self.run)
        except BaseException as exc:  # never let an exception reach the application
            if not sys.is_finalizing() and os.getpid() == self.pid:
                self.logger.event("earlylog", "the watchdog stopped: %r" % (exc,))

    def _loop(self):
        while self.armed.watchdog is self and os.getpid() == self.pid and not threads.stopping():
            self.wake.wait(max(0.05, min(self._deadlines()) - time.monotonic()))
            if threads.stopping():
                return
            now = time.monotonic()
            # Loaded at the first beat, not with this module at start: the import system reads
            # their files at the lowest free descriptors, and a program's first moments are when
            # it checks or closes its own (a closed stdout must stay closed; a daemonizer's closerange).
            self.checks = self.checks or threads.gated(_checks)
            self.logger.check()
            self.armed.check_file()
            self._check_gil(now)
            self.armed.rearm_timer()
            if self.request is not None and self._requested():
                self.dump("on request (earlylog dump)")
            silent_since = self.logger.last_activity
            if self.stall:
                moved = self._ran(now, _timeslices(self.checks[2]))
                if self.episode is not None and silent_since != self.episode:
                    self.say("stall", stalls.over(silent_since - self.episode, silence=True))
                    self.episode, self.next_at = None, self.stall
                # A silence since the last training step or batch (a beat is a sign of life) is judged
                # by the steps' own pace once they are judged: a worker that reads slowly but keeps
                # delivering is slow, not stuck (runtime/progress.py).
                pace = self.checks[0].heartbeat(now, self.stall) if now - silent_since >= self.next_at else None
                if now - silent_since >= self.next_at and (pace is None or pace.late()):
                    self.open_stall(silent_since, now - silent_since, moved)
                    self.next_at += min(self.next_at, stalls.GROWTH_CAP)
                # A thread stuck while others print, or no training step: docs/watchdog.md#progress
                self.checks[0].check(self, now, self.episode is not None)
            if self.act is not None:  # imports nothing: act.py loaded its modules
                # A thread stuck while others print has its own episode (runtime/stuck.py).
                noisy = getattr(self.progress, "episode", None)
                self.act.beat(now, noisy.since if noisy else silent_since, silent=not noisy)
            if self.every and now >= self.next_every:
                self.dump("every %g s (EARLYLOG_DUMP_EVERY)" % self.every)
                self.next_every = now + self.every
            # A thread failing again and again between sleeps is retrying, however much it logs.
            for text in self.checks[1].beat(_names, max(self.stall, 10.0)):
                self.say("note", text)
            if now >= self.next_mem:
                self.memory = self.memory or threads.gated(_sampler)
                text = self.memory.line()
                if text:
                    self.say("mem", text)
                self.next_mem = now + self.memory.every

    def _ran(self, now, slices):
        """Did a thread of the program run in the last one to two beats?"""
        older, newer = self.slices
        if newer is None or now - newer[0] >= 0.9 * self.beat:  # a beat's wake may come a little early
            older, newer = newer, (now, slices)
            self.slices = (older, newer)
        return older is not None and slices != older[1]

    def _requested(self):
        """One system call a beat, no lock: taking the request away is the answer to it."""
        try:
            os.unlink(self.request)
        except OSError:
            return False
        return True

    def _deadlines(self):
        deadlines = [self.last_beat + self.beat, self.next_mem]
        if self.stall:
            deadlines.append(self.logger.last_activity + self.next_at)
        if self.every:
            deadlines.append(self.next_every)
        due = self.act.wake_by(self.logger.last_activity) if self.act is not None else None
        if due is not None:
            deadlines.append(due)
        return deadlines

    def _check_gil(self, now):
        # os.times(): the whole process's CPU in one system call, no import in this thread (a fork
        # could catch an import half done: docs/design.md#imports-in-background-threads).
        times = os.times()
        cpu = times[0] + times[1]
        gap = now - self.last_beat
        armed = self.armed
        if armed.timeout and not fault.program_timer and armed.fd is not None and gap > armed.timeout:
            share = (cpu - self.cpu_at_beat) / gap if None not in (cpu, self.cpu_at_beat) else 0
            self.say("stall", stalls.gil(gap, share))
        self.last_beat, self.cpu_at_beat = now, cpu

    def open_stall(self, silent_since, silence, moved=False):
        """Tell the process's silence since silent_since (monotonic) as a stall: its line and dump.
        Its episode ends when output resumes (the `over` line). act.py calls it too, for fresh
        stacks before it judges."""
        self.episode = silent_since
        self.stall_dump(silence, moved)

    def stall_dump(self, silence, moved=False):
        # The CPU sample sleeps SAMPLE seconds: outside the gate, so no fork waits for it.
        before = _timeslices(self.checks[2]) if self.checks else None
        shares, whole = threads.gated(_stacks).cpu_shares()
        # A thread of the program that ran while the sample slept has moved, however briefly: its
        # wait just ended (a launcher whose children ended that moment, now ending itself), which
        # the look before the sample could not see. Told as blocked, it reached the console.
        moved = moved or before is not None and _timeslices(self.checks[2]) != before
        busy = whole >= stalls.BUSY_SHARE
        threads.gated(self._stall_lines, silence, shares, whole, busy, moved)
        # Reading native stacks stops every thread of the process: never a busy one (busy is not
        # stuck), and once per process, only where a thread blocked in C is worth the pause.
        if self.logger.config.native and not self.native_done and not busy:
            self.native_done = True
            from earlylog.runtime import native
            if self.armed.timeout:
                fault.cancel_timer()  # the tool may take seconds; that is not the GIL being held
            header, lines = native.stacks(self.pid)
            self.say("dump", header, lines)
            self.last_beat = time.monotonic()
            self.armed.rearm_timer()

    def _stall_lines(self, silence, shares, whole, busy, moved):
        """The stall line and the dump (they import as they go: run under threads.gated); moved: a
        thread of the program ran in the last one to two beats (_ran)."""
        from earlylog.runtime import phases
        phase = phases.describe(threads.main_ident()) or next(
            (phases.describe(tid) for tid in phases.current()), "")
        waiting, relay, prompt = None, False, None
        # Every Python thread parked waiting for work (CPU then comes from native threads: Ray's
        # gRPC ones): a server's idleness, whatever it computes underneath.
        idle = _waiting_for_work()
        if busy:
            state = stalls.busy(whole)
        else:
            from earlylog.runtime import terminal
            prompt = terminal.waiting()  # a person at the terminal (a pager, an editor: a child's)
            if not prompt:
                waiting, relay = _waiting_for_children(os.path.dirname(self.logger.path or ""))
            idle = idle and not prompt and not waiting
            peers = None if prompt or waiting or idle else _waiting_for_peers()
            state = prompt or waiting or (stalls.IDLE_WORDS if idle else stalls.in_collective(peers) if peers else
                                          stalls.MOVING_WORDS if moved else stalls.BLOCKED_WORDS)
        self.say("stall", stalls.silent(silence, phase, state, self.logger.path),
                    console=stalls.console_silent(state, relay, self.next_at > self.stall))
        self._dump("stall after %.0f s of silence" % silence, shares)

    def dump(self, reason):
        """A `dump:` event: every Python thread but this one, with kernel state and frames. The
        modules that read them import as they go (socket, fcntl, ast...), so it runs with fork held
        off (docs/design.md#imports-in-background-threads); the CPU sample before it does not."""
        shares = threads.gated(_stacks).cpu_shares()[0]
        threads.gated(self._dump, reason, shares)

    def _dump(self, reason, shares):
        from earlylog.runtime import stacks
        if reason.startswith("stall"):
            self.stall_dumps += 1  # runtime/act.py judges after each
            # Where each thread stood: an exit raised there later ended a call that never returned
            # (hooks.after_main, through fault.stuck_at()).
            self.stuck_at = {(f.f_code.co_filename, f.f_lineno) for f in threads.current_frames().values()}
        self._note_title()
        more, count = stacks.lines(shares, skip_ident=threads.get_ident())
        self.say("dump", "%s (%d thread%s)" % (reason, count, "" if count == 1 else "s"), more)

    def _note_title(self):
        """Ray renames a worker after the task it runs (`ray::hang_forever`), as setproctitle users
        do: a note before the stacks names the task, which the start line's argv cannot."""
        from earlylog.runtime import identity, redact
        now = identity.title(self.logger.ident.argv)
        if now and now != self.title:
            self.title = now
            self.say("note", "process title: " + " ".join(redact.argv(now.split())))

    def say(self, kind, text, more=(), console=None):
        """Write an event that is not a sign of life: silence goes on being measured from before it.
        The one way the watchdog's collaborators (progress, stuck, act) write to the log."""
        before = self.logger.last_activity
        if console is None:
            console = self.logger.fd is None  # the console is the only place left
        self.logger.event(kind, text, more, console=console)
        # No lock (a fork child could inherit it held): a user write landing during this event
        # is forgotten as activity, which costs at most one extra dump.
        self.logger.last_activity = before
