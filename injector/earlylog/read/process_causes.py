"""Process-level causes of a hang (see causes.py): the pipe deadlock of `Popen.wait()` with
`stdout=PIPE`, a child's output kept open by a process it left running, a multiprocessing.Pool
that lost a worker, a queue read whose writers all ended, a multiprocessing lock whose likely
holder died, a prompt on a stdin nobody answers, a socket with no answer, a file lock another
process holds, a stdout nobody reads, a parent waiting on a child. The evidence is the notes the
runtime wrote under each blocked thread (`child:`, `pipe:`, `stdin:`, `socket:`, `file lock:`,
see runtime/peers.py) and the process tree. It only reads the judged report and the folder, and
names no process that no note or log names: what is not known is said to be unknown."""
import time

from earlylog.read.causes import Cause, busy, label, secs
from earlylog.read.frames import is_file, library, where
from earlylog.grammar import notes  # the grammar of the notes under a dumped thread

_LOST = {"vanished": "vanished (no exit record: SIGKILL, or the kernel's OOM killer)",
         "killed": "was killed by a signal", "crashed": "crashed", "failed": "exited with an error"}
_HELPERS = ("resource-tracker", "forkserver")
_PROMPT_ENDS = ("?", ":", "]", ")", ">")


def waiting(report, folder, finders):
    """The causes the registry's waiter finders find in the blocked threads (read/registry.py:
    each finder with the processes it reads, `among`, whether only those still stalled, `live`,
    and the kinds of cause that supersede its own, `above`), in the registry's order, the most
    basic kinds first: each finder reads every thread of its processes before the next one starts,
    and a parent and child pair is told once (a pipe deadlock is not also a parent waiting on its
    child): a finder skips a pair in `told`, the pairs of the causes found before that supersede it."""
    procs = {(d.host, d.pid): d for d in report.processes}
    found = []
    for finder, among, live, above in finders:
        for d in among(report):
            if live and d.state != "stalled":
                continue
            for t in d.stall.threads:
                told = {frozenset(c.pids[:2]) for c in found if c.kind in above}
                cause = finder(_Seen(d, t, procs, folder), told)
                if cause is not None:
                    found.append(cause)
    return found


def stuck(report):
    """The processes whose last dump tells what they were stuck on at the end."""
    return [d for d in report.processes if _stuck_at_end(d)]


def pool_waiters(report):
    """A pool restarting workers that fail as they start keeps its own thread busy: it is no less hung."""
    return [d for d in report.processes if d.stall is not None and not d.idle and d.state in _POOL_WAITERS]


def killed_children(report, folder):
    return _killed_children(report.processes, {(d.host, d.pid): d for d in report.processes})


def retries(report, folder):
    return _retries(report.processes)


def orphans(report, folder):
    return _orphans(report.processes, {(d.host, d.pid): d for d in report.processes})


def _orphans(processes, procs):
    """Processes still running (checked here) after their parent ended in trouble (killed,
    vanished, crashed, failed): nothing stops them now, and they keep what they hold (GPU memory,
    a port, a lock). One cause per parent."""
    by_parent = {}
    for d in processes:
        parent = procs.get((d.host, d.ppid))
        # multiprocessing's helpers end by themselves once the pipe from their parent closes.
        if d.kernel_state and parent is not None and parent.state in _LOST and d.tag not in _HELPERS:
            by_parent.setdefault((parent.host, parent.pid), []).append(d)
    found = []
    for key, kids in sorted(by_parent.items()):
        parent, kids = procs[key], sorted(kids, key=lambda k: k.pid)
        names = [label(k) for k in kids]
        runs, its, it, they, hold = ("runs", "its", "it", "it", "holds") if len(kids) == 1 else \
            ("run", "their", "them", "they", "hold")
        text = "%s still %s after %s parent pid %d (%s) %s: nothing will stop %s now, and %s %s on to what %s " \
               "took (GPU memory, ports, file locks)" % (
                   " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names), runs, its,
                   parent.pid, parent.tag, _LOST[parent.state], it, they, hold, they)
        how = "a process killed with SIGKILL cannot end its children: stop a launcher with Ctrl-C or SIGTERM" \
            if parent.state == "vanished" else "have the parent end its children on its way out " \
            "(`proc.terminate()` in a `finally:`, `daemon=True` for multiprocessing workers)"
        next_step = "end %s: `kill %s` (`kill -9` for any still there a few seconds later); %s" % (
            it, " ".join(str(k.pid) for k in kids), how)
        found.append(Cause("orphan", text, next_step, [k.pid for k in kids] + [parent.pid]))
    return found


def _killed_children(processes, procs):
    """A child killed by a signal while its parent waited for it (verdict.py sets `waited_by`): the
    child, the signal, when, and the parent's waiting frame; then what the parent did without it."""
    found = []
    for d in processes:
        w = d.waited_by
        if not w:
            continue
        parent = procs.get((d.host, w.pid))
        if w.until:
            when = " at %s" % time.strftime("%H:%M:%S", time.localtime(w.until))
        elif d.last_seen:
            when = " after %s (its last sign of life)" % time.strftime("%H:%M:%S", time.localtime(d.last_seen))
        else:
            when = ""
        how = "the OOM killer or kill -9" if w.signal == "SIGKILL" else "kill, a scheduler or a supervisor"
        at = where(w.frame) + (" (%s)" % w.code if w.code else "")
        text = "child pid %d (%s) was killed by %s (%s)%s while pid %d (%s) waited for it in %s%s" % (
            d.pid, w.command or d.tag, w.signal, how, when, w.pid, parent.tag if parent else "?",
            at, "" if w.thread == "MainThread" else ", thread " + w.thread)
        if parent is not None and parent.state == "exited":
            text += "; pid %d then exited with status 0 all the same, without the child's work" % w.pid
        elif parent is not None and parent.state == "failed":
            text += "; pid %d then failed (its own line follows)" % w.pid
        elif parent is not None and parent.state == "stalled":
            text += "; pid %d still waits" % w.pid
        mem = d.memory
        seen = " (its own last memory line: %s)" % mem.last.partition(";")[0] if mem and mem.last else ""
        next_step = ("find what killed it: `dmesg -T | grep -i -e oom -e 'killed process'` (or `journalctl -k`) on "
                     "that host lists the OOM killer's kills%s; with none there, a person or a scheduler (a job's "
                     "time or memory limit) sent %s" % (seen, w.signal))
        if parent is None or parent.state != "failed":
            next_step += "; and have the parent check the child's status (%s) so that the run fails loudly " \
                         "instead of going on without the child's work" % _status_check(w.call)
        found.append(Cause("child-killed", text, next_step, [d.pid, w.pid], [w.thread]))
    return found


def _retries(processes):
    """A thread that keeps failing an operation and sleeping between tries (verdict.py sets
    `retrying` from the runtime's audit notes): what fails, how often, where, and what to check."""
    found = []
    for d in processes:
        r = d.retrying
        if not r:
            continue
        place = r.raised_in or where(r.frame)
        thread = "" if r.thread == "MainThread" else ", thread " + r.thread
        what = "connecting to %s (%s)" % (r.address, r.error) if r.address else "with %s" % r.error
        if r.count:
            text = "%s is retrying: %d failures %s seen in the last %s, in %s%s; it sleeps between tries, so it " \
                   "looks idle, and the call never succeeds" % (
                       label(d), r.count, what, secs(r.seconds), place, thread)
        else:
            text = "%s is retrying: it sleeps between tries after a failure %s, raised in %s%s" % (
                label(d), what, place, thread)
        target = r.address or "the server it calls"
        if r.error == "ConnectionRefusedError":
            why = "nothing listens on %s: start the server there (or find in its own log why it is not up), and " \
                  "check the host and port this program was given" % target
        elif "Timeout" in r.error or r.error in ("timeout", "socket.timeout"):
            why = "nothing answers at %s: the host is down, the address is wrong, or a firewall drops the packets " \
                  "(`nc -vz HOST PORT` from this host tells)" % target
        else:
            why = "fix what makes the call fail (%s)" % r.error
        next_step = why + "; and give the retry loop a limit (a number of tries or a deadline) so that it fails " \
                          "with the error instead of waiting forever"
        found.append(Cause("retrying", text, next_step, [d.pid], [r.thread]))
    return found


def _status_check(call):
    """How the parent's wait tells a child killed by a signal."""
    if call and "join" in call:
        return "`process.exitcode` is negative: -9 for SIGKILL"
    if call and call.startswith("subprocess.") and call not in ("subprocess.wait", "subprocess.communicate"):
        return "`%s(..., check=True)` raises for it" % call
    return "`proc.wait()` returns -9 for SIGKILL"


def _stuck_at_end(d):
    """Stalled now, or stuck when it ended with no exit record: a report read after a timeout or a
    Ctrl-C stopped the run finds the why in the last stall dump all the same. Idle and busy are not
    stuck (docs/design.md#busy-is-not-stuck)."""
    if d.stall is None or d.idle:
        return False
    return d.state == "stalled" or (d.state in ("vanished", "killed") and not busy(d.stall.text))


class _Seen:
    """One blocked thread of one stalled process, with what the report and folder say around it."""

    def __init__(self, d, t, procs, folder):
        self.d, self.t, self.procs, self.folder = d, t, procs, folder

    def notes(self, kind):
        """The thread's notes of one kind (a class of grammar/notes.py), parsed."""
        return notes.every(self.t.notes, kind)

    def children(self):
        """The `child:` notes of children still there (pid, command, state letter and words, the rest)."""
        return [c for c in self.notes(notes.Child) if c.state]

    def proc(self, pid):
        return self.procs.get((self.d.host, pid))

    @property
    def who(self):
        return "pid %d (%s)" % (self.d.pid, self.d.tag)

    @property
    def at(self):
        """`run_child at dl.py:8`, and the thread's name when it is not the main thread."""
        text = where(self.t.frame)
        return text if self.t.main else "%s, thread %s" % (text, self.t.name)

    @property
    def call(self):
        return self.t.call or "a wait"

    @property
    def waits(self):
        """`waits in subprocess.run`, or `waits` when no library call of the user's is on the stack."""
        return "waits in " + self.t.call if self.t.call else "waits"

    def cause(self, kind, text, next_step, pids):
        return Cause(kind, text, next_step, pids, [self.t.name])


def _waits_for(d, pid):
    """Does a thread of process d wait for child pid (a `child:` note names it)?"""
    return any(c.pid == pid and c.command is not None for t in (d.stall.threads if d.stall else ())
               for c in notes.every(t.notes, notes.Child))


def _holders(seen, text):
    """[(pid, command)] from `other end held by pid 456 (node gui.js), this process`."""
    if not text.startswith("other end held by "):
        return []
    text = text[len("other end held by "):]
    found = notes.holders(text)
    return found + ([(seen.d.pid, "this process")] if text.startswith("this process") or
                    ", this process" in text else [])


def _launcher(command):
    """What kind of program holds the other end, for the fix's wording: node, python or another."""
    first = (command or "").split(" ", 1)[0]
    return "node" if first.startswith(("node", "electron")) else "python" if first.startswith("python") else "other"


# --- the causes, each from one blocked thread -------------------------------------------------------

def _pipe_deadlock(seen, told):
    """A parent waiting for a child that is blocked on a pipe only the parent serves: writing to a
    full stdout the parent reads only afterwards, or reading a stdin the parent never writes."""
    for kid in seen.children():
        pid, command, me = kid.pid, kid.command, seen.d.pid
        if frozenset((me, pid)) in told:
            continue
        head = "pipe deadlock: %s %s (%s) for child pid %d (%s), which is blocked" % (
            seen.who, seen.waits, seen.at, pid, command)
        if kid.writes is not None:
            stream, fullness, used, size, only = kid.writes
            text = "%s writing to its %s: a %s pipe (%s of %s bytes) that %spid %d reads, and not while it waits" % (
                head, stream, fullness, used, size, "only " if only else "", me)
            return seen.cause("pipe-deadlock", text, _communicate(stream), [me, pid])
        if kid.reads_stdin is not None:
            text = "%s reading its stdin: a pipe that %spid %d writes, and not while it waits" % (
                head, "only " if kid.reads_stdin else "", me)
            next_step = ("give the child its input and end it: `proc.communicate(input=...)` (writes, closes stdin, "
                         "then waits), or `proc.stdin.close()` before `proc.wait()`; or start it with "
                         "`stdin=subprocess.DEVNULL`")
            return seen.cause("pipe-deadlock", text, next_step, [me, pid])
    return None


def _read_deadlock(seen, told):
    """A process reading a pipe (a child's stdout) whose writer, a process of its own, is blocked
    reading a stdin that this one holds and never writes: each waits for the other."""
    for note in seen.notes(notes.Reads):
        for pid, command in _holders(seen, note.other):
            writer = seen.proc(pid)
            if writer is None or pid == seen.d.pid or frozenset((seen.d.pid, pid)) in told:
                continue
            for t in (writer.stall.threads if writer.stall else ()):
                stdin = notes.first(t.notes, notes.Stdin)
                if stdin is None or seen.d.pid not in [p for p, _c in _holders(seen, stdin.other)]:
                    continue
                text = ("deadlock: %s, in %s, reads the output of pid %d (%s), which waits for input on its stdin "
                        "(in %s), a pipe only pid %d writes to: each waits for the other" % (
                            seen.who, seen.at, pid, writer.tag, where(t.frame), seen.d.pid))
                next_step = ("write the child's input and close its stdin before reading its output: "
                             "`proc.communicate(input=...)`, or `proc.stdin.write(...)` then `proc.stdin.close()`; "
                             "or start it with `stdin=subprocess.DEVNULL` if it needs none")
                return seen.cause("pipe-deadlock", text, next_step, [seen.d.pid, pid])
    return None


def _queue_join(seen, told):
    """A parent waiting for a child to exit while a thread of the child is blocked writing to a full
    pipe that the parent holds the other end of: the feeder thread of a multiprocessing Queue (or
    Pipe) whose data the parent would read only after the child ends, and a child does not end
    before its queue is flushed."""
    for pid in [kid.pid for kid in seen.children()]:
        child = seen.proc(pid)
        if child is None or child.stall is None or frozenset((seen.d.pid, pid)) in told:
            continue
        for t in child.stall.threads:
            texts = t.notes
            pipe = next((p for p in notes.every(texts, notes.Pipe) if p.used), None)
            if pipe is None or not any(n.startswith("blocked: writing to fd") for n in texts):
                continue
            if seen.d.pid not in [p for p, _c in _holders(seen, pipe.other)]:
                continue
            feeder = any(is_file(f.file, "multiprocessing/queues.py") for f in t.frames)
            text = ("deadlock: %s %s (%s) for child pid %d (%s) to end, and the child cannot end: its %s is "
                    "blocked sending into a full pipe (%s) that pid %d reads, and not while it waits" % (
                        seen.who, seen.waits, seen.at, pid, child.tag,
                        "queue's feeder thread (%s)" % t.name if feeder else "thread %s" % t.name,
                        pipe.used, seen.d.pid))
            next_step = ("read what the child sends before joining it: %s, then `p.join()`%s" % (
                "`q.get()` everything it puts" if feeder else "`conn.recv()` everything it sends",
                " (a process that put data on a multiprocessing Queue ends only once that data is in the pipe)"
                if feeder else ""))
            return seen.cause("queue-join", text, next_step, [seen.d.pid, pid])
    return None


def _communicate(stream):
    return ("read the output while waiting: `out, err = proc.communicate()` instead of `proc.wait()` (or send the "
            "child's %s to a file or `subprocess.DEVNULL`)" % stream)


_POOL_WAITERS = ("stalled", "busy", "vanished", "killed")
_RESTARTS = 3  # failed workers of one pool, all with one error: a pool restarting a worker that cannot start


def _failure_text(d):
    """`FileNotFoundError: ... in init_worker at train.py:4`: how an exited process failed, less its pid and time."""
    return d.summary.partition(" after ")[2].partition(": ")[2] or d.summary


def _ended(seen):
    """The states of a child that ended in trouble before this process's wait: any of _LOST while
    the process is stalled; once the run was stopped, only those with a record of their end (a
    crash, an error exit): a child with none may have ended with the rest of the run."""
    return _LOST if seen.d.state == "stalled" else ("crashed", "failed")


def _pool(seen, told):
    """A multiprocessing.Pool call waiting for results while a worker of the pool is gone and
    no worker left is computing: the task the dead worker held is lost for good."""
    frames = seen.t.frames
    if not any("multiprocessing/pool.py" in f.file for f in frames) or all(library(f.file) for f in frames):
        return None  # the pool's own helper threads wait too: the cause is the user's call
    workers = [seen.proc(pid) for pid in seen.d.children]
    for helper in [w for w in workers if w and w.tag == "forkserver"]:  # its workers are the forkserver's
        workers += [seen.proc(pid) for pid in helper.children]
    workers = [w for w in workers if w is not None and w.tag not in _HELPERS]
    lost = [w for w in workers if w.state in _ended(seen)]
    if not lost or any(_computing(w) for w in workers):
        return None
    w = lost[0]
    failures = {_failure_text(x) for x in lost}
    if len(lost) >= _RESTARTS and len(failures) == 1 and w.state == "failed":
        text = ("%s %s (%s) for results, but multiprocessing.Pool keeps starting workers that fail as they start, "
                "%d so far, each with %s: it replaces them for ever, so this wait never ends" % (
                    seen.who, seen.waits, seen.at, len(lost), failures.pop()))
        next_step = ("fix that error (a Pool's initializer that fails is retried in every new worker, never "
                     "raised in the caller), or use concurrent.futures.ProcessPoolExecutor, which raises "
                     "BrokenProcessPool")
        return seen.cause("pool", text, next_step, [seen.d.pid] + [x.pid for x in lost[:8]])
    when = time.strftime(" at %H:%M:%S", time.localtime(w.end)) if w.end else ""
    # "crashed at 11:15:49 (Segmentation fault (SIGSEGV) in work at squares.py:5)"
    how = _LOST[w.state] + when + (" (%s)" % w.summary.partition(": ")[2] if w.state == "crashed" else "")
    text = ("%s %s (%s) for results, but its pool worker pid %d %s%s, and no worker is computing: "
            "multiprocessing.Pool never recovers the task a dead worker held, so this wait never ends" % (
                seen.who, seen.waits, seen.at, w.pid, how,
                " (%d workers lost)" % len(lost) if len(lost) > 1 else ""))
    why = "`dmesg -T | grep -i oom` on that host" if w.state == "vanished" else "its log"
    next_step = ("use concurrent.futures.ProcessPoolExecutor, which raises BrokenProcessPool when a worker dies, "
                 "instead of waiting forever; and find why worker %d died (%s)" % (w.pid, why))
    return seen.cause("pool", text, next_step, [seen.d.pid] + [x.pid for x in lost])


def _child_died(seen, told):
    """A read from a multiprocessing Queue, Pipe or Connection while every child of the process has
    ended and one ended in trouble: nothing is left to write, and the read never learns that."""
    frames = seen.t.frames
    files = [f.file for f in frames]
    reads = any(is_file(f, "multiprocessing/queues.py") or is_file(f, "multiprocessing/connection.py") for f in files)
    if not reads or any(is_file(f, "multiprocessing/pool.py") for f in files) or all(library(f) for f in files):
        return None  # the pool has its own cause; a queue's feeder thread is not the user's wait
    kids = [k for k in map(seen.proc, seen.d.children) if k is not None and k.tag not in _HELPERS]
    lost = [k for k in kids if k.state in _ended(seen)]
    if not lost or any(k.end is None for k in kids) or frozenset((seen.d.pid, lost[0].pid)) in told:
        return None
    k = lost[0]
    what, fix = k.summary, "fix what ended child %d (`earlylog report --stacks` shows its error)" % k.pid
    if k.state == "vanished":  # no exit record: nothing but SIGKILL ends a process so
        what = "was killed by SIGKILL (the OOM killer or kill -9) after %s, its last sign of life%s" % (
            time.strftime("%H:%M:%S", time.localtime(k.last_seen)) if k.last_seen else "its start",
            ", in " + where(k.where) if k.where else "")
        fix = "find what killed child %d: `dmesg -T | grep -i -e oom -e 'killed process'` (or `journalctl -k`) " \
              "on that host lists the OOM killer's kills; with none there, a person or a scheduler sent it" % k.pid
    text = ("%s %s (%s) for data from its child processes, but none is left to send it: child pid %d "
            "(%s) %s%s" % (seen.who, seen.waits, seen.at, k.pid, k.tag, what,
                           " (%d children ended in trouble)" % len(lost) if len(lost) > 1 else ""))
    next_step = ("%s; a multiprocessing queue or pipe is not told when its writer dies, so read with a timeout "
                 "(`q.get(timeout=...)`, `conn.poll(timeout)`) and check `process.exitcode` between tries" % fix)
    return seen.cause("child-died", text, next_step, [seen.d.pid] + [x.pid for x in lost])


def _shared_lock(seen, told):
    """A thread waiting for a multiprocessing Lock, RLock or Semaphore while a process that shared
    it (a child, a sibling, the parent) died by a signal or crashed before the wait: a process that
    dies holding such a lock never releases it, and the lock does not record who holds it."""
    frames = seen.t.frames
    if not any(is_file(f.file, "multiprocessing/synchronize.py") and f.function in ("__enter__", "acquire")
               for f in frames[:3]):
        return None
    d = seen.d
    family = [seen.proc(pid) for pid in d.children] + [seen.proc(d.ppid)] + [
        o for o in seen.procs.values() if o.host == d.host and o.ppid == d.ppid and o is not d]
    since = d.stall.since or float("inf")
    dead = [o for o in family if o is not None and o.state in ("vanished", "killed", "crashed")
            and (o.end or o.last_seen or since) <= since]
    if not dead or frozenset((d.pid, dead[0].pid)) in told:
        return None
    o = dead[0]
    text = ("%s %s (%s) for a multiprocessing lock it shares with other processes, and pid %d (%s), which shared "
            "it, %s before the wait began: a process that dies holding such a lock never releases it" % (
                seen.who, seen.waits, seen.at, o.pid, o.tag, _LOST[o.state]))
    next_step = ("keep work that can be killed (by SIGKILL, the OOM killer) out of the `with lock:` block, and take "
                 "the lock with a timeout (`lock.acquire(timeout=...)`) so a lost holder fails loudly; a "
                 "multiprocessing lock does not record its holder, so pid %d is the likely one, not a sure one"
                 % o.pid)
    return seen.cause("shared-lock", text, next_step, [d.pid, o.pid])


def _file_lock(seen, told):
    """A thread waiting for a lock on a file (flock, fcntl or the filelock package's retry loop):
    the file, and the process holding the lock, with its own state when it logs here too."""
    for note in seen.notes(notes.FileLock):
        path, who = note.path, note.who
        holders = notes.holders(who)
        text = "%s %s (%s) for a lock on the file %s" % (seen.who, seen.waits, seen.at, path)
        if note.how == "sqlite" and holders:
            pid, command = holders[0]
            holder = seen.proc(pid)
            text = ("%s retries a SQLite statement (%s): the database %s is locked by pid %d (%s)%s; SQLite sleeps "
                    "and tries again until the connection's `timeout` runs out" % (
                        seen.who, seen.at, path, pid, command, " (it is %s)" % holder.summary if holder else ""))
            next_step = ("pid %d holds a transaction open: commit or close it (`with con:` commits at the end of the "
                         "block; a long-lived connection should not sit inside one), and give this connection a short "
                         "`sqlite3.connect(..., timeout=...)` so a lock ends in \"database is locked\"" % pid)
        elif holders:
            pid, command = holders[0]
            holder = seen.proc(pid)
            text += ", which pid %d (%s) holds%s" % (pid, command, "; it is %s" % holder.summary if holder else "")
            next_step = ("let pid %d finish, or stop it if it is a leftover run (`kill %d`); runs that share a cache "
                         "or output folder wait for each other this way: give each its own, or take the lock with a "
                         "timeout (`FileLock(path, timeout=...)`)" % (pid, pid))
        elif who.startswith("held by this process"):
            text += ", which this process itself holds through another open of the file"
            next_step = "take the lock once per process, or reuse the object that already holds it"
        elif who.startswith("no process holds"):
            text += ", and no process on this host holds a lock on it"
            next_step = ("if no other job uses it, it is a stale lock file: delete %s; on a shared filesystem (NFS) "
                         "the holder may be a process on another host" % path)
        else:
            text += ", whose holder is not known (%s)" % who
            next_step = "find the process holding it: `fuser -v %s` or `lsof %s`" % (path, path)
        return seen.cause("file-lock", text, next_step, [seen.d.pid] + [pid for pid, _ in holders[:1]])
    return None


def _computing(w):
    """A worker that may be working on a task: busy in its last dump, or running with no dump that
    says otherwise, unless the kernel has it asleep (a worker forked by a pool's thread has no
    watchdog of its own, so no dump ever calls it idle)."""
    main = w.stall.main if w.stall else None
    return (w.state == "running" and w.kernel_state != "S") or bool(main and main.busy)


def _stdin(seen, told):
    """A thread reading a stdin that is no terminal, after a prompt (or straight from the user's
    code), while the process at the other end sends nothing. A library reading stdin with no
    prompt (a language server waiting for requests) is idle, not stuck: no cause."""
    for note in seen.notes(notes.Stdin):
        prompt = note.prompt if note.prompt and _prompt(note.prompt) else _last_prompt(seen)
        frames = seen.t.frames
        if not prompt and not (frames and not library(frames[0].file)):
            continue
        holders = _holders(seen, note.other)
        text = "%s waits for input on stdin (%s)%s; stdin is a %s" % (
            seen.who, seen.at, " after printing %s" % prompt if prompt else "", note.link)
        if holders:
            pid, command = holders[0]
            holder = seen.proc(pid)
            text += " whose other end pid %d (%s) holds%s" % (
                pid, command, " and, instead of writing to it, waits for it to exit"
                if holder is not None and _waits_for(holder, seen.d.pid) else " without writing to it")
        else:
            text += " that no process was found writing to"
        text += ": the answer may never come" if prompt else \
            ", and nothing has come for %s" % secs(seen.d.stall.seconds or 0)
        launcher = _launcher(holders[0][1]) if holders else "other"
        next_step = _answer(launcher) if prompt else (
            "if input is meant to come, find out why %s sends none; if not, %s" % (
                "pid %d" % holders[0][0] if holders else "the launcher", _no_stdin(launcher)))
        return seen.cause("stdin", text, next_step, [seen.d.pid] + [pid for pid, _ in holders[:1]])
    return None


def _prompt(quoted):
    return quoted.strip('"').rstrip().endswith(_PROMPT_ENDS)


def _last_prompt(seen):
    """The last line the process printed, quoted, when it reads as a prompt (`... [y/N]`, `Password:`).
    Other lines may follow it in the log (the background probes write theirs when they finish)."""
    p = seen.folder.procs.get((seen.d.host, seen.d.pid))
    output = getattr(p, "output", None)
    if not output:
        return None
    quoted = '"%s"' % output[1][-120:].replace('"', '\\"')
    return quoted if _prompt(quoted) else None


def _answer(launcher):
    ways = {"node": "write the answer from the launcher (`child.stdin.write('y\\n')`)",
            "python": "pass the answer with `proc.communicate(input=b'y\\n')`",
            "other": "write the answer into its stdin"}
    return "%s, or make the program non-interactive (its --yes option or environment variable) and %s, so a " \
           "prompt fails at once instead of waiting" % (ways[launcher], _no_stdin(launcher))


def _no_stdin(launcher):
    return {"node": "spawn it with `stdio: ['ignore', 'pipe', 'pipe']`",
            "python": "start it with `stdin=subprocess.DEVNULL`",
            "other": "give it stdin from /dev/null"}[launcher]


def _network(seen, told):
    """A client thread connecting to, or waiting on, a TCP peer that does not answer. A server's
    end of a connection waiting for the next request is idle: no cause."""
    for note in seen.notes(notes.Socket):
        if note.role != "client":
            continue
        call, peer, state, detail = note.call, note.remote, note.state, note.detail or ""
        detail, _, task = detail.partition("; awaited in ")  # an asyncio task's read: where the task waits
        at = task or seen.at
        silent = secs(seen.d.stall.seconds or 0)
        timeout = "`socket.create_connection(addr, timeout=...)`, `sock.settimeout(...)`, " \
                  "`requests.get(url, timeout=...)`"
        if state == "SYN_SENT":
            text = "%s, in %s, has been connecting to %s for %s with no answer (%s)" % (
                seen.who, at, peer, silent, detail)
            next_step = ("check that the server at %s is up and accepting (a full accept queue or a firewall "
                         "drops the connection unanswered), and give the call a timeout: %s" % (peer, timeout))
        elif state == "ESTABLISHED" and call == "sending":
            text = "%s, in %s, has been sending to %s for %s, and the peer does not read (%s)" % (
                seen.who, at, peer, silent, detail)
            next_step = "check why the peer at %s stopped reading, and give the call a timeout: %s" % (peer, timeout)
        elif state == "ESTABLISHED":
            text = "%s, in %s, has been waiting for a reply from %s for %s (connected; %s)" % (
                seen.who, at, peer, silent, _queues(detail))
            next_step = ("check what the server at %s is doing (is it alive, did it get the whole request?), and "
                         "give the call a timeout so a silent peer becomes an error: %s" % (
                             peer, "`asyncio.wait_for(..., timeout=...)`" if task else timeout))
        else:
            continue
        return seen.cause("network", text, next_step, [seen.d.pid])
    return None


def _queues(detail):
    """`0 bytes received unread, 0 unsent` in words a reader can act on."""
    counts = notes.Socket(None, None, None, None, None, detail).unread
    if counts is None:
        return detail
    unread, unsent = counts
    sent = "everything it sent was acknowledged" if not unsent else "%d bytes it sent are not acknowledged" % unsent
    return "%s, and %s" % (sent, "nothing has come back" if not unread else "%d bytes wait unread" % unread)


def _full_stream(seen, told):
    """A thread blocked writing to its stdout or stderr, which the process at the other end does
    not read. When that process waits for this one to exit, it is a pipe deadlock."""
    for note in [p for p in seen.notes(notes.Pipe) if p.stream in ("stdout", "stderr")]:
        stream, kind, holders = note.stream, "pipe" if note.link == "pipe" else "socket pair", _holders(seen, note.other)
        reader = seen.proc(holders[0][0]) if holders else None
        me = seen.d.pid
        if reader is not None and frozenset((reader.pid, me)) in told:
            continue
        if reader is not None and _waits_for(reader, me):
            text = ("pipe deadlock: %s is blocked writing to its %s (%s), a pipe that pid %d (%s) reads only after "
                    "this process exits, and it waits for that" % (seen.who, stream, seen.at, reader.pid,
                                                                   reader.tag))
            return seen.cause("pipe-deadlock", text, _communicate(stream), [reader.pid, me])
        full = "is full" if note.fullness == "full" else "takes no more"
        if holders:
            text = "%s is blocked writing to its %s (%s): the %s %s and pid %d (%s), which holds the other end, " \
                   "does not read it" % (seen.who, stream, seen.at, kind, full, holders[0][0], holders[0][1])
        else:
            text = "%s is blocked writing to its %s (%s): the %s %s and no process was found reading it" % (
                seen.who, stream, seen.at, kind, full)
        return seen.cause("pipe-full", text, _drain(_launcher(holders[0][1]) if holders else "other", stream,
                                                    "pid %d" % holders[0][0] if holders else "the launcher"),
                          [me] + [pid for pid, _ in holders[:1]])
    return None


def _drain(launcher, stream, who):
    return {"node": "in %s, read the child's output (`child.%s.on('data', ...)`), or spawn it with "
                    "`stdio: 'inherit'` or `'ignore'`" % (who, stream),
            "python": "in %s, read `proc.%s` (or use `proc.communicate()`), or start the child with `%s=` a file "
                      "or `subprocess.DEVNULL`" % (who, stream, stream),
            "other": "make %s read this stream, or send it to a file or /dev/null" % who}[launcher]


def _pipe_held(seen, told):
    """A parent reading a child's output to its end (communicate, run with capture_output) after
    the child exited, while a process the child left running holds the pipe open."""
    for kid in seen.children():
        pid, command = kid.pid, kid.command
        if not kid.held_open or frozenset((seen.d.pid, pid)) in told:
            continue
        streams, who = kid.held_open[0]
        holders = notes.holders(who)
        text = ("%s %s (%s) for the end of the output of child pid %d (%s), which has exited, but its "
                "%s still held open by %s, a process it left running: the output never ends" % (
                    seen.who, seen.waits, seen.at, pid, command, streams, who))
        next_step = ("start background processes with their own output (`cmd > server.log 2>&1 &`, or "
                     "`stdout=subprocess.DEVNULL` for a Popen they start), or wait for the child with "
                     "`proc.wait()` instead of reading its output to the end")
        return seen.cause("pipe-held", text, next_step, [seen.d.pid, pid] + [int(p) for p, _ in holders[:1]])
    return None


def _child_wait(seen, told):
    """A parent waiting for a child: the child named, its kernel state, and its own stall if it logs."""
    for pid, command, state, words, rest in [(c.pid, c.command, c.state, c.words, c.rest) for c in seen.children()]:
        if frozenset((seen.d.pid, pid)) in told:
            continue
        text = "%s %s (%s) for child pid %d (%s), which is %s" % (
            seen.who, seen.waits, seen.at, pid, command, rest[2:] if rest.startswith(", ") else "%s (state %s)" % (
                words, state))
        kid = seen.proc(pid)
        main = kid.stall.main if kid and kid.stall else None
        if main:
            text += "; the child is stalled in %s" % where(main.frame)
        elif kid is not None and kid.summary:
            text += "; the child %s" % kid.summary
        look = "`earlylog report --stacks` shows its stack" if kid is not None else \
            "`py-spy dump --pid %d` shows its stack" % pid
        next_step = "find out why child %d does not finish (%s), and give the wait a limit: %s" % (
            pid, look, _limit(seen.call))
        return seen.cause("child", text, next_step, [seen.d.pid, pid])
    return None


def _limit(call):
    """How the call the parent waits in takes a timeout."""
    if "join" in call:
        return "`process.join(timeout=...)`"
    if call in ("subprocess.wait", "subprocess.communicate"):
        return "`proc.%s(timeout=...)`" % call.partition(".")[2]
    if call.startswith("subprocess."):
        return "`%s(..., timeout=...)`" % call
    return "`proc.wait(timeout=...)`"
