"""The thread-level causes piece by piece. The reader's side is fed small log folders written
line by line in earlylog's own format (cycles of three, busy holders, damaged notes, a GIL stall
that ended, processes that ended minutes apart); the runtime's side looks at real threads of
this test process (hostile objects, code without source, a holder that ended)."""
import sys
import textwrap
import threading
import time

from earlylog.read import logread, verdict
from earlylog.grammar import records
from earlylog.runtime import waits
from support import T0, stalled, thread, write

BUSY = "busy: running on a CPU (98% of a core)"
SLEEP = "blocked: sleeping (time.sleep or a timed wait) [kernel: hrtimer_nanosleep]"


def causes(folder):
    return verdict.judge(logread.read(str(folder)), now=T0 + 60)["causes"]


def test_notes_are_never_frames_and_names_may_hold_spaces(tmp_path):
    stalled(tmp_path, 10, thread("Thread-1 (worker)", "0x1a", [("/app/w.py", 3, "work", "with lock:")], notes=[
        "waits for: lock lock (threading.Lock at 0x7f00)",
        "held by: thread Thread-2 (fetch) (ident 0x2b); with block at /app/w.py:9 in fetch"]),
        thread("Thread-2 (fetch)", "0x2b", [("/app/w.py", 10, "fetch", "time.sleep(60)")], state=SLEEP))
    (t, u) = logread.read(str(tmp_path)).procs[("node9", 10)].stall.threads
    assert t.name == "Thread-1 (worker)" and t.ident == "0x1a" and t.daemon is True
    assert t.frames == [("/app/w.py", 3, "work")] and len(t.notes) == 3
    (cause,) = causes(tmp_path)
    assert cause["threads"] == ["Thread-1 (worker)", "Thread-2 (fetch)"]
    assert "thread Thread-2 (fetch) holds it (with block at w.py:9 in fetch) and is now in fetch at w.py:10 " \
           "(sleeping)" in cause["text"]
    assert "keep slow or blocking calls out of the `with lock:` block at w.py:9" in cause["next"]


def _ring(names):
    """Threads each waiting for the lock the next one holds."""
    out = []
    for i, name in enumerate(names):
        nxt = names[(i + 1) % len(names)]
        out.append(thread(name, "0x%x" % (i + 1), [("/app/r.py", 10 + i, name, "with lock_%s:" % nxt)], notes=[
            "waits for: lock lock_%s (threading.Lock at 0x%x)" % (nxt, 100 + i),
            "held by: thread %s (ident 0x%x); with block at /app/r.py:%d in %s" % (
                nxt, (i + 1) % len(names) + 1, 20 + i, nxt)]))
    return out


def test_a_cycle_of_three_is_one_deadlock_and_nothing_else(tmp_path):
    stalled(tmp_path, 11, *_ring(["a", "b", "c"]))
    (cause,) = causes(tmp_path)
    assert cause["kind"] == "deadlock" and cause["threads"] == ["a", "b", "c"] and cause["pids"] == [11]
    assert "thread a holds `lock_a`" in cause["text"] and "waits for `lock_b` at r.py:10" in cause["text"]


def test_a_deadlock_supersedes_the_lock_waits_in_it_and_only_those(tmp_path):
    outside = thread("d", "0x9", [("/app/r.py", 30, "d", "with lock_a:")], notes=[
        "waits for: lock lock_a (threading.Lock at 0x200)",
        "held by: thread a (ident 0x1); with block at /app/r.py:20 in a"])
    stalled(tmp_path, 11, *_ring(["a", "b"]), outside)
    found = causes(tmp_path)
    assert [c["kind"] for c in found] == ["deadlock", "lock"], found
    assert found[0]["threads"] == ["a", "b"] and found[1]["threads"] == ["d", "a"]
    assert "thread d waits for lock `lock_a`" in found[1]["text"] and "thread a holds it" in found[1]["text"]


def test_waiting_for_a_lock_a_busy_thread_holds_is_no_cause(tmp_path):
    stalled(tmp_path, 12, thread("MainThread", "0x1", [("/app/m.py", 5, "step", "total += x")], state=BUSY,
                                 main=True, daemon=False),
            thread("poller", "0x2", [("/app/m.py", 9, "poll", "with lock:")], notes=[
                "waits for: lock lock (threading.Lock at 0x7f00)",
                "held by: thread MainThread (ident 0x1); with block at /app/m.py:4 in step"]))
    assert causes(tmp_path) == []


def test_holders_that_cannot_be_found_are_said_to_be_unknown(tmp_path):
    stalled(tmp_path, 13, thread("MainThread", "0x1", [("/app/m.py", 5, "load", "with self._lock:")], notes=[
        "waits for: lock self._lock (threading.Lock at 0x7f00)", "held by: an unknown thread"], main=True),
        thread("saver", "0x2", [("/app/m.py", 8, "save", "with registry[key]:")], notes=[
            "waits for: lock registry[key] (threading.RLock at 0x7f01)",
            "held by: a thread no longer running (ident 0x9)"]))
    unknown, gone = causes(tmp_path)
    assert "held by an unknown thread" in unknown["text"] and "`self._lock`" in unknown["text"]
    assert "self._lock.acquire()" in unknown["next"]
    assert "no longer running (ident 0x9)" in gone["text"] and gone["threads"] == ["saver"]


def test_damaged_or_foreign_notes_give_no_cause_and_no_error(tmp_path):
    stalled(tmp_path, 14, thread("MainThread", "0x1", [("/app/m.py", 5, "load", "with lock:")], notes=[
        "waits for: lock", "held by: thread", "waits for: lock x (threading.Lock at 0x7f00",
        "joins: thread worker (ident zzz)", "waits for: teleport x (a.B at 0x1)"], main=True))
    assert causes(tmp_path) == []


def test_a_join_on_a_sleeping_loop_is_waiting_not_stuck(tmp_path):
    stalled(tmp_path, 15, thread("MainThread", "0x1", [("/usr/lib/python3.11/threading.py", 1119, "join", ""),
                                                       ("/app/m.py", 9, "main", "t.join()")],
                                 notes=["joins: thread ticker (ident 0x2)"], main=True, daemon=False),
            thread("ticker", "0x2", [("/app/m.py", 4, "tick", "time.sleep(1)")], state=SLEEP))
    assert causes(tmp_path) == []


def test_a_gil_stall_that_ended_is_no_cause_and_one_that_did_not_names_the_c_call(tmp_path):
    block = textwrap.dedent("""\
        Timeout (0:00:01.500000)!
        Thread 0x00007f0000000001 (most recent call first):
          <no Python frame>

        Thread 0x00007f0000000002 (most recent call first):
          File "/usr/lib/python3.11/json/decoder.py", line 353 in raw_decode
          File "/app/load.py", line 7 in parse
          File "/app/load.py", line 12 in <module>
        """).splitlines()
    start = [(0, "start", "pid 16 (parent 1) argv python load.py; log x (via pth, earlylog 0.1.0 at /opt/e, "
                          "Python 3.11.7)", ())]
    write(tmp_path / "held", 16, start + [(0.1, "out", "parsing", ())] + [(None, None, line, ()) for line in block],
          "load")
    (cause,) = causes(tmp_path / "held")
    assert cause["kind"] == "gil" and cause["threads"] == ["MainThread"]
    assert "held the GIL for at least 1.5 s" in cause["text"]
    assert "thread MainThread is in json.decoder.raw_decode, called from parse at load.py:7" in cause["text"]
    write(tmp_path / "over", 16, start + [(None, None, line, ()) for line in block] + [
        (3, "stall", "the GIL was held for 3 s: the watchdog thread could not run", ()),
        (3.5, "exit", "status 0 after 3.5 s; end of program", ())], "load")
    assert causes(tmp_path / "over") == []


def test_a_thread_that_died_while_the_program_went_on_is_no_cause(tmp_path):
    died = [(0.5, "exception", "in thread loader: ValueError: bad", ["Traceback (most recent call last):",
                                                                     '  File "/app/l.py", line 4, in load',
                                                                     "ValueError: bad"])]
    write(tmp_path / "fine", 17, [(0, "start", "pid 17 (parent 1) argv python l.py; log x (via pth)", ())] + died
          + [(1, "exit", "status 0 after 1 s; end of program", ())], "l")
    assert causes(tmp_path / "fine") == []
    stalled(tmp_path / "stuck", 17, thread("MainThread", "0x1", [("/app/l.py", 9, "main", "q.get()")],
                                           notes=["waits for: queue q (queue.Queue at 0x7f00, get)"], main=True),
            extra=died)
    (cause,) = causes(tmp_path / "stuck")
    assert cause["kind"] == "thread-died" and cause["threads"] == ["loader", "MainThread"]
    assert "died with ValueError: bad in load at l.py:4, 0.5 s after start" in cause["text"]
    assert "1.5 s before the process went silent" not in cause["text"]  # silent since the death itself
    assert "an item from queue `q` at l.py:9" in cause["text"]


def test_recursion_error_traceback_is_a_stack_overflow_with_its_depth(tmp_path):
    tb = ["Traceback (most recent call last):", '  File "/app/t.py", line 9, in <module>', "    walk(0)"] + \
         ['  File "/app/t.py", line 5, in walk', "    return walk(n + 1)"] * 3 + \
         ["  [Previous line repeated 996 more times]", "RecursionError: maximum recursion depth exceeded"]
    write(tmp_path, 18, [(0, "start", "pid 18 (parent 1) argv python t.py; log x (via pth)", ()),
                         (0.2, "exception", "RecursionError: maximum recursion depth exceeded", tb),
                         (0.3, "exit", "status 1 after 0.3 s; uncaught RecursionError", ())], "t")
    (cause,) = causes(tmp_path)
    assert cause["kind"] == "stack-overflow"
    assert "walk at t.py:5 recursed 999 deep, until RecursionError" in cause["text"]


def test_processes_that_ended_minutes_apart_are_not_one_stop(tmp_path):
    for pid, at in ((20, 5), (21, 300)):
        write(tmp_path, pid, [(0, "start", "pid %d (parent 1) argv python w.py; log x (via pth)" % pid, ()),
                              (at, "out", "step", ())], "w")
    rep = verdict.judge(logread.read(str(tmp_path)), now=T0 + 600)
    assert [c for c in rep["causes"] if c["kind"] == "run-stopped"] == []


def test_a_report_read_between_a_stall_line_and_its_dump_keeps_the_earlier_stacks(tmp_path):
    stalled(tmp_path, 22, thread("MainThread", "0x1", [("/app/m.py", 5, "load", "q.get()")], main=True))
    with open(next(tmp_path.iterdir()), "a") as f:
        f.write(records.format_lines("text", T0 + 3, 22, "app", "node9", "stall", "silent for 2 s; blocked", ()))
    p = logread.read(str(tmp_path)).procs[("node9", 22)]
    assert [t.name for t in p.stall.threads] == ["MainThread"] and p.stall.text == "silent for 2 s; blocked"


# --- the runtime's side, on real threads of this process --------------------------------------

def _notes(thread_obj):
    frames = sys._current_frames()
    return waits.notes(thread_obj.ident, frames[thread_obj.ident], frames,
                       {t.ident: t for t in threading.enumerate()})


def _until_blocked(*threads_):
    for t in threads_:
        t.start()
    time.sleep(0.3)


class Hostile:
    """Every way a lookup could run the program's code records itself."""
    calls = []

    def __init__(self):
        self._lock = threading.Lock()

    def __getattribute__(self, name):
        if name not in ("_lock", "work", "hold"):
            Hostile.calls.append(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        Hostile.calls.append("__getattr__")
        raise AttributeError(name)

    def __eq__(self, other):
        Hostile.calls.append("__eq__")
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        Hostile.calls.append("__repr__")
        return "Hostile()"

    @property
    def __class__(self):
        Hostile.calls.append("__class__")
        return Hostile

    def hold(self, go):
        with self._lock:
            go.wait()

    def work(self):
        with self._lock:
            pass


def test_a_hostile_object_is_read_without_running_any_of_its_code():
    h, go = Hostile(), threading.Event()
    holder = threading.Thread(target=h.hold, args=(go,), name="holder", daemon=True)
    waiter = threading.Thread(target=h.work, name="waiter", daemon=True)
    holder.start()
    time.sleep(0.1)
    _until_blocked(waiter)
    Hostile.calls.clear()
    try:
        lines = _notes(waiter)
    finally:
        go.set()
    assert Hostile.calls == []
    assert lines[0].startswith("  waits for: lock self._lock (threading.Lock at 0x")
    assert lines[1].startswith("  held by: thread holder (ident 0x%x); with block at %s:" % (holder.ident, __file__))


def test_code_without_source_gives_no_name_and_no_error():
    lock, space = threading.Lock(), {}
    exec(compile("def take(lock):\n    with lock:\n        pass\n", "<generated>", "exec"), space)
    lock.acquire()
    waiter = threading.Thread(target=space["take"], args=(lock,), daemon=True)
    _until_blocked(waiter)
    try:
        assert _notes(waiter) == []
    finally:
        lock.release()


def test_a_lambda_waiter_and_a_holder_that_ended_without_releasing():
    lock, rlock, done = threading.Lock(), threading.RLock(), threading.Event()

    def take_and_end():
        lock.acquire()
        rlock.acquire()
        done.wait()  # ends holding both once the waiters are blocked (so no waiter reuses its ident)
    taker = threading.Thread(target=take_and_end)
    taker.start()
    time.sleep(0.1)
    waiter = threading.Thread(target=lambda: lock.acquire(), daemon=True)
    rwaiter = threading.Thread(target=lambda: rlock.acquire(), daemon=True)
    _until_blocked(waiter, rwaiter)
    done.set()
    taker.join()
    try:
        lines, rlines = _notes(waiter), _notes(rwaiter)
    finally:
        lock.release()
    assert lines[0].startswith("  waits for: lock lock (threading.Lock") and lines[1] == "  held by: an unknown thread"
    assert rlines[1] == "  held by: a thread no longer running (ident 0x%x)" % taker.ident


def test_a_thread_inside_condition_wait_has_given_the_lock_back():
    cond, stop = threading.Condition(threading.Lock()), threading.Event()

    def wait_for_notify():
        with cond:
            cond.wait()

    def hold():
        with cond:
            stop.wait()

    def enter():
        with cond:
            pass
    sleeper = threading.Thread(target=wait_for_notify, name="sleeper", daemon=True)
    holder = threading.Thread(target=hold, name="holder", daemon=True)
    waiter = threading.Thread(target=enter, name="waiter", daemon=True)
    _until_blocked(sleeper)
    _until_blocked(holder, waiter)
    try:
        lines = _notes(waiter)
        sleeper_lines = _notes(sleeper)
    finally:
        stop.set()
    assert lines[0].startswith("  waits for: lock cond (threading.Condition at 0x")
    assert [line for line in lines if line.startswith("  held by:")] == [
        line for line in lines if "thread holder" in line] and len(lines) == 2
    assert sleeper_lines[0].startswith("  waits for: condition cond (threading.Condition")


def test_many_threads_waiting_on_one_lock_are_read_quickly():
    lock, done = threading.Lock(), threading.Event()

    def keep():
        lock.acquire()
        done.wait()
        lock.release()
    keeper = threading.Thread(target=keep, name="keeper", daemon=True)
    _until_blocked(keeper)
    crowd = [threading.Thread(target=lambda: lock.acquire() or lock.release(), daemon=True) for _ in range(100)]
    _until_blocked(*crowd)
    frames = sys._current_frames()
    threads_ = {t.ident: t for t in threading.enumerate()}
    started = time.process_time()
    try:
        lines = [waits.notes(t.ident, frames[t.ident], frames, threads_) for t in crowd]
    finally:
        done.set()
    took = time.process_time() - started
    assert took < 1.0, took
    assert all(line[1].startswith("  held by: thread keeper") for line in lines), lines[0]


def test_notes_never_raise():
    assert waits.notes(1, None, {}, {}) == []
    assert waits.notes(threading.get_ident(), sys._getframe(), {threading.get_ident(): sys._getframe()}, {}) == []


def _decorated(func):
    return func


class Shelf:
    """A holder whose function has a decorator and a signature over several lines, and a lock
    named with non-ASCII text before it on the line (columns count UTF-8 bytes)."""

    def __init__(self):
        self.locks = {"étagère": threading.Lock()}

    @_decorated
    def hold(
        self,
        go,
    ):
        with self.locks["étagère"]:
            go.wait()

    def take(self):
        label = "é"; lock = self.locks["étagère"]; lock.acquire()  # noqa: E702 (one line on purpose)
        return label


def test_holders_behind_decorators_and_non_ascii_source_are_found():
    shelf, go = Shelf(), threading.Event()
    holder = threading.Thread(target=shelf.hold, args=(go,), name="holder", daemon=True)
    holder.start()
    time.sleep(0.1)
    waiter = threading.Thread(target=shelf.take, name="waiter", daemon=True)
    _until_blocked(waiter)
    try:
        lines = _notes(waiter)
    finally:
        go.set()
    assert lines[0].startswith("  waits for: lock lock (threading.Lock at 0x")
    assert lines[1].startswith("  held by: thread holder (ident 0x%x); with block at %s:" % (holder.ident, __file__))
    assert lines[1].endswith(" in hold")


def test_a_multi_line_exception_is_summed_up_by_its_first_line_with_words(tmp_path):
    text = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \\n" + "=" * 60 +
            "\\ntrain.py FAILED\\n" + "-" * 60 + "\\nFailures:\\n  <NO_OTHER_FAILURES>")
    write(tmp_path, 30, [(0, "start", "pid 30 (parent 1) argv torchrun train.py; log x (via pth)", ()),
                         (0.2, "exception", text, ["Traceback (most recent call last):",
                                                   '  File "/venv/bin/torchrun", line 8, in <module>']),
                         (0.3, "exit", "status 1 after 0.3 s; uncaught ChildFailedError", ())], "torchrun")
    (p,) = verdict.judge(logread.read(str(tmp_path)), now=T0 + 60)["processes"]
    assert p["exception"]["text"] == text  # whole in the JSON
    assert p["summary"] == ("exited with status 1 after 0.3 s: torch.distributed.elastic.multiprocessing.errors."
                            "ChildFailedError: train.py FAILED (5 more lines) in <module> at torchrun:8")


def test_a_sigterm_after_the_exit_record_is_how_the_process_really_ended(tmp_path):
    # torchrun stops the other ranks with SIGTERM as one fails: a rank already exiting writes its
    # exit record, then dies of the SIGTERM during its shutdown; its parent sees -15.
    write(tmp_path, 7, [(0, "start", "pid 7 (parent 1) argv python train.py; log x (via pth)", ()),
                        (1, "exit", "status 1 after 1.000 s; uncaught RuntimeError", ()),
                        (None, None, "Current thread 0x00007f0000000001 (most recent call first):", ()),
                        (None, None, '  File "/app/train.py", line 9 in <module>', ())], tag="rank0")
    (p,) = verdict.judge(logread.read(str(tmp_path)), now=T0 + 60)["processes"]
    assert p["state"] == "failed" and p["summary"].endswith(
        "; then it received SIGTERM during its shutdown (its parent sees -15)"), p["summary"]
