"""The watchdog: fatal-signal and SIGTERM stacks, stall, periodic and on-demand dumps, fork care.
It must never keep a process alive, block, pause a process, steal a program's handler, signal or
timer (faulthandler is shared through fault.py), or change an exit status."""
import _thread
import os
import sys
import time

from earlylog.runtime import fault, state, threads

BEAT_MAX = 5.0      # the watchdog thread wakes at least this often (idle cost: one wake per beat)
GROWTH_CAP = 3600.0  # stall dumps come at S, 2S, 4S ... of silence, at least once an hour after
# `earlylog dump` asks for a dump by creating this file (% pid) in the process's log folder; the
# watchdog looks for it at every beat. A file, not a signal: SIGUSR1 stays the program's (its
# default action kills, and a program that checks getsignal() must see what it set).
REQUEST = ".dump-%d"

_state = None         # this process's Watchdog; a fork child builds its own in start()


def start(logger):
    """Arm faulthandler (fatal signals, SIGTERM, the GIL-free timer) and start the watchdog thread."""
    global _state
    if not state.installed:
        fault.install()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
    threads.remember_main()
    watchdog = Watchdog(logger)
    _state = watchdog
    watchdog.arm()
    if watchdog.threaded:
        threads.start("earlylog-watchdog", watchdog.run)


def _stacks():
    """The stacks module (with kstate, which its CPU sample reads with), imported under threads.gated."""
    from earlylog.runtime import stacks
    return stacks


def _sampler():
    from earlylog.runtime import breadcrumbs
    return breadcrumbs.Sampler()


def _before_fork():
    # faulthandler's timer hangs the child forever if it is armed at fork time (see
    # docs/design.md#faulthandlers-timer-and-fork): cancel it here, re-arm in the parent below and in the child's own start().
    watchdog = _state
    if watchdog is None or watchdog.pid != os.getpid():
        return
    try:
        watchdog.forking = True
        if watchdog.timeout:
            fault.cancel_timer()
        watchdog.warn_fork()
    except BaseException:  # never let an exception reach the application's fork()
        pass


def _after_fork_in_parent():
    watchdog = _state
    if watchdog is None or watchdog.pid != os.getpid():
        return
    watchdog.forking = False
    try:
        watchdog.rearm_timer()
    except BaseException:
        pass


class Watchdog:
    """One process's watchdog state; its thread runs run(), everything else runs in the caller."""

    def __init__(self, logger):
        self.logger = logger
        self.pid = os.getpid()
        self.stall = logger.config.stall
        self.every = logger.config.dump_every
        self.beat = min(max(self.stall / 2, 0.25), BEAT_MAX) if self.stall else BEAT_MAX
        # A child forked by a thread other than main ends when that thread returns (no exit()
        # runs): a thread of ours, or faulthandler's timer thread, would keep it alive for ever.
        self.threaded = threads.may_start()
        # The GIL-free timer fires only when the watchdog thread missed its turn for a whole
        # stall: the main thread holds the GIL in C code, so Python cannot look (docs/design.md#gil-free-timer).
        self.timeout = self.stall + self.beat if self.stall and self.threaded else 0
        self.fd = self._dump_fd()
        self.log_fd = logger.fd
        # The request file of `earlylog dump`, absolute now: the program may change its cwd later.
        self.request = os.path.join(os.path.abspath(os.path.dirname(logger.path)), REQUEST % self.pid) \
            if logger.path and self.threaded else None
        self.wake = threads.Wakeup()
        self.forking = False
        self.warned_forks = set()
        self.native_done = False
        self.last_beat = time.monotonic()
        self.cpu_at_beat = None
        self.title = None  # the process title last written in a note

    def _dump_fd(self):
        """The log file; without one, the console's own (non-blocking) fd; None if neither."""
        if self.logger.fd is not None:
            return self.logger.fd
        console = self.logger.console
        return console.fd if console.kind in ("pipe", "tty", "file") else None

    def arm(self):
        # _signal, not signal: the same functions without signal.py's enum wrappers, which cost
        # over 1 ms of every process's start-up (docs/design.md#_signal-not-signal).
        import _signal as signal
        # A C-level SIGTERM handler dumps even while C code holds the GIL, then chains to the
        # previous handler (SIG_DFL: exit status -15 at once, as without earlylog).
        self.signum = signal.SIGTERM if signal.getsignal(signal.SIGTERM) != signal.SIG_IGN else None
        fault.aim(self.fd, self.signum)
        if self.fd is None:
            self.logger.event("WARNING", "no log file and the console is a socket or off: fatal-signal, "
                                         "SIGTERM and GIL-held stack dumps are off in this process")
        elif fault.program_fatal:
            # PYTHONFAULTHANDLER / -X faulthandler: the program chose where crash stacks go.
            self.logger.event("note", "the program enabled faulthandler itself: fatal-signal stacks "
                                      "go where it sends them (usually stderr), not here", console=False)
        self.rearm_timer()  # at start, from the main thread (docs/design.md#gil-free-timer)
        if not self.threaded:
            what = "stall and on-demand dumps are off in this process: it was forked by a thread other than " \
                   "main and ends when that thread returns, which a thread of earlylog's would prevent"
        elif self.request is None:
            what = "%s; no on-demand dumps without a log file" % self._stalls()
        else:
            what = "%s; `earlylog dump %d` writes them now" % (self._stalls(), self.pid)
        self.logger.event("note", "watchdog: %s; fatal signals and SIGTERM write every thread's stack here "
                          "(a bare \"Current thread 0x...\" block with no \"Fatal Python error\" or "
                          "\"Timeout\" line above it is the stack at SIGTERM)" % what, console=False)

    def _stalls(self):
        return "stacks after %g s of silence" % self.stall if self.stall else "stall dumps off"

    def _lost_file(self):
        """The program closed our log fd (the logger noticed): its number may be a file of the
        program's now, so faulthandler must stop writing there."""
        self.fd = None
        if self.timeout:
            fault.cancel_timer()
            self.timeout = 0
        fault.aim(None, self.signum)

    def rearm_timer(self):
        if self.timeout and self.fd is not None and not self.forking:
            fault.arm_timer(self.timeout)

    def run(self):
        try:
            self._loop()
        except BaseException as exc:  # never let an exception reach the application
            if not sys.is_finalizing() and os.getpid() == self.pid:
                self.logger.event("earlylog", "the watchdog stopped: %r" % (exc,))

    def _loop(self):
        memory = None
        # The first look comes after a short wait, so the thread takes no GIL time from start-up.
        next_mem = time.monotonic() + 1.0
        next_every = time.monotonic() + self.every
        episode, next_at = None, self.stall
        while _state is self and os.getpid() == self.pid:
            self.wake.wait(max(0.05, min(self._deadlines(next_mem, next_every, next_at)) - time.monotonic()))
            now = time.monotonic()
            self.logger.check()
            if self.fd is not None and self.fd == self.log_fd and self.logger.fd is None:
                self._lost_file()
            self._check_gil(now)
            self.rearm_timer()
            if self.request is not None and self._requested():
                self.dump("on request (earlylog dump)")
            silent_since = self.logger.last_activity
            if self.stall:
                if episode is not None and silent_since != episode:
                    self._quiet("stall", "over: activity again after %.0f s of silence" % (silent_since - episode))
                    episode, next_at = None, self.stall
                if now - silent_since >= next_at:
                    episode = silent_since
                    self.stall_dump(now - silent_since)
                    next_at += min(next_at, GROWTH_CAP)
            if self.every and now >= next_every:
                self.dump("every %g s (EARLYLOG_DUMP_EVERY)" % self.every)
                next_every = now + self.every
            if now >= next_mem:
                memory = memory or threads.gated(_sampler)
                text = memory.line()
                if text:
                    self._quiet("mem", text)
                next_mem = now + memory.every

    def _requested(self):
        """One system call a beat, no lock: taking the request away is the answer to it."""
        try:
            os.unlink(self.request)
        except OSError:
            return False
        return True

    def _deadlines(self, next_mem, next_every, next_at):
        deadlines = [self.last_beat + self.beat, next_mem]
        if self.stall:
            deadlines.append(self.logger.last_activity + next_at)
        if self.every:
            deadlines.append(next_every)
        return deadlines

    def _check_gil(self, now):
        # os.times(): the whole process's CPU in one system call, no import in this thread (a fork
        # could catch an import half done: docs/design.md#imports-in-background-threads).
        times = os.times()
        cpu = times[0] + times[1]
        gap = now - self.last_beat
        if self.timeout and not fault.program_timer and self.fd is not None and gap > self.timeout:
            share = (cpu - self.cpu_at_beat) / gap if None not in (cpu, self.cpu_at_beat) else 0
            how = "computing (%d%% of a core)" % round(share * 100) if share >= 0.2 else "blocked"
            self._quiet("stall", "the GIL was held for %.0f s: the watchdog thread could not run while C code "
                                 "held it, %s; faulthandler's \"Timeout\" stacks above show where" % (gap, how))
        self.last_beat, self.cpu_at_beat = now, cpu

    def stall_dump(self, silence):
        # The CPU sample sleeps SAMPLE seconds: outside the gate, so no fork waits for it.
        shares, whole = threads.gated(_stacks).cpu_shares()
        busy = whole >= 0.2
        threads.gated(self._stall_lines, silence, shares, whole, busy)
        # Reading native stacks stops every thread of the process: never a busy one (busy is not
        # stuck), and once per process, only where a thread blocked in C is worth the pause.
        if self.logger.config.native and not self.native_done and not busy:
            self.native_done = True
            from earlylog.runtime import native
            if self.timeout:
                fault.cancel_timer()  # the tool may take seconds; that is not the GIL being held
            header, lines = native.stacks(self.pid)
            self._quiet("dump", header, lines)
            self.last_beat = time.monotonic()
            self.rearm_timer()

    def _stall_lines(self, silence, shares, whole, busy):
        """The stall line and the dump (they import as they go: run under threads.gated)."""
        from earlylog.runtime import phases
        phase = phases.describe(threads.main_ident()) or next(
            (phases.describe(tid) for tid in phases.current()), "")
        if busy:
            state = "busy: CPU time still rising (%d%% of a core), computing rather than hung" % round(whole * 100)
        else:
            state = "blocked: no CPU used; each thread below says on what"
        self._quiet("stall", "silent for %.0f s%s; %s; stacks in %s" % (
            silence, " (phase %s)" % phase if phase else "", state, self.logger.path or "the console"),
            console=True)
        self._dump("stall after %.0f s of silence" % silence, shares)

    def dump(self, reason):
        """A `dump:` event: every Python thread but this one, with kernel state and frames. The
        modules that read them import as they go (socket, fcntl, ast...), so it runs with fork held
        off (docs/design.md#imports-in-background-threads); the CPU sample before it does not."""
        shares = threads.gated(_stacks).cpu_shares()[0]
        threads.gated(self._dump, reason, shares)

    def _dump(self, reason, shares):
        from earlylog.runtime import stacks
        self._note_title()
        more, count = stacks.lines(shares, skip_ident=_thread.get_ident())
        self._quiet("dump", "%s (%d thread%s)" % (reason, count, "" if count == 1 else "s"), more)

    def _note_title(self):
        """Ray renames a worker after the task it runs (`ray::hang_forever`), as setproctitle users
        do: a note before the stacks names the task, which the start line's argv cannot."""
        from earlylog.runtime import identity, redact
        now = identity.title(self.logger.ident.argv)
        if now and now != self.title:
            self.title = now
            self._quiet("note", "process title: " + " ".join(redact.argv(now.split())))

    def _quiet(self, kind, text, more=(), console=None):
        """Write an event that is not a sign of life: silence goes on being measured from before it."""
        before = self.logger.last_activity
        if console is None:
            console = self.logger.fd is None  # the console is the only place left
        self.logger.event(kind, text, more, console=console)
        # No lock (a fork child could inherit it held): a user write landing during this event
        # is forgotten as activity, which costs at most one extra dump.
        self.logger.last_activity = before

    def warn_fork(self):
        """In the parent, before fork(): name the other threads (a lock one holds stays held)."""
        me = _thread.get_ident()
        others = sorted(t.name for ident, t in threads.program_threads().items() if ident != me)
        if not others or tuple(others) in self.warned_forks:
            return
        self.warned_forks.add(tuple(others))
        self.logger.event("fork", "fork() while %d other thread%s run%s (%s): a lock any of them holds stays "
                                  "locked forever in the child, the classic DataLoader-worker deadlock; the "
                                  "'spawn' or 'forkserver' start method avoids it"
                          % (len(others), "" if len(others) == 1 else "s", "s" if len(others) == 1 else "",
                             ", ".join(others)))
