"""Work that ends without a word, each from a real program: os._exit() called from a thread,
sys.exit() in a thread while the main thread waits for its work, the last flush of stdout failing
because its reader went away (status 120), a child killed by SIGKILL while its parent waits for it,
a program that os.exec* replaced with one that writes no log,
and a thread that keeps failing to connect and sleeping between tries (quiet, and logging every
failure while another thread prints). Each asserts the report's sentence and its next step; and
the look-alikes that are no trouble stay so: a supervisor that kills its child on purpose, a
sleeping poll loop whose connects succeed."""
import os
import signal
import socket
import subprocess
import time

import pytest

from support import (PYTHON, clean_env, earlylog, kill_tree, log_files, python_3, read, report_json, run_both, run_python,
                     script, start, wait_for, wait_log)


def causes(rep, kind):
    return [c for c in rep["causes"] if c["kind"] == kind]


def flat(text):
    return " ".join(text.split())


def test_a_dataloader_worker_s_exit_record_names_the_program_s_line_not_earlylog_s(tmp_path, logdir):
    """A DataLoader worker ends by os._exit(0) in multiprocessing; its record names the program's own
    line that led there, past torch's frames and earlylog's marks wrapper around the iterator,
    wherever earlylog is installed (this suite's editable install is not under site-packages)."""
    pytest.importorskip("torch")
    path = script(tmp_path, """
        from torch.utils.data import DataLoader
        for batch in DataLoader(list(range(8)), batch_size=4, num_workers=2):
            pass
    """, name="load.py")
    run = run_both([path], logdir)
    assert run.returncode == 0
    exits = [line for f in log_files(logdir) if "-fork.log" in f for line in read(f).splitlines() if " exit: " in line]
    assert len(exits) == 2, exits
    for line in exits:
        assert "os._exit(0) in _launch at popen_fork.py:" in line and ", from <module> at load.py:3" in line, line  # the for loop
        assert "marks.py" not in line, line


def test_os_exit_from_a_thread_gets_a_verdict_line_with_the_thread_and_the_main_threads_place(tmp_path, logdir):
    path = script(tmp_path, """
        import os, threading, time
        def loader():
            time.sleep(0.2)
            os._exit(0)  # gives up: ends the whole process
        threading.Thread(target=loader, name="loader").start()
        for step in range(100):
            time.sleep(0.05)
        print("trained")
    """, name="train.py")
    run = run_both([path], logdir)
    assert run.returncode == 0 and "trained" not in run.out
    rep = report_json(logdir)
    d = rep["processes"][0]
    assert d["state"] == "exited" and d["exit_call"] == "os._exit(0) in loader at train.py:5"
    text = flat(earlylog("report", logdir).stdout)
    assert "none in trouble" in text
    assert ("ended by os._exit(0) in loader at train.py:5, called from thread loader while the main thread was in "
            "<module> at train.py:8: os._exit ends the whole process from any thread, at once") in text
    assert "next: if that thread meant to end only itself, return from its function" in text


def test_os_exit_of_a_multiprocessing_child_is_no_news(tmp_path, logdir):
    path = script(tmp_path, """
        import multiprocessing as mp
        def work():
            pass
        if __name__ == "__main__":
            mp.set_start_method("fork")
            p = mp.Process(target=work)
            p.start()
            p.join()
    """)
    run_both([path], logdir)
    text = earlylog("report", logdir).stdout
    assert text.startswith("2 processes, none in trouble") and "os._exit" not in text


def test_sys_exit_in_a_thread_while_the_main_thread_waits_for_its_work(tmp_path, logdir):
    path = script(tmp_path, """
        import queue, sys, threading
        results = queue.Queue()
        def producer():
            sys.exit(3)  # meant to stop the program: ends only this thread
        threading.Thread(target=producer, name="producer").start()
        print(results.get())
    """, name="pipeline.py")
    proc = start([path], str(logdir))
    try:
        wait_log(str(logdir), "dump: stall")
        rep = report_json(str(logdir))
        text = flat(earlylog("report", logdir).stdout)
    finally:
        kill_tree(proc)
    (cause,) = causes(rep, "thread-exit")
    assert cause["threads"] == ["producer", "MainThread"]
    assert cause["text"].startswith("pid %d (pipeline): thread producer called sys.exit(3) in producer at "
                                    "pipeline.py:5" % proc.pid)
    assert "in a thread that ends only the thread, silently, not the process; thread MainThread has waited since, " \
           "for an item from queue `results` at pipeline.py:7" in cause["text"]
    assert "tell the main thread" in cause["next"]
    assert flat("%s; next: %s" % (cause["text"], cause["next"])) in text


def test_a_daemon_thread_still_writing_when_the_program_ends_is_named_and_a_sleeping_one_is_not(tmp_path, logdir):
    """Python stops daemon threads at exit wherever they are: a checkpoint half written, status 0
    all the same. The report names the one at work; a heartbeat thread asleep is no news."""
    res = run_python([script(tmp_path, """
        import os, threading, time
        def save_checkpoint():
            with open(os.devnull, "wb") as f:
                while True:
                    f.write(os.urandom(65536))  # writing a checkpoint that never gets to finish
        def heartbeat():
            while True:
                time.sleep(0.5)
        threading.Thread(target=save_checkpoint, daemon=True, name="saver").start()
        threading.Thread(target=heartbeat, daemon=True, name="heartbeat").start()
        time.sleep(0.3)
        print("training done")
    """, name="train.py")], logdir=logdir)
    assert res.returncode == 0 and res.out == "training done\n"
    (exit_line,) = [r["msg"] for r in res.records() if r["kind"] == "exit"]
    assert exit_line.endswith("; daemon thread still at work: saver in save_checkpoint at train.py:6"), exit_line
    rep = report_json(logdir)
    (p,) = rep["processes"]
    assert p["state"] == "exited" and rep["causes"] == []
    note = "ended with daemon thread still at work (saver in save_checkpoint at train.py:6): Python stops daemon " \
           "threads at exit without a word"
    assert note in p["summary"] and any(note in line and "join the thread" in line for line in rep["verdict"])


HANDOVER = """
    import os, sys, time
    def hand_over():
        if sys.argv[1] == "python":  # the same pid becomes a new Python program, which logs again
            os.execv(sys.executable, [sys.executable, "-c", "import sys; print('second'); sys.exit(5)"])
        os.execvp("sh", ["sh", "-c", "sleep %s; echo shell done; exit 4" % sys.argv[2], "--token", "sekrit"])
    try:
        os.execvp("no-such-program-of-earlylog", ["no-such-program-of-earlylog"])  # fails: the program goes on
    except OSError:
        print("no such program")
    print("handing over", flush=True)
    hand_over()
    """


def test_a_program_that_execs_another_says_what_replaced_it_not_that_it_vanished(tmp_path, logdir):
    """os.exec* ends the Python program without an exit record, the process going on as another
    program that writes no log (a shell, a binary): not a process that vanished (SIGKILL), but one
    replaced, named with its command line, secrets masked, and the call that did it."""
    path = script(tmp_path, HANDOVER, "handover.py")
    run = run_both([path, "shell", "0"], logdir)
    assert run.returncode == 4 and run.out.endswith("handing over\nshell done\n")
    rep = report_json(logdir)
    proc, = rep["processes"]
    assert proc["state"] == "unknown" and rep["verdict"][0] == "1 process, none in trouble: 1 unknown", rep["verdict"]
    assert proc["summary"].startswith("replaced itself with `sh -c 'sleep 0; echo shell done; exit 4' --token '***'` "
                                      "(os.execvp('/") and "in hand_over at handover.py:6)" in proc["summary"], proc
    assert "sekrit" not in "".join(read(f) for f in log_files(logdir))
    assert earlylog("report", logdir).returncode == 0  # no trouble of its own: its end is not known here

    # While the new program runs, the pid runs it: so the report says.
    proc = start([path, "shell", "30"], logdir / "live")
    try:
        wait_for(lambda: "exec: " in "".join(read(f) for f in log_files(logdir / "live")))
        rep = report_json(logdir / "live")
    finally:
        kill_tree(proc)
    live, = rep["processes"]
    assert live["state"] == "running" and live["summary"].startswith("runs `sh -c 'sleep 30; echo shell done; exit 4'"), live

    # A Python program with earlylog after the exec: the same process, its end is the new program's.
    run = run_both([path, "python", "0"], logdir / "python")
    assert run.returncode == 5
    proc, = report_json(logdir / "python")["processes"]
    assert proc["state"] == "failed" and proc["status"] == 5, proc


def test_a_fork_child_that_execs_on_a_terminal_keeps_its_output_and_is_named_by_what_replaced_it(tmp_path, logdir):
    """pty.fork's child execs at once, its stdout the terminal its parent reads as data: the exec
    record goes to the log file only (pexpect's child closes every descriptor first: then none)."""
    path = script(tmp_path, """
        import os, pty
        pid, fd = pty.fork()
        if pid == 0:
            os.execv("/bin/echo", ["/bin/echo", "from child"])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        print(repr(out))
        os.waitpid(pid, 0)
        """, "term.py")
    run = run_both([path], logdir)
    assert run.out == "b'from child\\r\\n'\n", run.out
    child = next(p for p in report_json(logdir)["processes"] if p["tag"].startswith("fork"))
    assert child["state"] == "unknown" and child["summary"].startswith(
        "replaced itself with `/bin/echo 'from child'` (os.execv('/bin/echo') in <module> at term.py:5)"), child


@pytest.mark.parametrize("minor", [None, 9, 13])  # 3.13 names the stream in its words, with no object
def test_broken_pipe_at_exit_is_status_120_and_says_the_reader_went_away(tmp_path, logdir, minor):
    exe = PYTHON if minor is None else python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    extra = {} if minor is None else {"PYTHONPATH": launch.variables({})["PYTHONPATH"]}
    path = script(tmp_path, """
        import time
        for i in range(3):
            print("row", i)
        time.sleep(0.5)  # the reader goes away meanwhile: the last flush at exit fails
    """, name="rows.py")
    statuses = []
    for enabled in (False, True):
        env = clean_env(**dict(extra, **({"EARLYLOG": "1", "EARLYLOG_DIR": str(logdir)} if enabled else {})))
        proc = subprocess.Popen([exe, path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        proc.stdout.close()  # `| head -0`: nobody reads
        statuses.append(proc.wait(timeout=60))
    assert statuses == [120, 120]
    assert "exit: status 120 after" in "".join(read(f) for f in log_files(str(logdir)))
    rep = report_json(str(logdir))
    d = rep["processes"][0]
    assert d["state"] == "failed" and d["status"] == 120
    text = flat(earlylog("report", logdir).stdout)
    assert ("exited with status 120 after") in text
    assert ("the program ended, then flushing its stdout at exit failed with BrokenPipeError: the reader of its "
            "output went away (`| head`, a closed terminal or GUI) before it had read everything; the last line it "
            "printed, at ") in text and "was 'row 2'" in text
    assert "next: the reader of this process's output went away" in text and "SIG_DFL" in text


def _kill_child_while_waited(tmp_path, logdir, body):
    """Run launcher.py (body) whose child worker.py sleeps; once the launcher's stall dump shows it
    waiting for the child, SIGKILL the child as the OOM killer would; the launcher then goes on."""
    script(tmp_path, """
        import time
        print("worker: loading", flush=True)
        time.sleep(60)
    """, name="worker.py")
    path = script(tmp_path, body, name="launcher.py")
    proc = start([path], str(logdir), cwd=str(tmp_path))
    try:
        wait_log(str(logdir), "child: pid ")
        text = "".join(read(f) for f in log_files(str(logdir)))
        child = int(text.split("child: pid ")[1].split(" ")[0])
        os.kill(child, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        kill_tree(proc)
    return proc, child


def test_a_child_killed_while_its_parent_waits_is_the_cause_named_with_the_wait(tmp_path, logdir):
    proc, child = _kill_child_while_waited(tmp_path, logdir, """
        import subprocess, sys
        worker = subprocess.Popen([sys.executable, "worker.py"])
        status = worker.wait()
        print("worker done", status)
    """)
    rep = report_json(str(logdir))
    (cause,) = causes(rep, "child-killed")
    assert cause["pids"] == [child, proc.pid]
    assert cause["text"].startswith("child pid %d (python worker.py) was killed by SIGKILL (the OOM killer or kill -9) "
                                    "at " % child)
    assert ("while pid %d (launcher) waited for it in <module> at launcher.py:4 (status = worker.wait()); pid %d "
            "then exited with status 0 all the same, without the child's work" % (proc.pid, proc.pid)) in cause["text"]
    assert cause["next"].startswith("find what killed it: `dmesg -T | grep -i -e oom -e 'killed process'`")
    assert "`proc.wait()` returns -9 for SIGKILL" in cause["next"]
    text = flat(earlylog("report", logdir).stdout)
    assert text.startswith("1 of 2 processes in trouble: 1 killed by a signal - child pid %d" % child)
    assert "let go" not in text and "likely cause" not in text


def test_a_child_killed_while_its_parent_joins_it(tmp_path, logdir):
    proc, child = _kill_child_while_waited(tmp_path, logdir, """
        import multiprocessing as mp, time
        def work():
            time.sleep(60)
        if __name__ == "__main__":
            mp.set_start_method("fork")
            p = mp.Process(target=work)
            p.start()
            p.join()
    """)
    (cause,) = causes(report_json(str(logdir)), "child-killed")
    assert "was killed by SIGKILL (the OOM killer or kill -9) at " in cause["text"]
    assert "waited for it in <module> at launcher.py:9 (p.join())" in cause["text"]
    assert "`process.exitcode` is negative" in cause["next"]


def test_a_child_killed_while_its_parent_reads_its_queue_is_not_let_go(tmp_path, logdir):
    """The parent waits for what the child would have sent: the child was not a worker its supervisor
    let go (the parent is stuck), and the cause says it was killed."""
    path = script(tmp_path, """
        import multiprocessing as mp, time
        def work(q):
            time.sleep(60)
            q.put("result")
        if __name__ == "__main__":
            mp.set_start_method("fork")
            q = mp.Queue()
            mp.Process(target=work, args=(q,)).start()
            print(q.get())
    """, name="reader.py")
    proc = start([path], str(logdir))
    try:
        wait_log(str(logdir), "dump: stall")
        child = next(d["pid"] for d in report_json(str(logdir))["processes"] if d["pid"] != proc.pid)
        os.kill(child, signal.SIGKILL)
        rep = wait_for(lambda: (lambda r: r if causes(r, "child-died") else None)(report_json(str(logdir))))
    finally:
        kill_tree(proc)
    (cause,) = causes(rep, "child-died")
    assert ("child pid %d (fork<reader) was killed by SIGKILL (the OOM killer or kill -9) after " % child) in \
        cause["text"]
    assert cause["next"].startswith("find what killed child %d: `dmesg -T" % child)
    assert next(d for d in rep["processes"] if d["pid"] == child)["state"] == "vanished"


def test_a_supervisor_that_kills_its_child_on_purpose_is_no_trouble(tmp_path, logdir):
    script(tmp_path, """
        import time
        time.sleep(60)
    """, name="worker.py")
    path = script(tmp_path, """
        import subprocess, sys
        worker = subprocess.Popen([sys.executable, "worker.py"])
        try:
            worker.wait(timeout=2.5)  # long enough for a stall dump of the wait (EARLYLOG_STALL=1)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    """, name="supervisor.py")
    proc = start([path], str(logdir), cwd=str(tmp_path))
    assert proc.wait(timeout=60) == 0
    rep = report_json(str(logdir))
    assert not causes(rep, "child-killed")
    worker = next(d for d in rep["processes"] if d["tag"] == "worker")
    assert worker["state"] == "terminated" and worker["waited_by"] is None
    assert earlylog("report", logdir).stdout.startswith("2 processes, none in trouble")


def test_a_hang_a_library_loop_ends_cleanly_is_a_hang_cut_short(tmp_path, logdir):
    """A framework's worker loop (Ray's, here a package's) runs the program's function; when the
    function hangs and the framework gives up, its loop exits with sys.exit(0): the function never
    returned, and the report says so, while the same clean exit from the program's own code (a
    person's Ctrl-C it handles) is how that program chose to end."""
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "jobloop.py").write_text(
        "import sys\n"
        "def main_loop(task):\n"
        "    try:\n"
        "        task()\n"
        "    except KeyboardInterrupt:  # the framework's stop request\n"
        "        sys.exit(0)\n")
    for name, tail in (("framework", "jobloop.main_loop(fetch_shard)"),
                       ("own", "try:\n    fetch_shard()\nexcept KeyboardInterrupt:\n    sys.exit(0)")):
        (tmp_path / (name + ".py")).write_text(
            "import sys, time\nsys.path.insert(0, %r)\nimport jobloop\n"
            "def fetch_shard():\n    time.sleep(10 ** 6)\n%s\n" % (str(site), tail))
    runs = {name: start([str(tmp_path / (name + ".py"))], str(logdir)) for name in ("framework", "own")}
    for proc in runs.values():
        wait_for(lambda: any("dump: stall" in read(f) for f in log_files(logdir) if "-%d-" % proc.pid in f))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    rep = report_json(str(logdir))
    procs = {d["tag"]: d for d in rep["processes"]}
    assert procs["framework"]["state"] == "stalled"
    summary = procs["framework"]["summary"]
    assert summary.startswith("stalled for ") and " in fetch_shard at framework.py:5; blocked: sleeping" in summary
    assert summary.endswith("until the library's own code around that call ended the process (sys.exit(0) in "
                            "main_loop at jobloop.py:6): a hang cut short, the call never returned"), summary
    assert procs["own"]["state"] == "exited"
    assert earlylog("report", logdir).stdout.startswith("1 of 2 processes in trouble: 1 stuck")


RETRY = """
    import logging, socket, sys, threading, time
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s")
    NOISY = sys.argv[1:] == ["noisy"]
    def heartbeat():
        while True:
            print("heartbeat", flush=True)
            time.sleep(0.2)
    if NOISY:
        threading.Thread(target=heartbeat, daemon=True).start()
    def connect(port):
        while True:
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=1)
            except ConnectionRefusedError as e:
                if NOISY:
                    logging.warning("connect to port %d failed (%s); retrying", port, e)
                time.sleep(0.3)
    connect(int(sys.argv[-1]))
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _retrying(tmp_path, logdir, *args, minor=None):
    exe = PYTHON if minor is None else python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    env = {} if minor is None else {"PYTHONPATH": launch.variables({})["PYTHONPATH"]}
    path = script(tmp_path, RETRY, name="client.py")
    port = _free_port()  # nothing listens there once it is closed
    proc = start([path] + list(args) + [str(port)], str(logdir), program=exe, EARLYLOG_STALL="2", **env)
    try:
        # A dump may show the retry before the watchdog's `retrying:` line has counted its failures.
        rep = wait_for(lambda: (lambda r: r if any(" seen in the last " in c["text"] for c in causes(r, "retrying"))
                                else None)(report_json(str(logdir))))
        text = flat(earlylog("report", logdir).stdout)
    finally:
        kill_tree(proc)
    (cause,) = causes(rep, "retrying")
    assert cause["text"].startswith("pid %d (client) is retrying: " % proc.pid)
    assert ("failures connecting to 127.0.0.1:%d (ConnectionRefusedError) seen in the last " % port) in cause["text"]
    assert "in connect at client.py:14; it sleeps between tries, so it looks idle" in cause["text"]
    assert cause["next"].startswith("nothing listens on 127.0.0.1:%d: start the server there" % port)
    assert "give the retry loop a limit" in cause["next"]
    assert "idle" not in rep["processes"][0]["summary"] and rep["processes"][0]["state"] == "stalled"
    assert "in trouble: 1 stuck" in text and "is retrying: " in text
    return rep


@pytest.mark.parametrize("minor", [None, 9, 13])  # 3.9 reads the `except ... as e` name; 3.10+ asks Python
def test_a_quiet_retry_loop_is_retrying_not_idle(tmp_path, logdir, minor):
    rep = _retrying(tmp_path, logdir, minor=minor)
    assert minor is None or "Python 3.%d" % minor in read(log_files(str(logdir))[0])
    assert rep["processes"][0]["retrying"]["count"] >= 2


def test_a_retry_loop_that_logs_every_failure_while_another_thread_prints(tmp_path, logdir):
    rep = _retrying(tmp_path, logdir, "noisy")
    assert rep["processes"][0]["retrying"]["thread"] == "MainThread"


def test_a_sleeping_poll_loop_whose_connects_succeed_stays_idle(tmp_path, logdir):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    port = server.getsockname()[1]
    path = script(tmp_path, """
        import socket, sys, time
        while True:  # a health check: connects, then sleeps
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
            except OSError:
                pass
            time.sleep(0.3)
    """, name="poll.py")
    proc = start([path, str(port)], str(logdir), EARLYLOG_STALL="1")
    try:
        wait_log(str(logdir), "dump: stall")
        time.sleep(2)  # a few more beats and dumps
        rep = report_json(str(logdir))
    finally:
        kill_tree(proc)
        server.close()
    assert not causes(rep, "retrying") and rep["processes"][0]["retrying"] is None
    assert rep["processes"][0]["state"] == "idle"


def test_a_worker_polling_an_empty_queue_in_an_except_block_stays_idle(tmp_path, logdir):
    path = script(tmp_path, """
        import queue, time
        jobs = queue.Queue()
        while True:
            try:
                job = jobs.get_nowait()
            except queue.Empty:  # nothing yet: not a failure
                time.sleep(0.3)
    """, name="worker.py")
    proc = start([path], str(logdir), EARLYLOG_STALL="1")
    try:
        wait_log(str(logdir), "handling: ")
        time.sleep(2)
        rep = report_json(str(logdir))
        text = "".join(read(f) for f in log_files(str(logdir)))
    finally:
        kill_tree(proc)
    assert "handling: _queue.Empty" in text and "note: retrying" not in text
    assert not causes(rep, "retrying") and rep["processes"][0]["state"] == "idle"


def test_a_worker_that_execs_while_starting_and_is_let_go_is_not_trouble(tmp_path, logdir):
    """Ray's setup_worker execs its worker; Ray kills workers it does not need while they start. The
    exec record is no work of the program's: the new program is still starting when killed by its
    supervisor, which runs on, so it was let go, not lost (it read `vanished` under load)."""
    path = script(tmp_path, """
        import os, signal, subprocess, sys, time
        setup = "import os, sys; os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)'])"
        child = subprocess.Popen([sys.executable, "-c", setup])
        def starts():
            logs = [os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1]) if "-%d-" % child.pid in f]
            return sum(open(f).read().count("start: pid %d " % child.pid) for f in logs)
        while starts() < 2:
            time.sleep(0.05)  # the exec'd program has written its start line
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        print("let it go", flush=True)
        time.sleep(60)
        """, "pool.py")
    proc = start([path, str(logdir)], logdir, EARLYLOG_STALL=30)
    try:
        def let_go():
            rep = report_json(logdir)
            kids = [p for p in rep["processes"] if p["ppid"] == proc.pid]
            return kids[0] if kids and kids[0]["state"] != "running" else None
        child = wait_for(let_go)
    finally:
        kill_tree(proc)
    assert child["still_starting"] is True and child["state"] == "terminated", child
    assert child["summary"].startswith("stopped while still starting: ended with no exit record (SIGKILL)"), child


STOPPABLE = """
    import gc, signal, threading
    def stop(signum, frame):
        raise SystemExit(0)  # the framework's stop request
    signal.signal(signal.SIGTERM, stop)
    def fetch_shard():
        try:
            threading.Event().wait(%s)
        finally:
            gc.collect()  # the framework's clean-up on the way out: a full collection
    fetch_shard()
    raise SystemExit(0)
"""


def test_a_stop_request_raised_inside_a_stuck_call_is_a_hang_cut_short_and_a_call_that_returned_is_not(
        tmp_path, logdir):
    """Ray's worker is also stopped by a SystemExit its signal handler raises inside the task's call.
    The call's clean-up ran a full collection on the way out, so the exit read as a plain "end of
    program" and the hang was lost; it is found now where the stuck thread stood at its last stall.
    The same clean exit after the wait returned is the program's own end."""
    stopped = start([script(tmp_path, STOPPABLE % "", "stopped.py")], str(logdir))
    returned = start([script(tmp_path, STOPPABLE % "2.5", "returned.py")], str(logdir))
    wait_for(lambda: any("dump: stall" in read(f) for f in log_files(logdir) if "-%d-" % stopped.pid in f))
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == 0 and returned.wait(timeout=60) == 0
    assert any("dump: stall" in read(f) for f in log_files(logdir) if "-%d-" % returned.pid in f)
    procs = {d["tag"]: d for d in report_json(str(logdir))["processes"]}
    assert procs["stopped"]["state"] == "stalled", procs["stopped"]
    summary = procs["stopped"]["summary"]
    assert summary.startswith("stalled for ") and " in fetch_shard at stopped.py:8; " in summary, summary
    assert "until a stop request raised inside that call ended the process (raise SystemExit(0) in wait at " \
           "threading.py:" in summary and summary.endswith("a hang cut short, the call never returned"), summary
    assert procs["returned"]["state"] == "exited", procs["returned"]


def test_a_launcher_script_that_exits_once_its_call_returned_is_no_hang_cut_short(tmp_path, logdir):
    """A console script's `sys.exit(main())` (torchrun's, accelerate's), silent past the stall while
    main() ran inside a library: main() returned and the exit was called on the same line. The
    stall saw that line waiting in a call below it, so its call had returned: a launcher that ended
    its job, not a hang cut short (it read so on a loaded machine, when its children ended just
    after the last stall line)."""
    launcher = script(tmp_path, """
        import subprocess, sys
        sys.exit(subprocess.call(["sleep", "2.5"]))
        """, "launch.py")
    res = run_python([launcher], logdir=logdir, env={"EARLYLOG_STALL": "1", "EARLYLOG_CONSOLE": "off"})
    assert res.returncode == 0, res.err
    assert "waiting for child" in "".join(read(f) for f in log_files(logdir))
    rep = report_json(str(logdir))
    assert [d["state"] for d in rep["processes"]] == ["exited"], rep["verdict"]
    assert rep["verdict"][0] == "1 process, none in trouble: 1 exited", rep["verdict"]
