"""Issue 7, faults and abuse: broken log places, broken stdio, crowds, kills, bad knobs, odd bytes,
recursion, fork storms, signals, shutdown. Each case: the program behaves exactly as without
earlylog, and where something is wrong earlylog says one clear sentence."""
import os
import signal
import subprocess
import time

import pytest

from earlylog.runtime.config import KNOBS
from support import PYTHON, TIMEOUT, clean_env, python_3, read, report_json, run_both, run_python, script, user_text, \
    wait_for, wait_log

HELLO = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"


def sentences(err):
    return [line for line in err.splitlines() if line.startswith("earlylog: ")]


def test_missing_log_folder_is_created(tmp_path):
    logdir = tmp_path / "not" / "there" / "yet"
    on = run_both(HELLO, logdir)
    assert len(on.files()) == 1 and sentences(on.err) == []


@pytest.mark.parametrize("case", ["under-a-file", "is-a-file"])
def test_unusable_log_folder_falls_back_with_one_sentence(tmp_path, case):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    logdir = blocker / "logs" if case == "under-a-file" else blocker
    on = run_both(HELLO, logdir, env={"TMPDIR": tmp_path})
    said = sentences(on.err)
    assert len(said) == 1 and "EARLYLOG_DIR" in said[0] and "default folder" in said[0], said
    assert "not a folder" in said[0]
    fallback = tmp_path / ("earlylog-%d" % os.getuid())
    assert [p for p in fallback.rglob("*.log")], "the default folder holds the log instead"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0500 folder anyway; covered by under-a-file")
def test_read_only_log_folder(tmp_path):
    logdir = tmp_path / "ro"
    logdir.mkdir(mode=0o500)
    on = run_both(HELLO, logdir, env={"TMPDIR": tmp_path})
    assert len(sentences(on.err)) == 1 and "not writable" in on.err


def test_full_disk_log_file(logdir):
    on = run_both("import earlylog\nfor i in range(50): earlylog.log('x' * 100)\n" + HELLO, logdir,
                  env={"EARLYLOG_FILE": "/dev/full"})
    said = sentences(on.err)
    assert len(said) == 1 and "/dev/full" in said[0] and "No space left" in said[0], said
    assert on.err.count("mark: ") == 50, "the lines still reach the console"


@pytest.mark.parametrize("name", ["with spaces/and é€ 日本", b"bytes-\xff\xfe".decode("utf-8", "surrogateescape")])
def test_odd_log_folder_names(tmp_path, name):
    logdir = tmp_path / name
    on = run_both(HELLO, logdir)
    [path] = on.files()
    assert os.path.dirname(path) == str(logdir)
    assert on.records()[0]["kind"] == "start"


@pytest.mark.parametrize("shell", ["2>&-", "1>&-", "0<&-", "2>&- 1>&-"])
def test_closed_std_streams(tmp_path, shell):
    # A closed fd 0/1/2 must stay closed: our log file must never take its number, or the
    # program's "print to stderr" would land in our log (sinks._high_fd).
    code = script(tmp_path, """
        import os, sys
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
            except OSError:
                with open(os.environ["REPORT"], "a") as f:
                    f.write("fd %d closed\\n" % fd)
        print("to stdout")
        print("to stderr", file=sys.stderr)
    """)
    runs = []
    for enabled, folder in ((False, None), (True, tmp_path / "logs")):
        report = tmp_path / ("report-%s" % enabled)
        env = clean_env(REPORT=report, **({"EARLYLOG": "1", "EARLYLOG_DIR": folder} if enabled else {}))
        proc = subprocess.run(["bash", "-c", 'exec "$0" "$1" %s' % shell, PYTHON, code], env=env,
                              capture_output=True, timeout=TIMEOUT)
        runs.append((proc.returncode, proc.stdout, user_text(proc.stderr), report.read_text()))
    assert runs[0] == runs[1]
    [log] = (tmp_path / "logs").iterdir()
    assert "start: " in read(str(log))


# Python's own statuses: a print that meets the closed pipe raises BrokenPipeError (1); a program
# that flushes itself also leaves the unwritten line buffered, so the exit-time flush fails too
# ("Exception ignored", 120); with SIGPIPE at SIG_DFL the first write kills it (141).
@pytest.mark.parametrize("sigpipe, status", [("python-default", 1), ("flush", 120), ("SIG_DFL", 141)])
def test_stdout_into_a_closed_pipe(tmp_path, sigpipe, status):
    code = script(tmp_path, """
        import signal, sys
        if sys.argv[1] == "SIG_DFL":
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        for i in range(200000):
            print(i, flush=sys.argv[1] == "flush")
    """)
    runs = []
    for extra in ({}, {"EARLYLOG": "1", "EARLYLOG_DIR": tmp_path / "logs"}):
        proc = subprocess.run(["bash", "-c", '"$0" "$1" "$2" | head -1; echo "status ${PIPESTATUS[0]}"',
                               PYTHON, code, sigpipe], env=clean_env(**extra), capture_output=True,
                              timeout=TIMEOUT)
        runs.append((proc.stdout, user_text(proc.stderr)))
    assert runs[0] == runs[1]  # the same traceback: no frame of earlylog's stdio layer in it
    assert runs[0][0].endswith(b"status %d\n" % status)


def test_our_console_lines_never_raise_sigpipe(tmp_path):
    # The program sets SIGPIPE to SIG_DFL (as many CLI tools do) and never writes to stderr; the
    # reader of stderr goes away after our start line. Our next line must not kill it (141).
    code = script(tmp_path, """
        import signal, time, earlylog
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        time.sleep(0.5)
        earlylog.log("a console line into a pipe nobody reads any more")
        print("finished")
    """)
    runs = []
    for extra in ({}, {"EARLYLOG": "1", "EARLYLOG_DIR": tmp_path / "logs"}):
        proc = subprocess.run(["bash", "-c", '"$0" "$1" 2> >(head -c 1 >/dev/null); echo "status $?"', PYTHON, code],
                              env=clean_env(**extra), capture_output=True, timeout=TIMEOUT)
        runs.append(proc.stdout)
    assert runs == [b"finished\nstatus 0\n"] * 2


def test_64_processes_share_one_log_file_without_torn_lines(tmp_path):
    shared = tmp_path / "all.log"
    code = script(tmp_path, """
        import earlylog, sys
        for i in range(100):
            earlylog.log("%s line %d %s" % (sys.argv[1], i, "." * 300))
    """)
    env = clean_env(EARLYLOG=1, EARLYLOG_FILE=shared, EARLYLOG_CONSOLE="off", EARLYLOG_PROBES=0)
    procs = [subprocess.Popen([PYTHON, code, "p%d" % n], env=env) for n in range(64)]
    assert [p.wait(timeout=TIMEOUT) for p in procs] == [0] * 64
    from earlylog.grammar import records
    lines = read(str(shared)).splitlines()
    parsed = [records.parse(line) for line in lines]
    assert None not in parsed, "a torn or interleaved line"
    marks = [r["msg"].split()[:3] for r in parsed if r["kind"] == "mark"]
    assert sorted(marks) == sorted([["p%d" % n, "line", str(i)] for n in range(64) for i in range(100)])
    assert len({r["pid"] for r in parsed if r["kind"] == "start"}) == 64


def test_sigkill_mid_write_keeps_earlier_lines(tmp_path, logdir):
    code = script(tmp_path, """
        import earlylog
        i = 0
        while True:
            earlylog.log("line %d %s" % (i, "#" * 500))
            i += 1
    """)
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_CONSOLE="off")
    proc = subprocess.Popen([PYTHON, code], env=env)
    try:
        wait_for(lambda: [p for p in logdir.iterdir()] and os.path.getsize(next(logdir.iterdir())) > 500000)
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    from earlylog.grammar import records
    text = read(str(next(logdir.iterdir())))
    # Linux may cut a write short when SIGKILL lands between two pages of it, so only the line
    # being written may be torn; every line before it is whole.
    whole, _, torn = text.rpartition("\n")
    assert torn == "" or torn.startswith("[earlylog] ")
    marks = [records.parse(line) for line in whole.splitlines()]
    numbers = [int(r["msg"].split()[1]) for r in marks if r and r["kind"] == "mark"]
    assert None not in marks and numbers == list(range(len(numbers))) and len(numbers) > 900


# One bad value per knob; a knob added to config.KNOBS without one here fails this test.
BAD_VALUES = {
    "EARLYLOG_DIR": "<a file>",
    "EARLYLOG_FILE": "<a folder>",
    "EARLYLOG_STALL": "soon",
    "EARLYLOG_DUMP_EVERY": "-1",
    "EARLYLOG_CONSOLE": "tty",
    "EARLYLOG_FORMAT": "xml",
    "EARLYLOG_MAX_LOG": "-2",
    "EARLYLOG_LIVE": "maybe",
    "EARLYLOG_TEE": "2",
    "EARLYLOG_PROBES": "yes please",
    "EARLYLOG_IMPORTS": "nan",
    "EARLYLOG_MARKS": "y",
    "EARLYLOG_REDACT": ",,, ,",
    "EARLYLOG_LOG_ARG": "--log",
    "EARLYLOG_DEBUG": "verbose",
    "EARLYLOG_NATIVE": "gdb please",
    "EARLYLOG_STALL_EXIT": "later",
    "EARLYLOG_ON_STALL": "true",  # any text is a command: nothing to warn about (as REDACT, LOG_ARG)
}


def test_bad_value_for_every_knob(tmp_path, logdir):
    knobs = set(KNOBS) - {"EARLYLOG"}
    assert knobs <= set(BAD_VALUES), "give the new knob a bad value here: %s" % (knobs - set(BAD_VALUES))
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    env = dict({k: v for k, v in BAD_VALUES.items() if k in knobs}, EARLYLOG_DIR=blocker,
               EARLYLOG_FILE=tmp_path, TMPDIR=tmp_path)
    on = run_both(["-c", HELLO, "--log"], None, env=env)
    for name in knobs - {"EARLYLOG_REDACT", "EARLYLOG_LOG_ARG", "EARLYLOG_ON_STALL"}:
        assert name in on.err, "no sentence names %s" % name
    logs = list((tmp_path / ("earlylog-%d" % os.getuid())).rglob("*.log"))
    assert len(logs) == 1, "it still logs, into the default folder"


def test_bad_switch_value_keeps_earlylog_off(logdir):
    off = run_python(HELLO, enabled=False)
    on = run_python(HELLO, logdir=logdir, env={"EARLYLOG": "perhaps"})
    assert (on.returncode, on.out) == (off.returncode, off.out) and on.files() == []
    assert sentences(on.err) == ["earlylog: EARLYLOG='perhaps' is not one of 1/true/on/yes or 0/false/off/no;"
                                 " using off"]


def test_huge_argv_and_environment(logdir):
    args = ["-c", "import os, sys; print(len(sys.argv), len(os.environ['BIG']),"
                     " len([k for k in os.environ if k.startswith('VAR_')]))"]
    env = {"BIG": "b" * 100000}  # one string may hold 128 KiB (MAX_ARG_STRLEN)
    env.update(("VAR_%d" % i, "v" * 50) for i in range(3000))
    on = run_both(args + ["a" * 1000] * 500, logdir, env=env)
    [start] = [r for r in on.records() if r["kind"] == "start"]
    assert "more characters cut" in start["msg"]


def test_surrogate_escaped_bytes_in_argv_env_and_cwd(tmp_path, logdir):
    odd = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")
    cwd = tmp_path / odd
    cwd.mkdir()
    on = run_both(["-c", "import os, sys; print(ascii(sys.argv[1:]), ascii(os.getcwd()[-6:]),"
                   " ascii(os.environ['ODD']))", odd], logdir, env={"ODD": odd, "ODD_TOKEN": odd}, cwd=cwd)
    assert "\\udcff" in on.records()[0]["msg"]


def test_user_logging_handler_and_custom_sys_stdout(logdir):
    run_both("""
        import logging, sys

        class Shouter:
            # Not a real stream: no fileno, no buffer, no encoding.
            def __init__(self, real):
                self.real = real
            def write(self, text):
                self.real.write(text.upper())
                return len(text)
            def flush(self):
                self.real.flush()

        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")
        logging.info("through the handler")
        sys.stdout = Shouter(sys.stdout)
        print("through the custom object")
        logging.getLogger().handlers[0].setStream(sys.stdout)
        logging.warning("handler writing into the custom object")
        sys.stderr = Shouter(sys.stderr)
        raise SystemExit("bye")
    """, logdir)


def test_fork_storm_with_threads_alive(tmp_path, logdir):
    code = script(tmp_path, """
        import os, sys, threading, earlylog
        stop = False
        def chatter(n):
            while not stop:
                print("thread", n)
                earlylog.log("thread %d" % n)
        threads = [threading.Thread(target=chatter, args=(n,), daemon=True) for n in range(4)]
        for t in threads:
            t.start()
        children = []
        for i in range(40):
            pid = os.fork()
            if pid == 0:
                earlylog.log("child %d" % i)
                os._exit(7)
            children.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
        stop = True
        for t in threads:  # daemon threads printing during shutdown abort CPython itself
            t.join()
        sys.stderr.write("children %s\\n" % sorted(set(codes)))
    """)
    for extra in ({}, {"EARLYLOG": "1", "EARLYLOG_DIR": logdir, "EARLYLOG_CONSOLE": "off"}):
        proc = subprocess.run([PYTHON, code], env=clean_env(**extra), capture_output=True, timeout=TIMEOUT)
        assert (proc.returncode, proc.stderr) == (0, b"children [7]\n"), proc.stderr.decode()
    assert len(list(logdir.iterdir())) == 41, "every fork child got its own log file"


def test_forks_while_earlylog_threads_import_never_hang_a_child(tmp_path, logdir):
    """earlylog's probe thread imports modules 0.1 s into a process (fcntl among them). A child
    forked while another thread is inside an import inherits that module's lock held by a thread
    it lacks, and hangs the first time it imports the module: so a fork waits for our imports.
    Without that wait, this program hung in 5 runs of 12 (and in 5 of 6 with PYTHONDONTWRITEBYTECODE)."""
    code = script(tmp_path, """
        import os, time
        end, kids, codes = time.monotonic() + 0.6, [], set()
        while time.monotonic() < end:
            pid = os.fork()
            if pid == 0:
                import fcntl  # noqa: F401
                os._exit(3)
            kids.append(pid)
            if len(kids) > 20:
                codes.add(os.waitstatus_to_exitcode(os.waitpid(kids.pop(0), 0)[1]))
        for pid in kids:
            codes.add(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print("children", sorted(codes))
    """)
    for run in range(6):
        env = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir / str(run)), EARLYLOG_CONSOLE="off")
        proc = subprocess.run([PYTHON, code], env=env, capture_output=True, timeout=TIMEOUT)
        assert (proc.returncode, proc.stdout) == (0, b"children [3]\n"), proc.stderr.decode()


def test_the_interpreter_ends_only_once_no_thread_of_ours_is_inside_an_import(tmp_path, logdir):
    """Finalization kills a daemon thread when it next takes the GIL. One killed inside an import
    (reading the module's file) leaves that file object's lock held, and freeing it at the end
    aborted the process or corrupted its heap: 3 of 750 `EARLYLOG=1 python -c pass` on a loaded
    machine, with the watchdog thread importing its module. So the exit waits for our imports
    (threads.quiesce), and our threads read files through bare descriptors (threads.read)."""
    code = script(tmp_path, """
        import time, os
        from earlylog.runtime import threads
        def importing():  # stands for a thread of ours importing a module as the program ends
            threads.gated(time.sleep, 0.4)
            # os.write, not print: a daemon thread killed at shutdown inside print() holds stdout's
            # lock, and flushing stdout then aborts the process (CPython's own daemon-thread race).
            os.write(1, b"import done\\n")
        threads.start("earlylog-test", importing)
        time.sleep(0.05)
    """)
    env = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir), EARLYLOG_CONSOLE="off")
    began = time.monotonic()
    proc = subprocess.run([PYTHON, code], env=env, capture_output=True, timeout=TIMEOUT)
    assert (proc.returncode, proc.stdout) == (0, b"import done\n"), proc.stderr.decode()
    assert time.monotonic() - began >= 0.4
    from earlylog.runtime import threads
    assert threads.read(code).lstrip().startswith(b"import time") and threads.read(str(tmp_path / "none")) is None


def test_signals_arriving_during_writes(logdir):
    run_both("""
        import signal, earlylog
        hits = []
        def handler(signum, frame):
            hits.append(signum)
            earlylog.log("in the handler")
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
        for i in range(3000):
            print("line", i)
            earlylog.log("line %d" % i)
        while len(hits) < 50:
            earlylog.log("more")
        signal.setitimer(signal.ITIMER_REAL, 0)
        print("done")
    """, logdir)


@pytest.mark.parametrize("ending", ["return", "sys.exit(5)", "os._exit(6)", "raise ValueError('x')"])
def test_shutdown_while_the_watchdog_runs(tmp_path, logdir, ending):
    code = """
        import os, sys, threading, time
        def busy():
            while True:
                time.sleep(0.001)
        for _ in range(3):
            threading.Thread(target=busy, daemon=True).start()
        time.sleep(0.3)
        def main():
            %s
        main()
    """ % ending
    started = time.monotonic()
    on = run_both(code, logdir, env={"EARLYLOG_STALL": "0.05", "EARLYLOG_DUMP_EVERY": "0.02"}, timeout=30)
    assert time.monotonic() - started < 25, "a hang at exit"
    assert "Fatal Python error" not in on.err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_killed_by_a_signal_same_status(tmp_path, logdir, sig):
    code = script(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(30)\n")
    results = []
    for extra in ({}, {"EARLYLOG": "1", "EARLYLOG_DIR": logdir}):
        proc = subprocess.Popen([PYTHON, code], env=clean_env(**extra), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)  # into the sleep, past the print
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT)
        results.append((proc.returncode, user_text(err)))
    assert results[0] == results[1]


def test_a_crash_during_shutdown_is_told_as_one_after_the_program_ended(tmp_path, logdir):
    """A native crash after the exit record (gloo's worker freeing a tensor while the interpreter shuts
    down aborts so): the report says the program had ended with its status, and that the crash came
    in no Python code, not "in an unknown place". Here the shutdown blocks for good in C code (a
    buffered file's last flush into a full pipe nobody reads), and SIGABRT comes there."""
    code = script(tmp_path, """
        import os
        r, w = os.pipe()
        os.write(w, b"x" * 65536)  # the pipe is full
        late = os.fdopen(w, "wb")
        late.write(b"y")  # in the buffer: flushed when the interpreter frees the module's globals
        """, "ends.py")
    proc = subprocess.Popen([PYTHON, code], env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_CONSOLE="off"))
    try:
        wait_log(logdir, " exit: status 0 ")
        time.sleep(0.2)  # into the flush
        proc.send_signal(signal.SIGABRT)
        assert proc.wait(TIMEOUT) == -signal.SIGABRT
    finally:
        proc.kill()
    rep = report_json(logdir)
    assert rep["processes"][0]["state"] == "crashed"
    assert rep["verdict"][1].startswith("pid %d (ends) crashed during its shutdown, after its program ended with "
                                        "status 0: Aborted (SIGABRT) in no Python code" % proc.pid), rep["verdict"]


@pytest.mark.parametrize("minor", range(9, 14))
def test_hostile_basics_on_every_python(tmp_path, logdir, minor):
    # Runtime code must run on 3.9+: a fork with threads alive, undecodable argv, the watchdog
    # dumping and an exit status, on each interpreter, through the `earlylog env` PYTHONPATH route.
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    code = script(tmp_path, """
        import os, sys, threading, time, warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+ names the pid in its fork warning
        threading.Thread(target=time.sleep, args=(0.3,), daemon=True).start()
        pid = os.fork()
        if pid == 0:
            print("child", ascii(sys.argv[1:]), flush=True)
            os._exit(4)
        print("parent saw", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        time.sleep(0.2)
        sys.exit(2)
    """)
    pythonpath = launch.variables({})["PYTHONPATH"]
    odd = b"\xff-caf\xc3\xa9".decode("utf-8", "surrogateescape")
    on = run_both([code, odd], logdir, python=exe, env={"PYTHONPATH": pythonpath, "EARLYLOG_DUMP_EVERY": "0.05"})
    assert on.returncode == 2 and len(on.files()) == 2
    assert "Python 3.%d" % minor in on.records()[0]["msg"]


def test_a_daemonizer_closing_every_fd_never_gets_our_lines_in_its_files(tmp_path, logdir):
    # python-daemon and friends close every fd; the program's next open() reuses our log's number.
    user_file = tmp_path / "state.txt"
    code = script(tmp_path, """
        import os, sys, time
        print("before")
        os.closerange(3, 1024)
        with open(sys.argv[1], "w") as f:
            print("after")
            time.sleep(1.5)
            f.write("user data\\n")
    """)
    result = run_python([code, str(user_file)], logdir=logdir,
                        env={"EARLYLOG_STALL": "0.5", "EARLYLOG_NATIVE": "0"})
    assert result.returncode == 0 and result.out == "before\nafter\n"
    assert user_file.read_text() == "user data\n"
    assert result.err.count("cannot write the log file") == 1


def test_subprocess_preexec_child_is_not_logged_as_a_fork(tmp_path, logdir):
    code = script(tmp_path, """
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True)
    """)
    result = run_python([code], logdir=logdir, env={"EARLYLOG_CONSOLE": "off"})
    assert result.returncode == 0
    tags = sorted(r["tag"] for r in result.records() if r["kind"] == "start")
    assert len(tags) == 2 and not any(t.startswith("fork") for t in tags), tags
