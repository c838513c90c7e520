"""Acting on a confirmed stall, only when asked: EARLYLOG_ON_STALL runs a command once per stall
episode, EARLYLOG_STALL_EXIT ends a process stuck that long so that its launcher restarts it.
It owns the judge and command children and the deliberate exit; the watchdog calls beat() at each
of its beats and wake_by() for its next deadline, and nothing else of it runs.

The judgement "stuck, with this cause" is the report's, not a second one: a short-lived judge
process (`python -I -S -c ... earlylog.cli.judge LOG PID`, without EARLYLOG in its environment)
reads this process's own log after a stall dump and prints one JSON object (cli/judge.py). The
host process never imports the reader and never runs program code for it. Children start with
posix_spawn (runtime/spawn.py's reasons) and are polled with waitpid(WNOHANG) at later beats: the
watchdog never waits on them. Not imported at all unless one of the two knobs is set.
It must never end a process the judge did not call stuck (idle, busy, a parent waiting for its
children, a person at a terminal), nor act twice for one episode."""
import json
import os
import sys
import time

from earlylog.grammar import records
from earlylog.runtime import fds, hooks, spawn

# The exit status of a process EARLYLOG_STALL_EXIT ends: GNU timeout's status for a command that ran
# past its limit. Non-zero, so torchrun's agent, Slurm and Kubernetes count a failed worker; below
# 128, so nothing reads it as a death by signal (128+N); and a status Python itself never uses.
EXIT_STATUS = 124
JUDGE_LIMIT = 30.0    # seconds a judge may take before it is killed (it reads one log file)
COMMAND_LIMIT = 30.0  # seconds EARLYLOG_ON_STALL's command may run before it is killed
POLL = 0.2            # the watchdog's beat while a child of ours runs
MAX_OUT = 4096        # bytes of a failing command's output quoted in the log
_live = set()         # pids of our judge and command children still running (runtime/stuck.py skips them)


def live_pids():
    """Our own children's pids: their work is not the program's (runtime/stuck.py's busy rule)."""
    return set(_live)


# The keys torch.distributed's process groups leave in the job's store for their peers to connect to
# (`default_pg/0//cpu//0/1`: group, device, context, rank).
_ADDRESS_KEY = r"^[^/]+/\d+//\w+//\d+/\d+$"


def _clear_rendezvous():
    """Before a rank ends for its launcher to restart the job: take this attempt's process-group
    addresses out of torchrun's store, and say so (a note's words), else ''.

    PyTorch's restart race (torch 2.x, static and c10d rendezvous alike): the agent keeps one
    TCPStore across restarts (static_tcp_rendezvous.py creates it once; the c10d handler shares its
    own), and rendezvous.py's _create_c10d_store adds no per-attempt prefix ("We create a new
    TCPStore for every retry"), so the next attempt's ranks may read the addresses of this attempt's
    dead ranks before their successors write theirs, and fail in gloo's connectFullMesh ("Connection
    refused"). The attempt is over once a rank of it ends: its addresses are stale for everyone."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "torch.distributed" not in sys.modules:
        return ""
    try:
        import re
        from datetime import timedelta
        distributed = sys.modules["torch.distributed"]
        store = distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                     timeout=timedelta(seconds=2))
        keys = [k for k in store.list_keys() if re.match(_ADDRESS_KEY, k)]
        for key in keys:
            store.delete_key(key)
        return "took %d process-group address key%s of this attempt out of torchrun's store, so that the next " \
               "attempt's ranks cannot connect to this one's (PyTorch's restart race)" % (
                   len(keys), "" if len(keys) == 1 else "s") if keys else ""
    except Exception as exc:  # an older torch (no list_keys), a store gone: the ending goes on
        return "could not clear this attempt's rendezvous keys from torchrun's store (%r)" % (exc,)


def child_env():
    """This process's environment without earlylog's switches: our children must not log."""
    return {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}


class Child:
    """One spawned child whose output goes to an anonymous file, polled without waiting."""

    def __init__(self, argv, limit, stdin_data=None):
        self.out = fds.memfd("earlylog-act")
        self.deadline = time.monotonic() + limit
        stdin = None
        try:
            actions = [(os.POSIX_SPAWN_DUP2, self.out, 1), (os.POSIX_SPAWN_DUP2, self.out, 2)]
            if stdin_data is not None:
                stdin = fds.memfd("earlylog-act-in")
                os.write(stdin, stdin_data)
                os.lseek(stdin, 0, os.SEEK_SET)
                actions.insert(0, (os.POSIX_SPAWN_DUP2, stdin, 0))
            else:
                actions.insert(0, (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
            # setsid: the child is not in the program's process group, so a Ctrl-C or a launcher's
            # killpg aimed at the program does not reach it mid-alert (and it outlives an exit).
            self.pid = os.posix_spawn(argv[0], argv, child_env(), file_actions=actions, setsigmask=(),
                                      setsid=True)
            _live.add(self.pid)
        except BaseException:
            os.close(self.out)
            raise
        finally:
            if stdin is not None:
                os.close(stdin)

    def poll(self):
        """None while it runs; else (status, output bytes): status is its exit code, "timeout"
        once it ran past its limit (then killed), or None if the program's own wait() took it."""
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if not done and time.monotonic() < self.deadline:
                return None
            status = os.waitstatus_to_exitcode(status) if done else "timeout"
            _live.discard(self.pid)
            if not done:
                spawn._abandon(self.pid)
        except ChildProcessError:
            status = None
        try:
            return status, os.pread(self.out, MAX_OUT * 16, 0)
        finally:
            os.close(self.out)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The judge's entry point: the reader's one file the runtime starts, by its path (cli/judge.py says
# how it runs); the runtime never imports the reader.
JUDGE = os.path.join(ROOT, "earlylog", "cli", "judge.py")


# posix_spawn has no closefrom: the child closes the descriptors it inherited (the program's sockets,
# pipes, a listening port) first, so a command that outlives an exit holds none of them.
_CLOSE = ("import os, sys\n"
          "for fd in os.listdir('/proc/self/fd'):\n"
          "    if int(fd) > 2:\n"
          "        try: os.close(int(fd))\n"
          "        except OSError: pass\n")


def judge_argv(log, pid):
    """The judge's command line: this interpreter, isolated (-I: no user site, no PYTHON* variables;
    -S: no site at all), running this copy of earlylog's cli/judge.py."""
    return [sys.executable, "-I", "-S", JUDGE, log, str(pid)]


def command_argv(command):
    """`sh -c COMMAND`, started through this interpreter so that it inherits no descriptor."""
    return [sys.executable, "-I", "-S", "-c", _CLOSE + "os.execv('/bin/sh', ['sh', '-c', sys.argv[1]])", command]


class Act:
    """The acting state of one process's watchdog (kept across its fork restarts; a fork child
    starts afresh, as its children are not its own)."""

    def __init__(self, watchdog):
        self.watchdog = watchdog
        self.logger = watchdog.logger
        config = self.logger.config
        self.exit_after = config.stall_exit
        self.command = config.on_stall
        self._reset()

    def _reset(self):
        self.pid = os.getpid()
        self.episode = None      # the last_activity value of the stall episode acted on
        self.judge = None        # (Child, purpose: "announce" or "exit")
        self.judged_at = None    # the watchdog's stall-dump count when the last judgement began
        self.announced = False   # the command ran for this episode (or was found pointless)
        self.exit_tried = None   # the watchdog's stall-dump count at the last exit judgement
        self.commands = []       # running command children
        self.dumped_at = None    # when the watchdog last wrote a stall dump
        self.seen_dumps = None   # the watchdog's stall-dump count at the last look
        self.why_not = None      # the last reason not to act, noted once an episode

    def wake_by(self, silent_since):
        """When the watchdog must next beat for us (monotonic seconds), or None."""
        if self.judge or self.commands:
            return time.monotonic() + POLL
        due = silent_since + self.exit_after
        # Once past, the next try waits for the watchdog's next stall dump, its own deadline.
        return due if self.exit_after and due > time.monotonic() else None

    def beat(self, now, silent_since, silent=True):
        """One look, never waiting: start or poll a judge, act on its answer, reap commands.
        silent_since: when the open stall episode began, the process's silence (silent) or the
        first stuck thread's last progress while others printed (runtime/stuck.py)."""
        if self.pid != os.getpid():
            self._reset()
        wd = self.watchdog
        if self.episode != silent_since:  # a new episode, or activity again: start over
            self.episode, self.announced, self.judged_at, self.exit_tried = silent_since, False, None, None
            self.why_not, self.dumped_at = None, None
            if self.judge is not None:
                self._finish(self.judge[0])
                self.judge = None
        if wd.stall_dumps != self.seen_dumps:
            if self.seen_dumps is not None:
                self.dumped_at = now  # the watchdog wrote a stall dump since the last look
            self.seen_dumps = wd.stall_dumps
        self.commands = [c for c in self.commands if not self._reaped(c)]
        if self.judge is not None:
            child, purpose = self.judge
            result = child.poll()
            if result is None:
                return
            self.judge = None
            verdict = self._verdict(result)
            if verdict is not None:
                self._act(verdict, purpose, now - silent_since)
            return
        stuck_for = now - silent_since
        if self.exit_after and stuck_for >= self.exit_after and self.exit_tried != self.seen_dumps:
            if silent and (self.dumped_at is None or now - self.dumped_at > 1.0 or wd.episode != silent_since):
                # Fresh stacks for the judge and for whoever reads why the process ended (a thread
                # stuck while others print has the per-thread dumps of its own episode).
                wd.open_stall(silent_since, stuck_for)
                self.seen_dumps, self.dumped_at = wd.stall_dumps, now
            self.exit_tried = self.seen_dumps
            if self.dumped_at is not None:
                self._start_judge("exit")
        elif self.command and not self.announced and self.dumped_at is not None and \
                self.judged_at != self.seen_dumps:
            self.judged_at = self.seen_dumps  # judged again only after the next stall dump
            self._start_judge("announce")

    def _start_judge(self, purpose):
        if not os.path.isfile(JUDGE):
            # `earlylog run`/`env` put a copy of the runtime alone on PYTHONPATH: no reader to judge with.
            self.watchdog.say("WARNING", "EARLYLOG_ON_STALL and EARLYLOG_STALL_EXIT need earlylog installed in "
                                         "this interpreter (`earlylog install`); the runtime copy at %s has no "
                                         "judge; they are off" % ROOT, console=True)
            self.command, self.exit_after = "", 0.0
            return
        if not self.logger.path:
            self._note("cannot act on this stall: the log is not in a file the judge could read")
            self.announced, self.exit_after = True, 0.0
            return
        try:
            self.judge = (Child(judge_argv(self.logger.path, self.pid), JUDGE_LIMIT), purpose)
        except (OSError, AttributeError) as exc:  # no memfd_create (not Linux), no interpreter
            self._note("cannot judge this stall (%s); EARLYLOG_ON_STALL and EARLYLOG_STALL_EXIT are off" % exc)
            self.command, self.exit_after = "", 0.0

    def _verdict(self, result):
        status, out = result
        try:
            verdict = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            if status == 0 and isinstance(verdict, dict):
                return verdict
        except (ValueError, IndexError):
            pass
        self._note("the stall judge failed (status %s): %s" % (status, out.decode("utf-8", "replace")[-300:].strip()))
        return None

    def _act(self, verdict, purpose, stuck_for):
        if not verdict.get("stuck"):
            # One answer serves both knobs until the next stall dump; one line per reason an episode.
            self.judged_at = self.exit_tried = self.seen_dumps
            why = verdict.get("why", "not stuck")
            if why != self.why_not:
                self.why_not = why
                self._note("not acting on this stall: %s" % why)
            return
        if self.command and not self.announced:
            self.announced = True
            self._run_command(verdict, stuck_for)
        if purpose == "exit":
            self._exit(verdict, stuck_for)

    def _run_command(self, verdict, stuck_for):
        payload = dict(verdict, seconds=round(stuck_for, 1))
        payload.pop("stuck", None)
        try:
            self.commands.append(Child(command_argv(self.command), COMMAND_LIMIT,
                                       (json.dumps(payload) + "\n").encode()))
            self._note("EARLYLOG_ON_STALL: ran the command (pid %d) for this stall" % self.commands[-1].pid)
        except OSError as exc:
            self._note("EARLYLOG_ON_STALL: cannot run the command (%s)" % exc)

    def _reaped(self, child):
        result = child.poll()
        if result is None:
            return False
        status, out = result
        if status not in (0, None):
            self._note("EARLYLOG_ON_STALL: the command %s: %s" % (
                "ran past %g s and was killed" % COMMAND_LIMIT if status == "timeout" else
                "exited with status %s" % status, out[-MAX_OUT:].decode("utf-8", "replace").strip()[:500]))
        return True

    def _exit(self, verdict, stuck_for):
        """Say why, write the exit record, and end the process from this thread."""
        where = verdict.get("where") or "an unknown place"
        cause = verdict.get("cause") if verdict.get("next") else verdict.get("blocked") or ""
        self.logger.event("earlylog", "EARLYLOG_STALL_EXIT=%g: ending this process, stuck for %.0f s in %s%s; "
                                      "exit status %d, so its launcher sees a failed worker" % (
                                          self.exit_after, stuck_for, where, "; " + cause if cause else "",
                                          EXIT_STATUS))
        cleared = _clear_rendezvous()
        if cleared:
            self._note(cleared)
        self.logger.event("exit", records.exit_line(EXIT_STATUS, time.time() - self.logger.started,
                                                    records.ended_by_us(stuck_for, where, self.exit_after)),
                          console=False)
        hooks._status = "written"  # no second exit record from the os._exit wrapper
        # The program's stdio buffers are not flushed: a stuck thread may hold their locks.
        hooks._original.get("os._exit", os._exit)(EXIT_STATUS)

    def _finish(self, child):
        _live.discard(child.pid)
        spawn._abandon(child.pid)
        try:
            os.close(child.out)
        except OSError:
            pass

    def _note(self, text):
        self.watchdog.say("note", text, console=False)
