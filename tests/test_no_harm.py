"""Never change the host: subinterpreters, a fork from a thread, faulthandler, SIGUSR1, native
stacks and relative log folders, each run for real with and without earlylog. What the program
sees (exit status, output, signals, timing) must not change; where earlylog still does its work
(crash stacks, on-demand dumps), the log shows it."""
import json
import os
import signal
import subprocess
import time

import pytest

from support import PYTHON, TIMEOUT, clean_env, log_files, python_3, read, run_both, run_python, script


def has_module(name):
    return run_python("import " + name, enabled=False).returncode == 0


def sentences(err):
    """earlylog's own plain sentences on stderr (its failures and warnings)."""
    return [line for line in err.splitlines() if line.startswith("earlylog: ")]


def starts(result):
    return [r for r in result.records() if r["kind"] == "start"]


# In a subinterpreter: does earlylog show? Its hooks, its stdio layer, its threads.
SUBINTERPRETER_LOOKS = """if 1:
    import sys, _thread
    print("sub", sys.excepthook is sys.__excepthook__, type(sys.stdout.buffer).__name__,
          _thread._count(), flush=True)
"""


@pytest.mark.skipif(not has_module("_testcapi"), reason="this Python has no _testcapi")
def test_a_subinterpreter_ends_as_without_earlylog(logdir):
    # Py_NewInterpreter runs site and the .pth line again: earlylog's threads in it made
    # Py_EndInterpreter abort the process (Fatal Python error: not the last thread, status 134).
    on = run_both("""
        import _testcapi
        _testcapi.run_in_subinterp(%r)
        print("ok")
    """ % SUBINTERPRETER_LOOKS, logdir)
    assert on.returncode == 0 and on.out == "sub True BufferedWriter 0\nok\n"
    assert len(starts(on)) == 1, "earlylog starts in the main interpreter only"


ISOLATED = """
    import sys
    code = %r
    try:
        from concurrent import interpreters  # 3.14+
    except ImportError:
        interpreters = None
    if interpreters is not None:
        interp = interpreters.create()
        interp.exec(code)
        interp.close()
    else:
        try:
            import _interpreters as subs  # 3.13
            iid = subs.create("isolated")
            subs.exec(iid, code)
        except ImportError:
            import _xxsubinterpreters as subs  # 3.11, 3.12
            iid = subs.create(isolated=True)
            subs.run_string(iid, code)
        subs.destroy(iid)
    print("ok")
""" % SUBINTERPRETER_LOOKS


@pytest.mark.skipif(not (has_module("concurrent.interpreters") or has_module("_interpreters")
                         or run_python("import _xxsubinterpreters as s; s.create(isolated=True)",
                                       enabled=False).returncode == 0),
                    reason="this Python cannot create an isolated subinterpreter (3.11+ can)")
def test_an_isolated_subinterpreter_hears_nothing_of_earlylog(logdir):
    # An isolated subinterpreter cannot start threads: earlylog used to say "watchdog failed"
    # and "probes failed" on stderr there, even with the console off.
    on = run_both(ISOLATED, logdir)
    assert on.returncode == 0 and on.out == "sub True BufferedWriter 0\nok\n"
    assert sentences(on.err) == [] and len(starts(on)) == 1


def test_a_child_forked_in_a_thread_exits_when_its_thread_returns(tmp_path, logdir):
    # Without earlylog such a child ends when its only thread returns; a background thread of
    # ours (or faulthandler's timer thread) would keep it alive, so `out=$(python r.py)` hung.
    code = script(tmp_path, """
        import os, signal, threading, time, warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+ warns about fork with threads
        def work():
            pid = os.fork()
            if pid == 0:
                print("child", flush=True)
                return
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    print("child exited", os.waitstatus_to_exitcode(status))
                    return
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("child hung")
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    """, "r.py")
    on = run_both([code], logdir, env={"EARLYLOG_STALL": "1"})
    assert on.out == "child\nchild exited 0\n"
    [child] = [read(p) for p in on.files() if "-fork" in os.path.basename(p)]
    assert "stall and on-demand dumps are off" in child


def test_faulthandler_answers_as_without_earlylog(tmp_path, logdir):
    own = tmp_path / "own.txt"
    code = script(tmp_path, """
        import faulthandler, sys
        print(faulthandler.is_enabled())
        with open(sys.argv[1], "w") as f:
            faulthandler.enable(file=f)
            print(faulthandler.is_enabled())
            faulthandler.dump_traceback(file=f, all_threads=False)
            print(faulthandler.disable(), faulthandler.is_enabled())
        print(faulthandler.is_enabled())
    """)
    run_python([code, str(own)], enabled=False)
    theirs = own.read_text()
    on = run_both([code, str(own)], logdir)
    assert on.returncode == 0 and on.out == "False\nTrue\nTrue False\nFalse\n"
    assert own.read_text() == theirs and "in <module>" in theirs


def test_a_program_that_takes_faulthandler_gets_its_crash_in_its_own_file(tmp_path, logdir):
    own = tmp_path / "crash.txt"
    code = script(tmp_path, """
        import ctypes, faulthandler, sys
        f = open(sys.argv[1], "w")
        faulthandler.enable(file=f)
        def crash_here():
            ctypes.string_at(0)
        crash_here()
    """)
    run_python([code, str(own)], enabled=False)
    assert "Fatal Python error: Segmentation fault" in own.read_text()
    own.unlink()
    on = run_both([code, str(own)], logdir)
    assert on.returncode == -signal.SIGSEGV
    crash = own.read_text()
    assert "Fatal Python error: Segmentation fault" in crash and "in crash_here" in crash
    assert "Fatal Python error: Segmentation fault" not in on.text(), "the program took it: its file, not our log"


def test_pytest_like_faulthandler_use_leaves_stderr_silent_and_the_log_gets_the_crash(tmp_path, logdir):
    # pytest's faulthandler plugin: enable on a dup of stderr, disable at the end, re-enable only
    # if it was enabled before. A crash after that prints nothing on stderr without earlylog.
    code = script(tmp_path, """
        import ctypes, faulthandler, os, sys
        was = faulthandler.is_enabled()
        fd = os.dup(sys.stderr.fileno())
        faulthandler.enable(file=fd)
        print("session", was, faulthandler.is_enabled(), flush=True)
        faulthandler.disable()
        os.close(fd)
        if was:
            faulthandler.enable(file=sys.stderr.fileno())
        def crash_at_shutdown():
            ctypes.string_at(0)
        crash_at_shutdown()
    """)
    on = run_both([code], logdir)
    assert on.returncode == -signal.SIGSEGV and on.out == "session False True\n"
    assert "Fatal Python error" not in on.err
    text = on.text()
    crash = text[text.index("Fatal Python error: Segmentation fault"):]
    assert "in crash_at_shutdown" in crash, "faulthandler given back: earlylog's log gets the crash"


def test_sigusr1_kills_as_without_earlylog(logdir):
    on = run_both("""
        import os, signal, time
        print(signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL, flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(2)
        print("survived")
    """, logdir)
    assert on.returncode == -signal.SIGUSR1 and on.out == "True\n"


def test_earlylog_dump_asks_a_live_process_for_its_stacks(tmp_path, logdir):
    path = script(tmp_path, """
        import threading
        def wait_for_orders():
            print("ready", flush=True)
            threading.Event().wait(30)
        wait_for_orders()
    """)
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=0, EARLYLOG_CONSOLE="off")
    proc = subprocess.Popen([PYTHON, path], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        cli = subprocess.run([PYTHON, "-m", "earlylog", "dump", str(proc.pid)], env=clean_env(),
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "pid %d: stacks written to" % proc.pid in cli.stdout
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    text = "".join(read(p) for p in log_files(logdir))
    dump = text[text.index("dump: on request"):]
    assert "in wait_for_orders" in dump
    assert sorted(os.listdir(str(logdir))) == sorted(os.path.basename(p) for p in log_files(logdir)), \
        "the request is taken away once answered"


BUSY = """
    import sys, time
    def crunch(seconds):
        worst = 0.0
        last = time.monotonic()
        end = last + seconds
        while last < end:
            sum(range(300))
            now = time.monotonic()
            worst = max(worst, now - last)
            last = now
        return worst
    print("%.4f" % crunch(3.5))
"""


def test_a_busy_loop_is_not_paused_by_stall_dumps(logdir):
    # Silent but computing: stall dumps at 1 s and 2 s say "busy"; nothing may stop the process
    # to look at it (gdb used to freeze it for seconds while it loaded symbols).
    env = {"EARLYLOG_STALL": "1", "EARLYLOG_NATIVE": "1", "EARLYLOG_CONSOLE": "off"}
    off = float(run_python(BUSY, enabled=False).out)
    on = run_python(BUSY, logdir=logdir, env=env)
    assert on.returncode == 0
    assert float(on.out) < off + 0.5, "longest pause %s s with earlylog, %.3f s without" % (on.out.strip(), off)
    stalls = [r["msg"] for r in on.records() if r["kind"] == "stall" and r["msg"].startswith("silent")]
    assert stalls and all("busy" in s for s in stalls)
    assert "native stacks" not in on.text()


@pytest.mark.parametrize("native", [None, "1"])
def test_a_native_stack_tool_never_leaves_the_process_stopped(tmp_path, logdir, native):
    # A stand-in for a py-spy that stops the process it reads and never finishes.
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "py-spy"
    fake.write_text('#!/bin/sh\nkill -STOP "$4"\nexec sleep 60\n')  # py-spy dump --native --pid PID
    fake.chmod(0o755)
    code = script(tmp_path, """
        import threading, time
        from earlylog.runtime import native
        native.TIMEOUT = 2
        started = time.monotonic()
        threading.Event().wait(5)
        print("waited %.0f s" % (time.monotonic() - started))
    """)
    env = {"EARLYLOG_STALL": "1", "PATH": "%s%s%s" % (tools, os.pathsep, os.environ["PATH"])}
    if native:
        env["EARLYLOG_NATIVE"] = native
    started = time.monotonic()
    on = run_python([code], logdir=logdir, env=env, timeout=30)
    assert on.returncode == 0 and on.out == "waited 5 s\n"
    assert time.monotonic() - started < 15
    natives = [r["msg"] for r in on.records() if r["kind"] == "dump" and "native stacks" in r["msg"]]
    if native:  # asked for, on a blocked process: tried once, killed after its timeout, process resumed
        assert len(natives) == 1 and natives[0].startswith("no native stacks: py-spy did not finish within 2 s")
    else:  # off by default
        assert natives == []


@pytest.mark.parametrize("knob", ["EARLYLOG_DIR", "EARLYLOG_FILE"])
def test_a_relative_log_place_holds_the_whole_tree(tmp_path, knob):
    # A child started in another folder used to log relative to its own cwd, and the report of
    # the run missed it.
    top, elsewhere = tmp_path / "top", tmp_path / "elsewhere"
    top.mkdir()
    elsewhere.mkdir()
    code = script(tmp_path, """
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "print('child')"], cwd=sys.argv[1], check=True)
        print("parent")
    """)
    place = "logs" if knob == "EARLYLOG_DIR" else "all.log"
    env = {knob: place, "EARLYLOG_CONSOLE": "off"}
    on = run_both([code, str(elsewhere)], None, env=env, cwd=str(top))
    assert on.out == "child\nparent\n"
    assert not os.path.exists(str(elsewhere / place))
    if knob == "EARLYLOG_FILE":
        assert read(str(top / place)).count(" start: ") == 2
        return
    assert len(log_files(str(top / place))) == 2
    report = subprocess.run([PYTHON, "-m", "earlylog", "report", str(top / place), "--json"], env=clean_env(),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert json.loads(report.stdout)["counts"]["processes"] == 2, report.stdout + report.stderr


def test_a_relative_log_folder_is_exported_absolute(tmp_path):
    # The one inherent difference: the environment the program and its children see holds the
    # folder made absolute, once, by the first process of the tree.
    shown = run_python("import os; print(os.environ['EARLYLOG_DIR'])", env={"EARLYLOG_DIR": "logs"},
                       cwd=str(tmp_path))
    assert shown.out == "%s\n" % (tmp_path / "logs")


def test_a_childs_stderr_read_as_data_holds_only_what_the_child_wrote(logdir):
    # A program that captures a Python child's stderr reads it as data: earlylog's console lines
    # must not be in it (the child's log file has them). A child of an earlylog process writes
    # them only to a terminal; the first process of the tree keeps them wherever they go.
    on = run_both("""
        import subprocess, sys
        r = subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('oops')"], capture_output=True)
        print(repr(r.stderr), r.returncode)
        """, logdir)
    assert on.out.strip() == "b'oops' 0"
    assert sum("console lines off" in read(f) for f in log_files(logdir)) == 1
    inherited = run_python("import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])", logdir=logdir)
    assert inherited.err.count(" start: ") == 1  # the first process's only: stderr is no terminal


def test_a_signal_the_program_blocks_waits_for_sigwait(logdir):
    # earlylog's threads (and faulthandler's timer) start with every signal blocked, so a signal
    # the program blocks in its threads stays pending for sigwait() instead of killing it there.
    on = run_both("""
        import os, signal, time
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGUSR2)
        print("got", signal.sigwait([signal.SIGUSR2]))
        """, logdir, env={"EARLYLOG_STALL": "0.2"})
    assert on.returncode == 0 and on.out.strip() == "got %d" % signal.SIGUSR2


FORKS = """
    import multiprocessing, os, sys, threading, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pid = os.fork()
        if pid == 0:
            os._exit(3)
        print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        worker = multiprocessing.get_context("fork").Process(target=print, args=("from a Process",))
        worker.start()
        worker.join()
    print("Process", worker.exitcode, "warnings", [str(w.message) for w in caught], flush=True)
    pid = os.fork()  # in __main__: Python shows a DeprecationWarning here by default, when it warns
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    lock = threading.Lock()
    lock.acquire()
    lock.acquire(timeout=2.5)  # the watchdog, started again after the forks, dumps this wait
"""


@pytest.mark.parametrize("minor", [12, 13])
@pytest.mark.parametrize("flag", ["default", "error"])
def test_a_fork_warns_exactly_as_without_earlylog(tmp_path, logdir, minor, flag):
    # Python 3.12+ warns in os.fork() when the process has more than one OS thread: earlylog's
    # threads (watchdog, probes, faulthandler's timer) must not be counted, and must come back.
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    env = {"PYTHONPATH": launch.variables({})["PYTHONPATH"], "EARLYLOG_STALL": "1"}
    on = run_both(["-W", flag, script(tmp_path, FORKS)], logdir, python=exe, env=env)
    assert "Process 0 warnings []" in on.out and "DeprecationWarning" not in on.err, on.err
    main = [read(p) for p in on.files() if "-script.log" in p][0]
    assert "stall after 1 s of silence" in main and "lock.acquire(timeout=2.5)" in main, main


PTY_CHILDREN = """
    import os, pty, sys

    def command_output(argv):
        pid, fd = pty.fork()  # what pexpect and pty.spawn do: the child's stdio is a new terminal
        if pid == 0:
            os.execv(argv[0], argv)
        chunks = []
        while True:
            try:
                data = os.read(fd, 1024)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.waitpid(pid, 0)
        return b"".join(chunks)

    print(command_output(["/bin/echo", "hello"]))
    print(command_output([sys.executable, "-c", "print('hi there')"]))
"""


def test_a_terminal_a_program_opens_for_its_child_carries_only_the_childs_output(tmp_path, logdir):
    # pexpect's own suite failed 32 tests: the fork child wrote its start line into the new
    # terminal before the exec, and a Python child its lines, and the parent read them as output.
    on = run_both([script(tmp_path, PTY_CHILDREN)], logdir)
    assert on.out.splitlines() == ["b'hello\\r\\n'", "b'hi there\\r\\n'"], on.out
    texts = [read(p) for p in on.files()]
    assert len(texts) == 4, texts  # the parent, two fork children, and the Python they became
    assert sum(" (via fork, " in t for t in texts) == 2
    assert [t for t in texts if "console lines off: a child of earlylog process" in t and "-c 'print(" in t]


SUBINTERPRETERS = """
    import sys, time
    import importlib
    interpreters = importlib.import_module("_interpreters" if sys.version_info >= (3, 13) else "_xxsubinterpreters")
    end = time.monotonic() + 3  # three stall thresholds: the watchdog looks at the threads all along
    runs = 0
    while time.monotonic() < end:
        iid = interpreters.create()
        interpreters.run_string(iid, "import time; time.sleep(0.05)")
        interpreters.destroy(iid)
        runs += 1
    print("ok", runs > 5)
"""


@pytest.mark.parametrize("minor", [12, 13])
def test_a_program_that_runs_subinterpreters_is_not_crashed(tmp_path, logdir, minor):
    """On 3.12+ each interpreter has its own allocator, and sys._current_frames() makes frame
    objects for every interpreter's threads: called by the watchdog while a subinterpreter ran, it
    corrupted the heap (`munmap_chunk(): invalid pointer`, then SIGSEGV; CPython's test_sys aborted
    so in CI). The watchdog's looks skip the moments another interpreter runs."""
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    env = {"PYTHONPATH": launch.variables({})["PYTHONPATH"], "EARLYLOG_STALL": "1", "EARLYLOG_DUMP_EVERY": "0.5"}
    on = run_both([script(tmp_path, SUBINTERPRETERS)], logdir, python=exe, env=env)
    assert on.returncode == 0 and on.out == "ok True\n", on.err[-2000:]
