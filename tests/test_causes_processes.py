"""Causes across processes, each from a real program: a parent waiting on a child, the pipe
deadlock of `Popen(stdout=PIPE).wait()`, a Node.js launcher that never reads its child's stdout,
a prompt on a stdin nobody answers, a socket with no answer on 127.0.0.1, a `multiprocessing.Pool`
whose worker was SIGKILLed, a queue whose only writer died, a multiprocessing lock whose holder
was killed, a file lock (flock, lockf, the filelock package) that another process holds or a
crashed run left, and a child's output that a process it left running keeps open. Each test
asserts the cause a user reads first (JSON `causes` and the text verdict's first lines), its
evidence and its next step."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from earlylog.read import logread, verdict
from support import (PYTHON, ROOT, T0, earlylog, kill_tree, log_files, python_3, read, report_json, script, stalled,
                     start, thread, wait_for, write)

NODE_DIR = os.path.join(ROOT, "tests", "node")
needs_node = pytest.mark.skipif(
    not shutil.which("node") or not os.path.isdir(os.path.join(NODE_DIR, "node_modules")),
    reason="needs node and `npm install` in tests/node (.ci/run does both)")
QUIET = {"EARLYLOG_NATIVE": "0"}  # no gdb stacks: they cost seconds and show nothing asked here


def dumped(logdir, n=1, needle=""):
    """n log files hold a stall dump (containing needle, e.g. a runtime note)."""
    def enough():
        return sum(1 for f in log_files(logdir) if "dump: stall" in read(f) and needle in read(f)) >= n
    wait_for(enough)


def stuck(proc, logdir, *waits, report=()):
    """Once the dumps in waits ((count, text) pairs for dumped()) are in: the children of proc, and
    the report as JSON and as text (`earlylog report` with options report); proc's tree is then killed."""
    try:
        for n, needle in waits:
            dumped(logdir, n, needle)
        kids = children(proc.pid)
        rep = report_json(logdir)
        text = earlylog("report", *report, logdir).stdout
    finally:
        kill_tree(proc)
    return kids, rep, text


def causes(rep, kind):
    return [c for c in rep["causes"] if c["kind"] == kind]


def children(pid):
    """The pids of a live process's children, from the kernel."""
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(c) for c in f.read().split()]


def reported(proc, logdir, kind):
    """(JSON report, text report) once the report names a cause of this kind; then the process's
    whole tree is killed."""
    try:
        rep = wait_for(lambda: (lambda r: r if causes(r, kind) else None)(report_json(logdir)))
        return rep, earlylog("report", logdir).stdout
    finally:
        kill_tree(proc)


def leads(text, cause):
    """The text report gives the cause and its next step right after its headline (numbers aside:
    the text is read a moment after the JSON, when a newer dump may count more seconds or SYNs)."""
    def flat(words):  # less whitespace too: the report wraps a long path at a slash
        return re.sub(r"\d+(\.\d+)?", "N", "".join(words.split()))
    head = flat(text.split("\n- ")[1]) if "\n- " in text else ""
    return head.startswith(flat("%s; next: %s" % (cause["text"], cause["next"])))


def test_pipe_deadlock_names_the_child_and_says_communicate(tmp_path, logdir):
    path = script(tmp_path, """
        import os, subprocess, sys
        def chatter():
            for i in range(100000):
                print("line %d %s" % (i, "x" * 60))
        def run_child():
            proc = subprocess.Popen([sys.executable, __file__, "child"], stdout=subprocess.PIPE)
            return proc.wait()
        if sys.argv[1:] == ["child"]:
            chatter()
        else:
            run_child()
        """, "dl.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (2, ""), report=("--stacks",))
    child = kids[0]
    (cause,) = causes(rep, "pipe-deadlock")
    assert cause["pids"] == [proc.pid, child]
    assert "run_child at dl.py:8" in cause["text"] and "pid %d" % child in cause["text"]
    assert "stdout" in cause["text"] and "deadlock" in cause["text"]
    assert "communicate()" in cause["next"]
    assert leads(text, cause)
    # The child's stack shows the user's print, not earlylog's own stdout layer.
    stack = text.split("thread MainThread: blocked: writing to fd 1")[1].splitlines()
    assert stack[1].strip() == "%s:5 in chatter" % path
    # Read after the run was killed (a timeout, a Ctrl-C: when most reports are read), the why stays,
    # ahead of how the run ended.
    wait_for(lambda: {d["state"] for d in report_json(logdir)["processes"]} == {"vanished"})
    after = report_json(logdir)
    assert [c["kind"] for c in after["causes"]] == ["pipe-deadlock", "run-stopped"], after["causes"]
    assert after["causes"][0]["text"] == cause["text"] and after["verdict"][1].startswith(cause["text"][:60])


def test_pipe_deadlock_is_seen_from_the_parent_alone_without_calling_program_code(tmp_path, logdir):
    # The child runs without earlylog (any program can fill a pipe); the parent waits through a
    # Popen subclass whose attribute access would show if the watchdog ever called it.
    spy = tmp_path / "called"
    path = script(tmp_path, """
        import os, subprocess, sys, threading
        class Tracked(subprocess.Popen):
            def __getattribute__(self, name):
                if threading.current_thread() is not threading.main_thread():
                    open(%r, "a").write(name + "\\n")
                return super().__getattribute__(name)
        def run_child():
            code = "print('x' * 100 + '\\\\n' * 2000, end=''); print('y' * 200000)"
            env = dict(os.environ, EARLYLOG="0")
            proc = Tracked([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
            return proc.wait()
        run_child()
        """ % str(spy), "quiet.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "child: pid"))
    child = kids[0]
    (cause,) = causes(rep, "pipe-deadlock")
    assert cause["pids"] == [proc.pid, child] and "run_child at quiet.py:12" in cause["text"]
    assert "communicate()" in cause["next"]
    assert not spy.exists(), spy.read_text()


def test_parent_waiting_on_a_sleeping_child_names_it_and_is_no_deadlock(tmp_path, logdir):
    path = script(tmp_path, """
        import socket, subprocess, sys, threading
        def serve(server):
            conn, _ = server.accept()          # an idle server: healthy, never a cause
            conn.recv(100)
        server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=serve, args=(server,), daemon=True).start()
        client = socket.create_connection(server.getsockname())
        def prepare():
            subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"])
        prepare()
        """, "prep.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (2, ""))
    child = kids[0]
    mine = [c for c in rep["causes"] if c["kind"] in ("child", "pipe-deadlock", "pipe-full", "stdin", "network", "pool")]
    assert [c["kind"] for c in mine] == ["child"]
    (cause,) = mine
    assert cause["pids"] == [proc.pid, child]
    assert "prepare at prep.py:10" in cause["text"] and "subprocess.run" in cause["text"]
    assert "sleeping" in cause["text"] and "time.sleep" in cause["text"]
    assert "deadlock" not in (cause["text"] + cause["next"]).lower()
    assert "timeout=" in cause["next"]


@needs_node
def test_node_launcher_not_reading_stdout_is_named_with_the_fix(tmp_path, logdir):
    path = script(tmp_path, """
        def report_progress():
            for i in range(100000):
                print("step %d %s" % (i, "x" * 60))
        report_progress()
        """, "chatty.py")
    proc = start(["spawn.js", "unread", "inherit", "--", PYTHON, path], logdir, program="node", cwd=NODE_DIR,
                 **QUIET)
    (child,), rep, text = stuck(proc, logdir, (1, "pipe: fd 1"))
    (cause,) = causes(rep, "pipe-full")
    assert cause["pids"] == [child, proc.pid]
    assert "pid %d (node spawn.js" % proc.pid in cause["text"] and "report_progress at chatty.py:4" in cause["text"]
    assert "stdout" in cause["text"]
    assert "stdio: 'inherit'" in cause["next"] and "'ignore'" in cause["next"]
    assert leads(text, cause)


@needs_node
def test_prompt_on_a_stdin_the_node_launcher_never_writes(tmp_path, logdir):
    path = script(tmp_path, """
        def confirm():
            return input("Continue? [y/N] ")
        print("about to download the weights")
        confirm()
        """, "ask.py")
    proc = start(["spawn.js", "unread", "inherit", "--", PYTHON, path], logdir, program="node", cwd=NODE_DIR,
                 **QUIET)
    (child,), rep, text = stuck(proc, logdir, (1, "stdin: fd 0"))
    (cause,) = causes(rep, "stdin")
    assert cause["pids"] == [child, proc.pid]
    assert '"Continue? [y/N]' in cause["text"] and "confirm at ask.py:3" in cause["text"]
    assert "pid %d (node spawn.js" % proc.pid in cause["text"]
    assert "stdin" in cause["next"] and "'ignore'" in cause["next"]
    assert leads(text, cause)


def test_prompt_on_a_stdin_the_waiting_parent_holds(tmp_path, logdir):
    path = script(tmp_path, """
        import subprocess, sys
        def licence():
            print("Accept the licence? [y/N]")
            return sys.stdin.readline()
        def install():
            subprocess.Popen([sys.executable, __file__, "child"], stdin=subprocess.PIPE).wait()
        if sys.argv[1:] == ["child"]:
            licence()
        else:
            install()
        """, "setup_tool.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (2, ""))
    child = kids[0]
    (cause,) = causes(rep, "stdin")
    assert cause["pids"] == [child, proc.pid]
    assert '"Accept the licence? [y/N]"' in cause["text"] and "licence at setup_tool.py:5" in cause["text"]
    assert "waits for it to exit" in cause["text"]  # the holder is its parent, in Popen.wait
    assert "communicate(input=" in cause["next"] and "DEVNULL" in cause["next"]


def test_child_reading_the_stdin_its_waiting_parent_never_writes_is_a_pipe_deadlock(tmp_path, logdir):
    # No prompt, and the read is a library's (json.load): not a question to answer, but the
    # parent holds the child's stdin open and waits, so neither moves.
    path = script(tmp_path, """
        import subprocess, sys
        def convert():
            code = "import json, sys; print('ready'); json.load(sys.stdin)"
            return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE).wait()
        convert()
        """, "convert.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (2, ""))
    child = kids[0]
    assert not causes(rep, "stdin")
    (cause,) = causes(rep, "pipe-deadlock")
    assert cause["pids"] == [proc.pid, child] and "convert at convert.py:5" in cause["text"]
    assert "blocked reading its stdin: a pipe that only pid %d writes" % proc.pid in cause["text"]
    assert "communicate(input=" in cause["next"] and "proc.stdin.close()" in cause["next"]


@pytest.fixture
def server():
    """A listening socket on 127.0.0.1 that never accepts: connections queue, and none is answered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fillers = []
    yield srv, fillers
    for s in fillers + [srv]:
        s.close()


def test_reading_a_childs_output_while_it_waits_for_input_is_a_deadlock(tmp_path, logdir):
    # The parent iterates the child's stdout; the child first reads its config from the stdin the
    # parent holds and never writes: neither the blocking wait() nor a prompt is involved.
    proc = start([script(tmp_path, """
        import subprocess, sys
        child = "import json, sys\\ncfg = json.load(sys.stdin)\\nprint(cfg)"
        proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for line in proc.stdout:
            print(line)
        """, "tool.py")], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "reads: fd "), (1, "stdin: fd 0"))
    (cause,) = causes(rep, "pipe-deadlock")
    assert cause["pids"] == [proc.pid, kids[0]]
    assert cause["text"] == ("deadlock: pid %d (tool), in <module> at tool.py:5, reads the output of pid %d (cmd), "
                             "which waits for input on its stdin (in <module> at <string>:2), a pipe only pid %d "
                             "writes to: each waits for the other" % (proc.pid, kids[0], proc.pid))
    assert "proc.communicate(input=...)" in cause["next"]
    assert causes(rep, "stdin") == [] and leads(text, cause)


@pytest.mark.parametrize("how", ["reply", "connect"])
def test_socket_with_no_answer_names_the_peer_and_how_long(tmp_path, logdir, server, how):
    srv, fillers = server
    port = srv.getsockname()[1]
    if how == "connect":
        # A full accept queue drops new SYNs: the connect retries with no answer, as to a blackhole.
        for _ in range(2):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
    path = script(tmp_path, """
        import socket, sys
        def fetch_weights(port):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /weights\\n")
            return sock.recv(100)
        fetch_weights(int(sys.argv[1]))
        """, "net.py")
    proc = start([path, str(port)], logdir, **QUIET)
    _, rep, text = stuck(proc, logdir, (1, "socket: fd"))
    (cause,) = causes(rep, "network")
    assert cause["pids"] == [proc.pid]
    assert "127.0.0.1:%d" % port in cause["text"]
    assert re.search(r"for \d+(\.\d)? s", cause["text"])
    if how == "connect":
        assert "connecting" in cause["text"] and "fetch_weights at net.py:4" in cause["text"]
    else:
        assert "waiting for a reply" in cause["text"] and "fetch_weights at net.py:6" in cause["text"]
    assert "timeout" in cause["next"]
    assert leads(text, cause)


@pytest.mark.parametrize("how", ["killed-spawn", "crashed-fork"])
def test_pool_whose_worker_died_never_recovers(tmp_path, logdir, how):
    """A worker SIGKILLed (as the OOM killer does) or crashed in C. A forking pool starts its
    replacement workers from its own thread, with no watchdog (a process forked by a thread other
    than main must end with it): they only ever look `running`, and the kernel says they sleep."""
    death, method = how.split("-")
    die = "os.kill(os.getpid(), signal.SIGKILL)" if death == "killed" else "ctypes.string_at(0)"
    path = script(tmp_path, """
        import ctypes, multiprocessing as mp, os, signal
        def work(x):
            if x == 3:
                %s
            return x * x
        def main():
            with mp.get_context("%s").Pool(2) as pool:
                return pool.map(work, range(8))
        if __name__ == "__main__":
            print(main())
        """ % (die, method), "squares.py")
    proc = start([path], logdir, **QUIET)
    rep, text = reported(proc, logdir, "pool")
    (dead,) = [p for p in rep["processes"] if p["state"] == ("vanished" if death == "killed" else "crashed")]
    (cause,) = causes(rep, "pool")
    assert cause["pids"] == [proc.pid, dead["pid"]]
    assert "main at squares.py:9" in cause["text"] and "pool.map" in cause["text"]
    assert "never" in cause["text"]
    if death == "crashed":
        assert "pool worker pid %d crashed at " % dead["pid"] in cause["text"]
        assert "(Segmentation fault (SIGSEGV) in work at squares.py:5)" in cause["text"]
    assert "ProcessPoolExecutor" in cause["next"] and "BrokenProcessPool" in cause["next"]
    assert leads(text, cause)
    if death == "crashed":
        # Read after the run was killed, the crash (a record of its own) still explains the hang; a
        # worker that merely vanished with the rest of the run would not.
        wait_for(lambda: by_pid(report_json(logdir), proc.pid)["state"] == "vanished")
        (after,) = causes(report_json(logdir), "pool")
        assert after["pids"] == cause["pids"]


def test_a_pool_whose_initializer_fails_is_named_once_for_all_its_restarted_workers(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import multiprocessing as mp
        def init_worker():
            open("/nonexistent/worker.json")
        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2, initializer=init_worker) as pool:
                pool.map(abs, range(4))
        """, "train.py")], logdir, **QUIET)
    rep, text = reported(proc, logdir, "pool")
    (cause,) = causes(rep, "pool")
    assert cause["pids"][0] == proc.pid
    assert "multiprocessing.Pool keeps starting workers that fail as they start" in cause["text"]
    assert "each with FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/worker.json' in " \
           "init_worker at train.py:4" in cause["text"] and "initializer" in cause["next"]
    # Its many failed workers are one line, not one each.
    same = [line for line in rep["verdict"] if "ended the same way" in line]
    assert len(same) == 1 and "children of pid %d (fork<train)" % proc.pid in same[0]
    assert sum("init_worker" in line for line in rep["verdict"]) == 2, rep["verdict"]


def by_pid(rep, pid):
    return next(d for d in rep["processes"] if d["pid"] == pid)


def test_a_parent_waiting_for_a_child_that_crashed_names_it_and_what_to_do(tmp_path, logdir):
    path = script(tmp_path, """
        import ctypes, multiprocessing as mp, time
        def convert(conn):
            ctypes.string_at(0)  # dies before it sends anything
        def watch():
            while True:
                time.sleep(0.2)
        if __name__ == "__main__":
            mp.Process(target=watch, daemon=True).start()  # still running: not a queue with no writer
            ours, theirs = mp.Pipe()
            mp.Process(target=convert, args=(theirs,)).start()
            print(ours.recv())
        """, "convert.py")
    proc = start([path], logdir, **QUIET)
    try:
        # On a loaded machine the parent's first stall can be told before its dump names the call it
        # waits in (once in a parallel CI run): read the report again until the next dump says it.
        def told():
            rep = report_json(logdir)
            return rep if any("which ended (crashed" in line and " waits in connection.recv " in line
                              for line in rep["verdict"]) else None
        try:
            rep = wait_for(told)
        except AssertionError:
            rep = report_json(logdir)  # the assertions below say what it showed
    finally:
        kill_tree(proc)
    (dead,) = [p for p in rep["processes"] if p["state"] == "crashed"]
    (line,) = [line for line in rep["verdict"] if "which ended" in line]
    assert line.startswith("pid %d (convert) waits in connection.recv for child %d" % (proc.pid, dead["pid"]))
    assert "(crashed: Segmentation fault (SIGSEGV) in convert at convert.py:4)" in line
    assert line.endswith("; next: fix what ended the child, and wait for its results with a timeout and a check "
                         "of its exit status")


@pytest.mark.parametrize("how", ["queue-fork", "queue-spawn", "pipe-fork"])
def test_joining_a_child_before_reading_what_it_sent_is_a_deadlock(tmp_path, logdir, how):
    """multiprocessing's "joining processes that use queues" rule: a child that put more than a
    pipe holds cannot end until it is read, and its parent joins it before reading."""
    kind, method = how.split("-")
    send = "q.put(b'x' * 10_000_000)" if kind == "queue" else "q.send(b'x' * 10_000_000)"
    path = script(tmp_path, """
        import multiprocessing as mp
        def produce(q):
            %s
        if __name__ == "__main__":
            ctx = mp.get_context("%s")
            q = ctx.Queue() if "%s" == "queue" else None
            ours, theirs = (None, q) if q is not None else ctx.Pipe()
            p = ctx.Process(target=produce, args=(theirs,))
            p.start()
            p.join()
            print(len(q.get() if q is not None else ours.recv()))
        """ % (send, method, kind), "results.py")
    proc = start([path], logdir, **QUIET)
    rep, text = reported(proc, logdir, "queue-join")
    (cause,) = causes(rep, "queue-join")
    (child,) = [p for p in rep["processes"] if p["pid"] != proc.pid and p["tag"] != "resource-tracker"]
    assert cause["pids"] == [proc.pid, child["pid"]]
    assert cause["text"].startswith("deadlock: pid %d (results) waits in process.join (<module> at results.py:11) "
                                    "for child pid %d" % (proc.pid, child["pid"]))
    assert ("queue's feeder thread (QueueFeederThread)" if kind == "queue" else "thread MainThread") in cause["text"]
    assert cause["next"].startswith("read what the child sends before joining it: %s"
                                    % ("`q.get()`" if kind == "queue" else "`conn.recv()`"))
    assert leads(text, cause) and " join " not in " ".join(c["kind"] for c in rep["causes"])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_queue_read_whose_only_writer_died_names_its_error(tmp_path, logdir, method):
    path = script(tmp_path, """
        import multiprocessing as mp, sys
        def produce(q):
            raise RuntimeError("tokenizer file missing")
        def main():
            ctx = mp.get_context(sys.argv[1])
            q = ctx.Queue()
            ctx.Process(target=produce, args=(q,)).start()
            return q.get()
        if __name__ == "__main__":
            print(main())
        """, "mpq.py")
    proc = start([path, method], logdir, **QUIET)
    rep, text = reported(proc, logdir, "child-died")
    (child,) = [p for p in rep["processes"] if p["ppid"] == proc.pid and p["tag"] not in ("resource-tracker",)]
    assert child["state"] == "failed" and child["status"] == 1
    assert child["exception"]["text"] == "RuntimeError: tokenizer file missing" and child["exception"]["printed"]
    assert child["exception"]["frame"]["function"] == "produce"
    (cause,) = causes(rep, "child-died")
    assert cause["pids"] == [proc.pid, child["pid"]]
    assert "waits in queues.get (main at mpq.py:9)" in cause["text"]
    assert "RuntimeError: tokenizer file missing in produce at mpq.py:4" in cause["text"]
    assert "timeout" in cause["next"] and "exitcode" in cause["next"]
    assert leads(text, cause)


LOCKER = """
    import fcntl, subprocess, sys, time
    how, path = sys.argv[1], sys.argv[2]
    def take(f):
        if how == "flock":
            fcntl.flock(f, fcntl.LOCK_EX)
        elif how == "lockf":
            fcntl.lockf(f, fcntl.LOCK_EX)
    if sys.argv[3:] == ["hold"]:
        with open(path, "w") as f:
            take(f)  # a filelock.FileLock takes the same flock()
            print("held", flush=True)
            time.sleep(3600)
    holder = subprocess.Popen([sys.executable, __file__, "lockf" if how == "lockf" else "flock", path, "hold"],
                              stdout=subprocess.PIPE)
    holder.stdout.readline()
    if how == "filelock":
        from filelock import FileLock
        with FileLock(path):  # how huggingface_hub guards a download into its cache
            print("downloaded")
    else:
        with open(path, "w") as f:
            take(f)
    """


@pytest.mark.parametrize("how", ["flock", "lockf", "filelock"])
def test_a_file_lock_names_the_file_and_the_process_holding_it(tmp_path, logdir, how):
    lock = os.path.join(str(tmp_path), "model.bin.lock")
    proc = start([script(tmp_path, LOCKER, "fetch.py"), how, lock], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "file lock: " + lock))
    (cause,) = causes(rep, "file-lock")
    assert cause["pids"] == [proc.pid] + kids
    # The call is named by its package, not by the private module it is in (filelock/_core/_lock.py).
    assert cause["text"].startswith("pid %d (fetch) %s" % (
        proc.pid, "waits in filelock.acquire (<module> at fetch.py:19)" if how == "filelock" else
        "waits (take at fetch.py:%d)" % (6 if how == "flock" else 8)))
    assert "for a lock on the file %s, which pid %d (python fetch.py " % (lock, kids[0]) in cause["text"]
    assert "kill %d" % kids[0] in cause["next"] and "timeout" in cause["next"]
    assert leads(text, cause)


def test_a_sqlite_database_another_process_keeps_locked_is_a_hang_not_a_sleep(tmp_path, logdir):
    # SQLite's busy handler sleeps between tries inside the C call: the kernel says "sleeping", as
    # for a sleep loop, but the line is a statement, and the holder is in /proc/locks.
    db = os.path.join(str(tmp_path), "runs.db")
    proc = start([script(tmp_path, """
        import sqlite3, subprocess, sys
        db = sys.argv[1]
        sqlite3.connect(db).execute("create table runs(loss real)").connection.commit()
        tracker = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\\n"
                                    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\\n"
                                    "c.execute('begin immediate'); c.execute('insert into runs values (1.0)')\\n"
                                    "print('holding', flush=True); time.sleep(3600)", db], stdout=subprocess.PIPE)
        tracker.stdout.readline()
        con = sqlite3.connect(db, timeout=600)
        con.execute("insert into runs values (0.5)")
        """, "log_run.py"), db], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "file lock: %s (sqlite)" % db))
    main = next(d for d in rep["processes"] if d["pid"] == proc.pid)
    assert main["state"] == "stalled" and main["idle"] is None  # not "sleeping in <module> (time.sleep)"
    (cause,) = causes(rep, "file-lock")
    assert cause["pids"] == [proc.pid] + kids
    assert cause["text"].startswith("pid %d (log_run) retries a SQLite statement (<module> at log_run.py:11): the "
                                    "database %s is locked by pid %d (python -c " % (proc.pid, db, kids[0]))
    assert "commit or close it" in cause["next"] and "timeout=" in cause["next"]
    assert leads(text, cause)


def test_a_lock_file_a_crashed_run_left_behind_is_called_stale(tmp_path, logdir):
    lock = os.path.join(str(tmp_path), "model.bin.lock")
    with open(lock, "w"):
        pass  # left by a run that was killed while it held the lock
    proc = start([script(tmp_path, """
        import sys
        from filelock import SoftFileLock
        with SoftFileLock(sys.argv[1]):  # a lock that is the file's existence, kept by no process
            print("downloaded")
        """, "fetch.py"), lock], logdir, **QUIET)
    _kids, rep, text = stuck(proc, logdir, (1, "file lock: " + lock))
    (cause,) = causes(rep, "file-lock")
    assert cause["pids"] == [proc.pid]
    assert cause["text"].endswith("for a lock on the file %s, and no process on this host holds a lock on it" % lock)
    assert cause["next"].startswith("if no other job uses it, it is a stale lock file: delete %s" % lock)
    assert leads(text, cause)


def test_output_kept_open_by_a_process_the_child_left_running_is_named(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import subprocess
        # A setup script that starts a server in the background and exits: the server keeps its pipes.
        setup = subprocess.run(["bash", "-c", "sleep 3600 & echo started"], capture_output=True, text=True)
        """, "setup.py")], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "still held open by"))
    (cause,) = causes(rep, "pipe-held")
    (server,) = [int(pid) for pid in re.findall(r"held open by pid (\d+)", cause["text"])]
    assert cause["pids"] == [proc.pid, kids[0], server]
    assert cause["text"].startswith(
        "pid %d (setup) waits in subprocess.run (<module> at setup.py:4) for the end of the output of child pid "
        "%d (bash -c sleep 3600 & echo started), which has exited, but its stdout and stderr pipes are still held "
        "open by pid %d (sleep 3600), a process it left running" % (proc.pid, kids[0], server))
    assert "2>&1 &" in cause["next"] and "DEVNULL" in cause["next"]
    assert leads(text, cause)


def test_a_multiprocessing_lock_whose_likely_holder_was_killed_names_it(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import multiprocessing as mp, os, signal
        def write_shard(lock):
            with lock:
                os.kill(os.getpid(), signal.SIGKILL)  # killed holding the shared lock (the OOM killer, say)
        if __name__ == "__main__":
            lock = mp.Lock()
            writer = mp.Process(target=write_shard, args=(lock,))
            writer.start()
            writer.join()
            with lock:
                print("never")
        """, "shards.py")], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (1, "dump: stall"))
    (writer,) = [p for p in rep["processes"] if p["ppid"] == proc.pid]
    (cause,) = causes(rep, "shared-lock")
    assert cause["pids"] == [proc.pid, writer["pid"]]
    assert cause["text"].startswith(
        "pid %d (shards) waits (<module> at shards.py:11) for a multiprocessing lock it shares with other processes, "
        "and pid %d (fork<shards), which shared it, vanished (no exit record: SIGKILL, or the kernel's OOM killer) "
        "before the wait began" % (proc.pid, writer["pid"]))
    assert "lock.acquire(timeout=" in cause["next"]
    assert leads(text, cause)
    assert not causes(rep, "child")  # it does not wait for that child: the child is long gone


def test_peers_read_pipes_and_children_without_touching_them():
    """The runtime's own look: a pipe's other end, a child's state, and a child that is gone."""
    from earlylog.runtime import children, procs
    r, w = os.pipe()
    child = subprocess.Popen(["sleep", "30"], stdin=r)
    try:
        link = os.readlink("/proc/self/fd/%d" % w)
        holders, complete = procs.holders(link, "write")
        assert holders == [os.getpid()] and complete
        # a child just started may still be running its start-up: wait until it sleeps
        line = wait_for(lambda: (lambda text: text if " state S " in text else None)(children.child(child.pid)))
        assert line.startswith("pid %d (sleep 30), state S (sleeping)" % child.pid)
    finally:
        child.kill()
        child.wait()
        os.close(r)
        os.close(w)
    assert children.child(child.pid) == "pid %d: gone (it exited)" % child.pid


@pytest.mark.parametrize("minor", [None, 9, 13])
def test_timed_waits_are_read_from_the_frames_on_every_python(tmp_path, logdir, minor):
    """A timed wait sleeps or polls rather than naming its child or socket in the system call:
    the runtime finds the Popen and the socket in the live frames, whose layout differs by version."""
    exe = PYTHON if minor is None else python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    path = script(tmp_path, """
        import socket, subprocess, sys, threading
        server = socket.create_server(("127.0.0.1", 0))
        def fetch_index():
            sock = socket.create_connection(server.getsockname(), timeout=600)
            return sock.recv(10)
        def build():
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            return proc.wait(timeout=600)
        threading.Thread(target=fetch_index, name="fetcher", daemon=True).start()
        build()
        """, "timed.py")
    env = {} if minor is None else {"PYTHONPATH": launch.variables({})["PYTHONPATH"]}
    proc = start([path], logdir, program=exe, **dict(QUIET, **env))
    kids, rep, text = stuck(proc, logdir, (2, ""), (1, "socket: fd"))
    child = kids[0]
    assert minor is None or "Python 3.%d" % minor in read(log_files(logdir)[0])
    (waits,) = causes(rep, "child")
    assert waits["pids"] == [proc.pid, child] and "build at timed.py:9" in waits["text"]
    assert "proc.wait(timeout=...)" in waits["next"]
    (net,) = causes(rep, "network")
    assert net["threads"] == ["fetcher"] and "fetch_index at timed.py:6, thread fetcher" in net["text"]
    assert "waiting for a reply from 127.0.0.1:" in net["text"]


# The reader piece by piece, on small log folders (another host: no liveness check applies).
READ = "blocked: waiting to read from fd 0 (stdin), a pipe [kernel: anon_pipe_read]"
WAIT = "blocked: waiting for a child process to exit [kernel: do_wait]"
LIB = "/usr/lib/python3.11/"


def judged(folder):
    rep = verdict.judge(logread.read(str(folder)), now=T0 + 60)
    assert not rep["problems"], rep["problems"]
    return rep


def test_odd_commands_and_damaged_notes_are_read_as_far_as_they_go(tmp_path):
    odd = 'python -c print("(x)"), state'
    stalled(tmp_path, 11, thread("MainThread", "0x1", [(LIB + "subprocess.py", 2004, "_try_wait", "os.waitpid()"),
                                                     ("/app/run.py", 8, "run", "proc.wait()")], state=WAIT, notes=[
        "child: pid 12 (%s), state S (sleeping), blocked writing to fd 1 (stdout), pipe:[5], full (65536 of 65536 "
        "bytes), which only this process reads" % odd], main=True), tag="run")
    stalled(tmp_path, 20, thread("MainThread", "0x2", [("/app/odd.py", 3, "odd", "x")], notes=[
        "child: pid x", "pipe: fd 1 (stdout), nothing", "stdin: fd 0", "socket: fd 3 receiving, TCP ?",
        "child: pid 21: gone (it exited)"], main=True), tag="odd")
    rep = judged(tmp_path)
    (cause,) = rep["causes"]
    assert cause["kind"] == "pipe-deadlock" and cause["pids"] == [11, 12] and "(%s)" % odd in cause["text"]
    assert "run at run.py:8" in cause["text"] and "a full pipe (65536 of 65536 bytes)" in cause["text"]


def test_idle_ends_give_no_cause(tmp_path):
    # A server's end of a connection, a library reading stdin with no prompt (a language server),
    # a pool whose other worker still computes: idle or working, not stuck.
    stalled(tmp_path, 30, thread("handler", "0x3", [("/app/srv.py", 9, "handle", "conn.recv(4)")], notes=[
        "socket: fd 7 receiving, TCP 127.0.0.1:8000 -> 127.0.0.1:51000, ESTABLISHED, server; 0 bytes received "
        "unread, 0 unsent"]), tag="srv")
    stalled(tmp_path, 31, thread("MainThread", "0x4", [(LIB + "json/__init__.py", 293, "load", "fp.read()"),
                                                     ("/app/lsp.py", 4, "serve", "json.load(sys.stdin)")],
                                 state=READ, notes=["stdin: fd 0, pipe:[9]; other end held by pid 1 (node ext.js)"],
                                 main=True), tag="lsp", extra=[(1, "out", '{"ready": true}', ())])
    pool = [(LIB + "multiprocessing/pool.py", 367, "map", "return self._map_async()"),
            ("/app/sq.py", 9, "main", "pool.map(work, range(8))")]
    stalled(tmp_path, 40, thread("MainThread", "0x5", pool, main=True), tag="sq")
    write(tmp_path, 41, [(0, "start", "pid 41 (parent 40) argv python -c spawn_main; log x (via pth)", ()),
                         (1, "exit", "status 1 after 1 s; os._exit", ())], tag="mp-child")
    stalled(tmp_path, 42, thread("MainThread", "0x6", [("/app/sq.py", 4, "work", "x * x")],
                                 state="busy: running on a CPU (99% of a core)", main=True), tag="mp-child", parent=40)
    assert judged(tmp_path)["causes"] == []
    (tmp_path / "20260101-000000-node9-42-mp-child.log").unlink()  # no worker computes now: the task is lost
    (cause,) = judged(tmp_path)["causes"]
    assert cause["kind"] == "pool" and cause["pids"] == [40, 41] and "worker pid 41 exited with an error" in cause["text"]


def test_a_prompt_printed_with_a_newline_is_named(tmp_path):
    stalled(tmp_path, 50, thread("MainThread", "0x7", [(LIB + "getpass.py", 80, "unix_getpass", "input()"),
                                                     ("/app/login.py", 3, "login", "getpass.getpass()")],
                                 state=READ, notes=["stdin: fd 0, socket:[9]; other end held by pid 49 (node gui.js)"],
                                 main=True), tag="login", extra=[(1, "err", "Password:", ())])
    (cause,) = judged(tmp_path)["causes"]
    assert cause["kind"] == "stdin" and cause["pids"] == [50, 49]
    assert 'after printing "Password:"' in cause["text"] and "pid 49 (node gui.js)" in cause["text"]
    assert "stdio: ['ignore'" in cause["next"]



@pytest.mark.parametrize("how", ["sigkill", "exception"])
def test_children_left_running_by_a_parent_that_ended_in_trouble_are_named_with_how_to_end_them(tmp_path, logdir,
                                                                                               how):
    # A launcher SIGKILLed (a GUI's stop button, an OOM kill) or failing after it started its
    # workers: the workers run on, holding the GPU, and the next run finds it taken.
    script(tmp_path, "import threading\nthreading.Event().wait(60)  # a worker that waits for work\n", "worker.py")
    proc = start([script(tmp_path, """
        import os, subprocess, sys, time
        worker = os.path.join(os.path.dirname(__file__), "worker.py")
        workers = [subprocess.Popen([sys.executable, worker]) for _ in range(2)]
        time.sleep(1.5)
        if sys.argv[1] == "exception":
            raise RuntimeError("config error after the workers started")
        time.sleep(60)
        """, "launch.py"), how], logdir, **QUIET)
    try:
        wait_for(lambda: sum("-worker" in os.path.basename(f) for f in log_files(logdir)) == 2)
        if how == "sigkill":
            time.sleep(1)
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        rep, text = reported(proc, logdir, "orphan")
    finally:
        kill_tree(proc)
    (cause,) = causes(rep, "orphan")
    workers = sorted(p["pid"] for p in rep["processes"] if p["tag"] == "worker")
    ended = "vanished (no exit record: SIGKILL" if how == "sigkill" else "exited with an error"
    assert cause["text"].startswith("pid %d (worker) and pid %d (worker) still run after their parent pid %d "
                                    "(launch) %s" % (workers[0], workers[1], proc.pid, ended)), cause["text"]
    assert cause["next"].startswith("end them: `kill %d %d`" % tuple(workers))
    assert ("Ctrl-C or SIGTERM" if how == "sigkill" else "`proc.terminate()` in a `finally:`") in cause["next"]
    assert leads(text, cause), text


def test_workers_waiting_on_one_silent_server_are_one_verdict_line_and_each_a_cause(tmp_path, logdir):
    """Three pool workers each wait for a reply from one server that never answers: the same cause
    three times, but one verdict line that names the other pids; --json keeps each cause."""
    path = script(tmp_path, """
        import multiprocessing as mp, socket
        def fetch(addr):
            sock = socket.create_connection(addr)
            sock.sendall(b"GET /shard\\n")
            return sock.recv(100)
        if __name__ == "__main__":
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(16)
            with mp.get_context("fork").Pool(3) as pool:
                pool.map(fetch, [server.getsockname()] * 3, chunksize=1)
        """, "shards.py")
    proc = start([path], logdir, **QUIET)
    kids, rep, text = stuck(proc, logdir, (3, "socket: fd"))
    found = causes(rep, "network")
    assert sorted(c["pids"][0] for c in found) == sorted(kids), (kids, found)
    assert all("waiting for a reply" in c["text"] and "fetch at shards.py:6" in c["text"] for c in found), found
    lines = [line for line in text.split("\n- ") if "waiting for a reply" in line]
    assert len(lines) == 1, text
    first = found[0]["pids"][0]
    others = [c["pids"][0] for c in found[1:]]
    assert lines[0].startswith("pid %d (fork<shards)" % first), lines[0]
    assert " ".join(lines[0].split()).count("(the same in pids %d, %d)" % tuple(others)) == 1, lines[0]
