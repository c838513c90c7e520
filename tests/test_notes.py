"""The grammar of a dump's notes (grammar/notes.py): what the runtime writes under a thread, the
reader reads back as the same values. Each kind: its writer's line parsed gives back what was
written, and a line as a real log has it parses to the values a cause reads. Pure: no processes,
but the last test, which runs `earlylog report` the way a user does and lists what it loaded."""
import json
import os
import subprocess
import sys

import pytest

from earlylog.grammar import stalls
from earlylog.grammar import notes, records
from support import ROOT, run_python


def read_back(line):
    """A written note as the reader keeps it: the line under its thread, stripped."""
    assert line.startswith(notes.INDENT), line
    return notes.parse(line.strip())


def test_state():
    assert read_back(notes.INDENT + notes.busy(0.98)) == notes.State(
        True, "running on a CPU (98% of a core)", None, "busy: running on a CPU (98% of a core)")
    assert notes.parse(notes.busy()).what == "running on a CPU"
    line = notes.blocked("sleeping (time.sleep or a timed wait)", "hrtimer_nanosleep")
    value = notes.parse(line)
    assert (value.busy, value.what, value.kernel, value.text) == (
        False, "sleeping (time.sleep or a timed wait)", "hrtimer_nanosleep", line)
    assert value.doing == "sleeping"
    assert notes.parse(notes.blocked("waiting to read from fd 0 (stdin), a pipe", "0")).kernel is None
    real = notes.parse("blocked: waiting for a child process to exit [kernel: do_wait]")
    assert real.doing == "waiting for a child process to exit" and real.kernel == "do_wait"


def test_waits_for():
    line = notes.waits_for("queue", "self.jobs", "queue.Queue at 0x7f3a", "join, 2 unfinished, 0 queued")
    assert line == "  waits for: queue self.jobs (queue.Queue at 0x7f3a, join, 2 unfinished, 0 queued)"
    value = read_back(line)
    assert value == notes.WaitsFor("queue", "self.jobs", "queue.Queue", "0x7f3a", "join, 2 unfinished, 0 queued")
    assert value.unfinished == 2
    value = read_back(notes.waits_for("lock", None, "threading.Lock at 0x7f00"))
    assert (value.kind, value.name, value.type, value.detail, value.unfinished) == (
        "lock", "?", "threading.Lock", None, None)
    real = notes.parse("waits for: semaphore pool.slots (threading.BoundedSemaphore at 0x7f12ab, 0 free)")
    assert real == notes.WaitsFor("semaphore", "pool.slots", "threading.BoundedSemaphore", "0x7f12ab", "0 free")


def test_held_by():
    where = notes.held_where("with", "/app/w.py", 9, "fetch")
    value = read_back(notes.held_by(notes.thread("Thread-2 (fetch)", 0x2b), where))
    assert value == notes.HeldBy("Thread-2 (fetch)", "0x2b", False, None, "with block", "/app/w.py", 9, "fetch")
    value = read_back(notes.held_by(notes.ITSELF, notes.held_where("acquire", "/app/a.py", 4, "take")))
    assert (value.self, value.how, value.file, value.line) == (True, "acquire()", "/app/a.py", 4)
    assert read_back(notes.held_by(notes.gone_thread(0x7f01))).gone == "0x7f01"
    assert read_back(notes.held_by(notes.UNKNOWN_HOLDER)) == notes.HeldBy(*[None] * 2 + [False] + [None] * 5)
    real = notes.parse("held by: thread keeper (ident 0x7f5c2a1fb6c0); acquire() at /srv/app/cache.py:41 in "
                       "refresh, not released since")
    assert (real.name, real.ident, real.how, real.line, real.func) == (
        "keeper", "0x7f5c2a1fb6c0", "acquire()", 41, "refresh")


def test_joins_set_by_handles_and_a_signal_handler():
    assert read_back(notes.joins("ticker", 0x2)) == notes.Joins("ticker", "0x2")
    assert notes.parse("joins: thread worker (ident zzz)") is None  # damaged: no value, no error
    value = read_back(notes.set_by("SIGTERM", "stop at svc.py:12"))
    assert value == notes.SetBy("SIGTERM", "stop at svc.py:12") and value.text == "the SIGTERM handler stop at svc.py:12"
    pairs = [("SIGHUP", "reload at app.py:12"), ("SIGTERM", "stop at app.py:20")]
    value = read_back(notes.handles(pairs))
    assert value.handlers == pairs and value.text == "SIGHUP with reload at app.py:12; SIGTERM with stop at app.py:20"
    value = read_back(notes.in_signal_handler("SIGALRM", "flush at m.py:6"))
    assert value == notes.InSignalHandler("SIGALRM", "flush at m.py:6") and value.text == "SIGALRM, flush at m.py:6"


def test_phase_terminal_cell():
    assert read_back(notes.phase("begin import torch")) == notes.Phase("begin import torch")
    assert read_back(notes.terminal("waiting for input at the terminal", "input()")) == notes.Terminal(
        "waiting for input at the terminal (input())")
    assert read_back(notes.cell(3, "/tmp/ipykernel_1/1234.py")) == notes.Cell("In[3]", "/tmp/ipykernel_1/1234.py")


def test_handling_retries_and_polls():
    words = "ConnectionRefusedError: [Errno 111] Connection refused, raised in connect at client.py:14, " \
            "connecting to 127.0.0.1:1"
    value = read_back(notes.handling(words))
    assert value == notes.Handling("ConnectionRefusedError", "[Errno 111] Connection refused", "connect at client.py:14",
                                   "127.0.0.1:1", words)
    assert read_back(notes.handling("_queue.Empty")).error == "_queue.Empty"
    assert records.polling("_queue.Empty", None) and records.polling("TimeoutError", None)
    assert not records.polling("TimeoutError", "10.0.0.2:29500") and not records.polling("ConnectionRefusedError", None)
    assert read_back(notes.retries(5, 12.34)) == notes.Retries(5, 12.3)
    assert notes.parse("retries: 3 failures seen in the last 4.0 s") == notes.Retries(3, 4.0)


def test_asyncio_and_task_chains():
    assert read_back(notes.asyncio(1)) == notes.Asyncio(1, None)
    assert read_back(notes.asyncio(3, ["127.0.0.1:8000", "[::1]:8000"])) == notes.Asyncio(3, "127.0.0.1:8000 [::1]:8000")
    assert read_back(notes.ASYNCIO_CHANGED) == notes.Asyncio(None, None)
    line = notes.task("Task-2", ["/app/main.py:10 in worker", "/app/main.py:20 in fetch", "awaiting " + notes.SERVER_READ])
    assert line.startswith("    task Task-2: ")
    value = read_back(line)
    assert value == notes.Task("Task-2", [("/app/main.py", 20, "fetch"), ("/app/main.py", 10, "worker")],
                               notes.SERVER_READ)
    assert notes.parse("task Task-3: /app/q.py:11 in consumer").awaiting is None


def test_what_a_task_awaits_of_asyncio_s_own_primitives():
    where = notes.held_where("with", "/app/a.py", 7, "outer")
    for what, value in [
            (notes.awaits_sync("Lock", "lock", notes.THIS_TASK, where),
             notes.AwaitsSync("Lock", "lock", notes.THIS_TASK, "with", "/app/a.py", 7, "outer", None, None)),
            (notes.awaits_sync("Lock", "self._lock", "task Task-3", notes.held_where("acquire", "/app/b.py", 9, "f")),
             notes.AwaitsSync("Lock", "self._lock", "task Task-3", "acquire", "/app/b.py", 9, "f", None, None)),
            (notes.awaits_sync("Queue", "jobs", detail="empty"),
             notes.AwaitsSync("Queue", "jobs", None, None, None, None, None, "empty", None)),
            (notes.awaits_sync("Queue", "q", detail="join, 2 unfinished, 0 queued"),
             notes.AwaitsSync("Queue", "q", None, None, None, None, None, "join, 2 unfinished, 0 queued", 2)),
            (notes.awaits_sync("Semaphore", None, "task Task-4", where, "0 free"),
             notes.AwaitsSync("Semaphore", None, "task Task-4", "with", "/app/a.py", 7, "outer", "0 free", None))]:
        assert notes.parse_awaits_sync(what) == value, what
        # In a task line, read back whole: the chain's last part.
        line = notes.task("Task-1", ["/app/a.py:4 in inner", "awaiting " + what])
        assert notes.parse_awaits_sync(read_back(line).awaiting) == value
    assert notes.parse_awaits_sync("a Future") is None and notes.parse_awaits_sync(None) is None


def test_a_dumps_thread_heads_and_frames():
    """The structure of a dump (stacks.py): each thread's head line, then its frames; notes and
    task lines under it are never read as frames, whatever their words hold."""
    line = notes.thread_head("data loader (1)", 4711, 0x7F00AB, False, True)
    assert line == "thread data loader (1) (tid 4711, ident 0x7f00ab, not daemon, main)"
    assert notes.head(line) == notes.Head("data loader (1)", 4711, "0x7f00ab", False, True)
    assert notes.head(notes.thread_head("earlylog-watchdog", None, 0x1, True, False)) == notes.Head(
        "earlylog-watchdog", None, "0x1", True, False)
    assert notes.head("Current thread 0x00007f00ab (most recent call first):") is None  # faulthandler's
    line = notes.frame_line("/app/train.py", 12, "main", "loader.join()")
    assert line == "  /app/train.py:12 in main: loader.join()"
    assert notes.parse_frame_line(line) == ("/app/train.py", 12, "main", "loader.join()")
    assert notes.parse_frame_line(notes.frame_line("/app/a b.py", 3, "<module>")) == ("/app/a b.py", 3, "<module>", None)
    held = notes.held_by(notes.thread("w", 0x1), notes.held_where("with", "/app/a.py", 3, "f"))
    assert notes.parse_frame_line(held) is None
    assert notes.parse_frame_line(notes.task("Task-1", ["/app/m.py:3 in main", "awaiting x"])) is None


def test_exception_words():
    """The first words of an `exception:` event (hooks.py) for a thread that died of it."""
    text = records.in_thread("loader (1)") + "ValueError: bad row: 3"
    assert records.parse_in_thread(text) == ("loader (1)", "ValueError: bad row: 3")
    assert records.parse_in_thread(records.in_thread("worker-1") + "SystemExit: 3") == ("worker-1", "SystemExit: 3")
    assert records.parse_in_thread("ValueError: x") is None
    task = records.in_task("ThreadPoolExecutor-0_1") + "OSError: [Errno 2] x (kept): y"
    assert records.parse_in_task(task) == ("ThreadPoolExecutor-0_1", "OSError: [Errno 2] x (kept): y")
    assert records.parse_in_thread(task) is None and records.parse_in_task(text) is None


def test_child():
    rest = notes.child_fd("write", 1, "pipe:[5]", (65536, 65536), True)
    line = notes.child_line(notes.child(12, "python worker.py", "S", "sleeping", rest))
    assert line == ("  child: pid 12 (python worker.py), state S (sleeping), blocked writing to fd 1 (stdout), "
                    "pipe:[5], full (65536 of 65536 bytes), which only this process reads")
    value = read_back(line)
    assert (value.pid, value.command, value.state, value.words, value.rest) == (12, "python worker.py", "S", "sleeping",
                                                                                rest)
    assert value.writes == ("stdout", "full", 65536, 65536, True) and value.reads_stdin is None
    value = read_back(notes.child_line(notes.child(13, "cat", "S", "sleeping", notes.child_fd("read", 0, "pipe:[7]", None, False))))
    assert value.reads_stdin is False and value.writes is None
    words = notes.child(14, "sh -c x", "S", "sleeping", notes.child_fd("read", 0, "pipe:[7]"))
    assert read_back(notes.child_line(words)).reads_stdin is None
    held = notes.held_open([("stdout", "pid 812 (sleep 3600)"), ("stderr", "pid 812 (sleep 3600)")])
    value = read_back(notes.child_line(notes.child(15, "sh -c 'sleep 3600 &'", "Z", "zombie", ", exited: it waits" + held)))
    assert value.held_open == [("stdout and stderr pipes are", "pid 812 (sleep 3600)")]
    assert read_back(notes.child_line(notes.child_gone(21))) == notes.Child(21, None, None, None, "", None, None, [])
    assert read_back(notes.child_line(notes.child_gone(22, "make all"))).command == "make all"
    real = notes.parse("child: pid 4242 (python -c 'import time; time.sleep(99)'), state S (sleeping), "
                       "waiting in a sleep [kernel: hrtimer_nanosleep]")
    assert (real.pid, real.state, real.writes, real.held_open) == (4242, "S", None, [])


def test_pipe_stdin_reads():
    other = notes.other_end([notes.who(456, "node gui.js"), "this process"])
    value = read_back(notes.pipe(1, "pipe:[99]", (60000, 65536), other))
    assert value == notes.Pipe(1, "stdout", "pipe", "full", "60000 of 65536 bytes", other)
    assert notes.holders(value.other) == [(456, "node gui.js")]
    value = read_back(notes.pipe(2, "socket:[8]", None, notes.other_end([], complete=False)))
    assert value == notes.Pipe(2, "stderr", "socket", None, None, "no process found holding the other end (search cut short)")
    value = notes.parse("pipe: fd 7, pipe:[41], not full (4096 of 65536 bytes); other end held by pid 3 (python)")
    assert (value.fd, value.stream, value.fullness, value.used) == (7, None, "not full", "4096 of 65536 bytes")
    value = read_back(notes.stdin("pipe:[77]", notes.other_end([notes.who(1, None)]), 'Continue? [y/N] "now"'))
    assert value == notes.Stdin("pipe", "other end held by pid 1 (?)", '"Continue? [y/N] \\"now\\""')
    assert read_back(notes.stdin("socket:[9]", "other end not known")) == notes.Stdin("socket", "other end not known", None)
    assert read_back(notes.reads(5, "pipe:[88]", other)) == notes.Reads(other)
    assert notes.parse("reads: fd 0 (stdin), pipe:[88]; other end held by pid 9 (make)") == notes.Reads(
        "other end held by pid 9 (make)")


def test_socket():
    text = notes.socket(8, "connecting", "127.0.0.1:51234", "127.0.0.1:29500", "SYN_SENT", "client", notes.syn_sent(3))
    value = read_back(notes.socket_line(text))
    assert value == notes.Socket("connecting", "127.0.0.1:51234", "127.0.0.1:29500", "SYN_SENT", "client",
                                 "SYN sent 4 times")
    assert value.unread is None
    text = notes.awaited(notes.socket(7, "receiving", "[::1]:5", "[::1]:8000", "ESTABLISHED", "client",
                                      notes.queued(0, 12)), "fetch at c.py:9")
    value = read_back(notes.socket_line(text))
    assert value.detail == "0 bytes received unread, 12 unsent; awaited in fetch at c.py:9" and value.unread == (0, 12)
    real = notes.parse("socket: fd 7 receiving, TCP 127.0.0.1:8000 -> 127.0.0.1:51000, ESTABLISHED, server; "
                       "0 bytes received unread, 0 unsent")
    assert (real.role, real.remote, real.unread) == ("server", "127.0.0.1:51000", (0, 0))


def test_file_lock():
    value = read_back(notes.file_lock("/data/cache/.lock", "flock", "held by " + notes.who(77, "python train.py")))
    assert value == notes.FileLock("/data/cache/.lock", "flock", "held by pid 77 (python train.py)")
    assert notes.holders(value.who) == [(77, "python train.py")]
    value = notes.parse("file lock: /srv/db (1).sqlite (sqlite); no process holds a lock on it")
    assert (value.path, value.how, notes.holders(value.who)) == ("/srv/db (1).sqlite", "sqlite", [])


@pytest.mark.parametrize("text", ["waits for: lock", "held by: someone", "child: pid x", "pipe: fd 1", "socket: fd",
                                  "file lock: /x", "asyncio: n tasks", "retries: many", "no such kind: x", "frame:1 in f"])
def test_damaged_or_unknown_notes_give_none_or_a_value_never_an_error(text):
    value = notes.parse(text)
    assert value is None or isinstance(value, notes.Note)


def test_the_grammar_is_cheap_to_import_and_off_the_start_path(logdir):
    # `re` is compiled on the reader's first parse, not at import: the runtime only writes.
    code = "import sys; from earlylog.grammar import notes; print('re' in sys.modules)"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "injector")))
    assert (out.returncode, out.stdout.strip()) == (0, "False"), out.stderr
    # A process with earlylog on loads it at its first dump: not on the start path, nor at the
    # watchdog's beats (which load retries.py, whose notes are written at a dump).
    res = run_python("import json, sys, time\nfirst = 'earlylog.grammar.notes' in sys.modules\ntime.sleep(2.5)\n"
                     "print(json.dumps([first, 'earlylog.runtime.retries' in sys.modules, "
                     "'earlylog.grammar.notes' in sys.modules]))", logdir=logdir, env={"EARLYLOG_STALL": "30"})
    assert res.returncode == 0 and json.loads(res.out) == [False, True, False]


def test_earlylog_report_loads_no_runtime_module(logdir):
    res = run_python("print('hello')", logdir=logdir)
    assert res.returncode == 0
    code = ("import io, sys, contextlib\n"
            "from earlylog.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main(['report', %r])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('earlylog.runtime')))" % str(logdir))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # read/ imports nothing from runtime/: the grammar is its own room


def test_running_and_dead_tasks():
    place = notes.frame("/app/sleep_loop.py", 11, "fetch_all")
    value = read_back(notes.running_task("Task-2", "fetch_all", place, "time.sleep"))
    assert value == notes.Running("task", "Task-2", "fetch_all", "/app/sleep_loop.py", 11, "fetch_all", "time.sleep")
    value = read_back(notes.running_callback(notes.frame("/app/proto.py", 7, "data_received")))
    assert value == notes.Running("callback", None, None, "/app/proto.py", 7, "data_received", None)
    places = [notes.frame("/app/p.py", 3, "producer"), notes.frame("/app/p.py", 9, "load")]
    value = read_back(notes.dead_task("Task-1", "producer", places, "ValueError('bad row')", ["Task-3", "Task-4"]))
    assert value == notes.DeadTask("Task-1", "producer", [("/app/p.py", 3, "producer"), ("/app/p.py", 9, "load")],
                                   "ValueError('bad row')", ["Task-3", "Task-4"])
    assert read_back(notes.dead_task("Task-5", "f", [], "KeyError('x')")).waiters == []
    real = notes.parse("dead task: Task-2 (producer): /srv/lost_producer.py:6 in producer; raised ValueError('bad row'); "
                       "waited on by task Task-3")
    assert (real.task, real.frames, real.waiters) == ("Task-2", [("/srv/lost_producer.py", 6, "producer")], ["Task-3"])


def test_greenlets():
    assert read_back(notes.greenlets(3, "gevent")) == notes.Greenlets(3, "gevent", None)
    assert read_back(notes.greenlets(900, "eventlet", 200)) == notes.Greenlets(900, "eventlet", None)
    assert read_back(notes.greenlets_unlisted("a heap of 9 blocks")) == notes.Greenlets(None, None, "a heap of 9 blocks")
    where = notes.held_where("with", "/app/g.py", 9, "main")
    line = notes.greenlet("worker", [notes.frame("/app/g.py", 2, "run"), notes.frame("/app/g.py", 5, "worker")],
                          "waits on lock `self.lock` (gevent.lock.Semaphore)", notes.greenlet_holder("main", where))
    assert read_back(line) == notes.Greenlet(
        "worker", [("/app/g.py", 5, "worker"), ("/app/g.py", 2, "run")], "waits on lock `self.lock` (gevent.lock.Semaphore)",
        "lock", "self.lock", "gevent.lock.Semaphore", "main", "with block at /app/g.py:9 in main", None)
    sock = notes.socket(9, "receiving", "127.0.0.1:5000", "127.0.0.1:41000", "ESTABLISHED", "server", notes.queued(0, 0))
    value = read_back(notes.greenlet("handle", [], "waits on socket recv `conn.recv(1024)`", notes.greenlet_socket(sock)))
    assert (value.kind, value.expr, value.socket, value.frames) == ("socket recv", "conn.recv(1024)", sock, [])
    assert notes.parse("socket: " + value.socket).role == "server"
    assert read_back(notes.greenlet("main", [], notes.waits_in("joinall"))).kind is None
    value = read_back(notes.greenlet("main", [], notes.waits_on("joinall", None, "gevent.joinall")))
    assert (value.kind, value.expr, value.type) == ("joinall", None, "gevent.joinall")
    value = read_back(notes.greenlet("w", [], notes.waits_on("queue get", "jobs.get()", "gevent.queue.Queue")))
    assert (value.kind, value.expr, value.type) == ("queue get", "jobs.get()", "gevent.queue.Queue")
    assert read_back(notes.greenlet("w", [], notes.waits_on("sleep", None, "gevent"))).kind == "sleep"


def test_exit_records():
    """The exit record's words (grammar/records.py): what hooks.py and act.py write, parse_exit reads back."""
    def read(how, status=0, more=""):
        return records.parse_exit(records.exit_line(status, 0.513, how + more))

    call = records.exit_call("sys.exit", "'no GPU'", ("main", "/app/train.py", 12))
    value = read(call, 1)
    assert (value["status"], value["call"], value["at"], value["outer"]) == (
        1, "sys.exit('no GPU') in main at train.py:12", ("main", "train.py", 12), None)
    call = records.exit_call("exit", "2", ("exit", "/usr/lib/python3.11/argparse.py", 2633), ("<module>", "/app/t.py", 9))
    value = read(call, 2, records.exit_dropped(2))
    assert value["call"] == "exit(2) in exit at argparse.py:2633, from <module> at t.py:9"
    assert (value["at"], value["outer"]) == (("exit", "argparse.py", 2633), ("<module>", "t.py", 9))
    assert read(records.exit_call("raise SystemExit", "'a (b); c'"), 1)["call"] == "raise SystemExit('a (b); c')"
    value = read(records.exit_call("os._exit", "1", ("work", "/app/w.py", 3)) +
                 records.exit_from("loader", ("main", "/app/a.py", 40)), 1)
    assert (value["by"], value["main_at"], value["at"]) == ("thread loader", ("main", "a.py", 40), ("work", "w.py", 3))
    assert read(records.exit_call("os._exit", "0", ("f", "/app/f.py", 2)) + records.exit_from())["by"] == "the main thread"
    value = read(records.exit_flush("stdout", "BrokenPipeError", True), 120)
    assert (value["status"], value["call"], value["flush"]) == (120, None, ("stdout", "BrokenPipeError", True))
    assert read(records.exit_flush("stderr", "OSError", False), 120)["flush"] == ("stderr", "OSError", False)
    value = read(records.ended_by_us(6.2, "read_index at job.py:5", 6), 124)
    assert value["ended"] == ("6 s", "read_index at job.py:5", "6")
    assert value["call"] == "ended by earlylog: stuck for 6 s in read_index at job.py:5 (EARLYLOG_STALL_EXIT=6)"
    value = read("end of program" + records.exit_daemons([("saver", records.place("save", "/app/ckpt.py", 4)),
                                                          ("upload", "put at s3.py:9")]) + records.exit_dropped(1))
    assert value["daemons"] == "saver in save at ckpt.py:4, upload in put at s3.py:9" and value["call"] is None
    value = read(records.exit_call("sys.exit", "0", ("main", "/app/t.py", 3)) +
                 records.exit_daemons([("saver", "save at ckpt.py:4")]))
    assert value["call"] == "sys.exit(0) in main at t.py:3" and value["daemons"] == "saver in save at ckpt.py:4"
    value = read("end of program")
    assert value["status"] == 0 and value["call"] is None and value["by"] is None and value["flush"] is None
    assert value["daemons"] is None


def test_watchdog_lines():
    """The `retrying:` and `fork:` lines (grammar/records.py): what retries.py and fault.py write, the reader reads back."""
    assert records.parse_retrying(records.retrying("loader", 7, 12.25, "ConnectionRefusedError: [Errno 111]")) == (
        "loader", 7, 12.2, "ConnectionRefusedError: [Errno 111]")
    assert records.parse_retrying("retrying: something else") is None
    assert records.parse_fork_threads(records.fork_threads(["prefetcher"])) == (1, "prefetcher")
    assert records.parse_fork_threads(records.fork_threads(["a", "b"])) == (2, "a, b")
    assert records.fork_threads(["a", "b"]).startswith("fork() while 2 other threads run (a, b): ")
    # Threads with no Python stack (a native pool) are counted, beside the named ones or alone.
    for names, native in [(["a"], 3), ([], 1), ([], 2), (["a", "b"], 0)]:
        line = records.fork_threads(names, native)
        assert records.parse_fork_threads(line) == ((len(names), ", ".join(names)) if names else None), line
        assert records.parse_fork_native(line) == native, line



def _fields(line):
    return {name: getattr(line, name) for name in line.__slots__ if getattr(line, name) is not None}


def test_stall_lines_round_trip():
    """The `stall:` line, the contract alerts and EARLYLOG_STALL_EXIT act on, has one writer per
    shape and one parser (grammar/stalls.py): every shape and state the runtime writes reads back
    typed, so a rewording on one side fails here."""
    path = "/tmp/x.log"
    silent = {
        stalls.busy(0.374): ("busy", 37),
        stalls.IDLE_WORDS: ("idle", None),
        stalls.BLOCKED_WORDS: ("blocked", None),
        stalls.MOVING_WORDS: ("moving", None),
        "waiting for input at the terminal (input()) in ask at ask.py:3": ("terminal", None),
        "waiting for child pid 812 (python train.py); its own log says whether it is stuck": ("children", None),
        stalls.in_collective("rank 0 waits in all_reduce #11 on group 0 (gloo) for its peer ranks"):
            ("collective", None),
    }
    for words, (state, share) in silent.items():
        for phase in ("", "load shards"):
            line = stalls.parse(stalls.silent(31.4, phase, words, path))
            assert _fields(line) == dict({"shape": "silent", "seconds": 31.0, "state": state, "words": words,
                                          "path": path}, **({"phase": phase} if phase else {}),
                                         **({"share": share} if share is not None else {})), words
    assert stalls.parse(stalls.silent(3, "", stalls.BLOCKED_WORDS, None)).path == "the console"
    step = stalls.no_step(41.2, "step", "0.2", 5)
    stuck = stalls.no_progress("MainThread", 12, "waiting for lock L at f.py:12 in g", "load", more=2)
    assert stuck.endswith("in g (phase load) (and 2 more)")
    task = stalls.no_loop_progress("task", "Task-1 (main)", "MainThread", 31.2, "waiting for a Future in fetch at app.py:8")
    greenlet = stalls.no_loop_progress("greenlet", "build_index", "MainThread", 4.2,
                                       "waits on result `reply` in b at a.py:3")
    noisy = {
        (step,): {"seconds": 41.0, "steps": "steps came every ~0.2 s before; last step 5"},
        (stuck,): {"seconds": 12.0, "thread": "MainThread"},
        (task,): {"seconds": 31.0, "thread": "MainThread", "task": "Task-1 (main)"},
        (greenlet,): {"seconds": 4.0, "thread": "MainThread", "greenlet": "build_index"},
        (step, stuck): {"seconds": 41.0, "thread": "MainThread", "steps": "steps came every ~0.2 s before; last step 5"},
        (step, stalls.busy(0.5)): {"seconds": 41.0, "steps": "steps came every ~0.2 s before; last step 5",
                                   "state": "busy", "share": 50},
    }
    for parts, fields in noisy.items():
        line = stalls.parse(stalls.noisy(list(parts), path))
        assert _fields(line) == dict(fields, shape="noisy", words="; ".join(parts), path=path), parts
    assert stalls.parse(stalls.noisy([stalls.no_step(9, "batch", "1.5", 30)], path)).steps == \
        "batches came every ~1.5 s before; last batch 30"
    assert _fields(stalls.parse(stalls.gil(12.3, 0.9))) == {"shape": "gil", "seconds": 12.0}
    assert "computing (90% of a core)" in stalls.gil(12, 0.9) and ", blocked;" in stalls.gil(12, 0.1)
    assert _fields(stalls.parse(stalls.over(6.2, silence=True))) == {"shape": "over", "seconds": 6.0}
    assert _fields(stalls.parse(stalls.over(6.2, silence=False))) == {"shape": "over", "seconds": 6.0}
    assert stalls.parse("silent for 30 s; blocked: sleeping") is None  # no `stacks in`: not a stall line
    assert stalls.parse("rank 0 is fine") is None
    # A wait for peer ranks in a collective, silent or while other threads print: its collective.
    peers = stalls.waiting_for_peers("all_reduce #11 on group 0")
    assert stalls.parse(stalls.silent(6, "", stalls.in_collective("the main thread is " + peers), path)).collective \
        == "all_reduce #11 on group 0"
    told = stalls.parse(stalls.noisy([step, stalls.no_progress("MainThread", 4, peers + " at t.py:9 in f")], path))
    assert told.collective == "all_reduce #11 on group 0" and told.thread == "MainThread"
    assert stalls.parse(stalls.noisy([stalls.no_progress("T", 4, stalls.waiting_for_peers("recv #3 from rank 0", "0")
                                                         + " at t.py:9 in f")], path)).collective == "recv #3 from rank 0"
    assert stalls.parse(stalls.noisy([stuck], path)).collective is None


def test_stall_lines_reach_the_console_by_one_rule():
    """Which stalls a person sees, stated once (grammar/stalls.py): never an idle process's or one at a
    prompt; a supervisor's only to relay a stuck child; a rank waiting for its peers from its second
    telling; a noisy stall when a thread is stuck, or no step came and nothing computes."""
    assert stalls.console_silent(stalls.BLOCKED_WORDS, False, False) is True
    assert stalls.console_silent(stalls.IDLE_WORDS, True, True) is False
    assert stalls.console_silent(stalls.MOVING_WORDS, True, True) is False  # quiet, but its threads ran
    assert stalls.console_silent(stalls.busy(0.9), True, True) is False  # computing: busy is not stuck
    assert stalls.console_silent("waiting for input at the terminal (input())", True, True) is False
    children = "waiting for child pid 8 (python w.py); its own log says whether it is stuck"
    assert stalls.console_silent(children, False, True) is False
    assert stalls.console_silent(children + "; stuck: pid 8 (w): blocked: no CPU used", True, False) is True
    collective = stalls.in_collective("the main thread is waiting in barrier #2 on group 0 for peer ranks")
    assert (stalls.console_silent(collective, False, False), stalls.console_silent(collective, False, True)) == \
        (False, True)
    assert stalls.console_noisy(True, 0.0, False, False) is True
    assert (stalls.console_noisy(True, 0.0, True, False), stalls.console_noisy(True, 0.0, True, True)) == (False, True)
    assert stalls.console_noisy(False, 0.9, False, False) is None  # computing beside its own output


def test_collective_notes_round_trip():
    """The `collective:` note (runtime/collectives.py writes it through notes.py): every field back."""
    cases = [
        ("all_reduce", 11, "0", "default_pg", "gloo", "0,1", 4.12, 1, 10, None, None, 5, False),
        ("barrier", 1, "0", None, None, None, None, 0, None, None, None, None, True),
        ("recv", 3, "0", None, "gloo", "0,1", None, 0, None, "0", 0, 6, True),
        ("send", 1, "2", None, "gloo", "0,2", None, 0, None, "2", 4, None, False),
        ("all_gather_into_tensor", None, None, None, None, None, None, 0, None, None, None, 0, False),
    ]
    for fields in cases:
        line = notes.collective(*fields)
        assert line.startswith("  collective: ")
        got = notes.parse(line.strip())
        want = list(fields)
        want[6] = round(fields[6], 1) if fields[6] is not None else None
        assert got.astuple() == tuple(want), (line, got)
    assert notes.parse(notes.collective(*cases[0]).strip()).where == "all_reduce #11 on group 0"
    assert notes.parse(notes.collective(*cases[2]).strip()).where == "recv #3 from rank 0"


def test_start_lines():
    """The `start:` line (boot.py writes it through records.py), read back; an older earlylog's
    line without the later parts still gives what it has."""
    line = records.start_line(41, 40, "argv python 'a; log b' x.py", "/logs/x.log", "fork", "0.1.0",
                              "/venv/lib/python3.11/site-packages", "3.11.7", 7, "rank=3 local_rank=1 job=4711_3")
    assert records.parse_start(line) == {
        "ppid": 40, "argv": "argv python 'a; log b' x.py", "origin": "fork", "version": "0.1.0",
        "package": "/venv/lib/python3.11/site-packages", "grandparent": 7,
        "place": {"rank": 3, "local_rank": 1, "job": "4711_3"}}
    plain = records.parse_start(records.start_line(5, 1, "argv python -c pass", None, "pth", "0.1.0", "/p", "3.9.18"))
    assert (plain["grandparent"], plain["place"], plain["origin"]) == (None, {}, "pth")
    old = records.parse_start("pid 5 (parent 1) argv python t.py; log /l/t.log (via pth, earlylog 0.0.9)")
    assert (old["ppid"], old["version"], old["package"]) == (1, "0.0.9", None)


def test_watchdog_note():
    assert records.parse_stacks_after("watchdog: %s; fatal signals ..." % records.stacks_after(2.5)) == 2.5
    assert records.parse_stacks_after("watchdog: %s; fatal signals ..." % records.stacks_after(0)) is None



def test_init_process_group_words():
    words = records.init_words("gloo", "tcp://10.0.0.5:29500", 1, 2, "10.0.0.5:29500", "120 s")
    assert records.parse_init("init_process_group %s (for peers)" % words) == ((1, 2), "10.0.0.5:29500")
    assert records.parse_init("init_process_group " + records.init_words("nccl", "env://", "?", "?", "-", "default")) == (
        None, "-")
    assert records.parse_init("load_dataset") == (None, None) and records.parse_init(None) == (None, None)


def test_memory_lines():
    line = records.mem_line("812 MiB", "7.6 GiB", "8 GiB", 95, 3, 2)
    assert line == ("rss 812 MiB; cgroup 7.6 GiB of 8 GiB (95%); oom_kill 3 (up from 2: the kernel's OOM killer "
                    "killed a process in this cgroup)")
    assert records.parse_mem(line) == (3, 95, True)
    assert records.parse_mem(records.mem_line("9 MiB", "838 MiB", None, None, 0)) == (0, None, False)
    assert records.parse_mem(records.mem_line("9 MiB")) == (None, None, False)


def test_who_can_change_what_a_thread_waits_on():
    """reach.py's notes under a wait: the threads that can still change the object, none, and
    those joining a waiter whose code after the join refers to it; a task's object nothing completes."""
    for named, others, after, value in [
            ([("loader", 0x7f1)], 3, [], notes.CanChange((("loader", "0x7f1"),), 1, ())),
            ([("a b", 0x1), ("c", 0x2)], 3, [], notes.CanChange((("a b", "0x1"), ("c", "0x2")), 2, ())),
            ([], 2, [], notes.CanChange((), 2, ())),
            ([], 1, [("MainThread", 0x3)], notes.CanChange((), 1, (("MainThread", "0x3"),)))]:
        line = notes.can_change(named, others, after)
        assert line.startswith(notes.INDENT + "can change it: ")
        assert read_back(line) == value, line
    assert read_back(notes.can_change([], 2)).none and not read_back(notes.can_change([("x", 1)], 2)).none
    line = notes.nothing_completes("Task-1")
    assert read_back(line) == notes.NothingCompletes("Task-1")
