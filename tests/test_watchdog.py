"""Issue 4, the watchdog: a silent, stuck, killed or crashed process leaves every thread's stack,
and why each thread waits, in its own log. Each test runs real processes with short thresholds."""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from support import PYTHON, TIMEOUT, clean_env, log_files, read, run_python, script

STALL = {"EARLYLOG_STALL": "1", "EARLYLOG_CONSOLE": "off", "EARLYLOG_NATIVE": "0"}


def _env(logdir, **extra):
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **STALL)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _stamp(record):
    return time.mktime(time.strptime(record["time"][:19], "%Y-%m-%d %H:%M:%S")) + int(record["time"][20:]) / 1e3


def test_silent_wait_is_dumped_with_thread_names_and_why(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import threading
        def load_batches():
            threading.Event().wait(3)
        threading.Thread(target=load_batches, name="loader", daemon=True).start()
        def wait_for_go():
            threading.Event().wait(2.5)
        wait_for_go()
        raise SystemExit(7)
        """, "train.py")], logdir=logdir, env=STALL)
    text, records = res.text(), res.records()
    assert res.returncode == 7 and "Fatal Python error" not in res.err  # the daemon thread ends quietly
    first_stall = next(r for r in records if r["kind"] == "stall")
    assert _stamp(first_stall) - _stamp(records[0]) <= 1 + 2
    assert "silent for 1 s" in first_stall["msg"] and "blocked" in first_stall["msg"]
    dump = text[text.index("dump: stall after"):]
    assert "thread MainThread" in dump and "not daemon, main" in dump
    assert "thread loader" in dump and "daemon)" in dump
    assert "in wait_for_go: threading.Event().wait(2.5)" in dump and "in load_batches" in dump
    assert "waiting on a lock, condition or event" in dump
    assert "earlylog-watchdog" not in dump  # the dump leaves out its own thread
    # stuck on: dumps again at growing intervals (1 s, 2 s of silence), not once a beat
    stalls = [r["msg"].split(";")[0] for r in records if r["kind"] == "stall"]
    assert stalls[0] == "silent for 1 s" and set(stalls) <= {"silent for 1 s", "silent for 2 s"}
    assert "mem: rss " in text


def test_c_call_holding_the_gil_still_dumps_and_says_so(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import ctypes, time
        def hold_the_gil():
            ctypes.PyDLL(None).sleep(3)  # PyDLL keeps the GIL through the call
        time.sleep(1)  # a moment in: the watchdog thread is beating (on a loaded machine it starts late)
        hold_the_gil()
        time.sleep(0.5)  # the program goes on; the watchdog gets its turn back
        """)], logdir=logdir, env=STALL)
    text = res.text()
    assert res.returncode == 0
    timer_dump = text[text.index("Timeout (0:00:01.5"):]  # faulthandler's GIL-free timer
    assert 'line 4 in hold_the_gil' in timer_dump
    assert re.search(r"stall: the GIL was held for [34] s", text), text


def test_busy_process_is_called_busy_and_periodic_dumps_come_anyway(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import time, earlylog
        for i in range(8):
            earlylog.log("step %d" % i)   # activity: no stall while it logs
            time.sleep(0.25)
        def crunch():
            end = time.monotonic() + 2
            while time.monotonic() < end:
                sum(range(1000))
        crunch()
        """)], logdir=logdir, env={**STALL, "EARLYLOG_DUMP_EVERY": "1"})
    records = res.records()
    kinds = [r["kind"] for r in records]
    first_stall = kinds.index("stall")
    assert "dump" in kinds[:first_stall]
    assert any(r["msg"].startswith("every 1 s") for r in records[:first_stall] if r["kind"] == "dump")
    assert "busy: CPU time still rising" in records[first_stall]["msg"]
    assert "in crunch" in res.text()


def test_sigterm_to_a_process_stuck_in_c_exits_minus_15_at_once_with_its_stack(tmp_path, logdir):
    path = script(tmp_path, """
        import re
        print("ready", flush=True)
        def backtrack():
            re.match(r"(a+)+$", "a" * 40 + "b")  # hours in C, never letting go of the GIL
        backtrack()
        """, "stuck.py")
    proc = subprocess.Popen([PYTHON, path], env=_env(logdir), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)
        sent = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=5) == -signal.SIGTERM
        assert time.monotonic() - sent < 1
    finally:
        proc.kill()
        proc.wait()
    text = "".join(read(p) for p in log_files(logdir))
    assert "SIGTERM write every thread's stack here" in text  # the log's own legend for the bare block
    bare = text[text.index("Current thread 0x"):]
    assert not [line for line in text.splitlines() if line.startswith(("Fatal Python error", "Timeout ("))]
    assert "in backtrack" in bare


def test_a_programs_own_sigterm_handler_still_runs(tmp_path, logdir):
    path = script(tmp_path, """
        import signal, sys, time
        def cleanup(signum, frame):
            print("cleaned up", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, cleanup)
        print("ready", flush=True)
        time.sleep(30)
        """)
    proc = subprocess.Popen([PYTHON, path], env=_env(logdir), stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)  # out of print(): a handler that prints inside print() is a RuntimeError anyway
        proc.terminate()
        assert proc.wait(timeout=10) == 3
        assert proc.stdout.read() == b"cleaned up\n"
    finally:
        proc.kill()
        proc.wait()


def test_segfault_under_a_launcher_discarding_stderr_names_the_function(tmp_path, logdir):
    path = script(tmp_path, """
        import faulthandler
        def crash_here():
            faulthandler._sigsegv()
        crash_here()
        """)
    status = subprocess.run([PYTHON, path], env=_env(logdir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=TIMEOUT).returncode
    assert status == -signal.SIGSEGV
    text = "".join(read(p) for p in log_files(logdir))
    crash = text[text.index("Fatal Python error: Segmentation fault"):]
    assert "Current thread 0x" in crash and "line 4 in crash_here" in crash


def test_without_a_log_file_a_crash_goes_to_stderr(tmp_path):
    res = run_python("import faulthandler; faulthandler._sigsegv()",
                     env={"EARLYLOG_DIR": "/proc/earlylog-nowhere", "TMPDIR": "/proc/earlylog-nowhere"})
    assert res.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in res.err


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("node"), reason="needs node")
def test_child_of_a_node_parent_that_never_reads_stdout_is_blocked_on_a_full_pipe(tmp_path, logdir):
    flood = script(tmp_path, """
        import sys
        def flood():
            for i in range(200000):
                sys.stdout.write("line %d %s\\n" % (i, "x" * 80))
        flood()
        """, "flood.py")
    parent = script(tmp_path, """
        const { spawn } = require('child_process');
        // stdio 'pipe' gives the child a socketpair; nobody ever reads child.stdout
        const child = spawn(process.argv[2], [process.argv[3]], { stdio: ['ignore', 'pipe', 'ignore'] });
        setTimeout(() => { child.kill(); process.exit(0); }, 4000);
        """, "gui.js")
    subprocess.run(["node", parent, PYTHON, flood], env=_env(logdir), timeout=TIMEOUT, check=True)
    text = "".join(read(p) for p in log_files(logdir))
    dump = text[text.index("dump: stall after"):]
    assert "blocked: writing to fd 1 (stdout), a Unix socket that is full" in dump
    assert "the parent is not reading this process's stdout" in dump and "in flood" in dump


def test_fork_pool_child_that_hangs_logs_its_own_stack_and_parent_warns(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import multiprocessing as mp, threading
        def stuck_in_worker(x):
            threading.Event().wait(30)
        if __name__ == "__main__":
            threading.Thread(target=threading.Event().wait, args=(5,), name="prefetcher", daemon=True).start()
            with mp.get_context("fork").Pool(1) as pool:
                pool.map_async(stuck_in_worker, [1]).wait(3)
        """, "pool.py")], logdir=logdir, env=STALL)
    assert res.returncode == 0
    parent = [read(p) for p in res.files() if "-pool" in os.path.basename(p)][0]
    child = [read(p) for p in res.files() if "-fork" in os.path.basename(p)][0]
    assert "fork: fork() while 1 other thread runs (prefetcher)" in parent
    dump = child[child.index("dump: stall after"):]
    assert "in stuck_in_worker" in dump


def test_earlylog_dump_asks_live_processes_and_shows_asyncio_tasks(tmp_path, logdir):
    path = script(tmp_path, """
        import asyncio
        async def fetch_shard():
            await asyncio.Event().wait()
        async def worker():
            await fetch_shard()
        async def main():
            task = asyncio.ensure_future(worker())
            print("ready", flush=True)
            await asyncio.sleep(20)
        asyncio.run(main())
        """, "serve.py")
    proc = subprocess.Popen([PYTHON, path], env=_env(logdir, EARLYLOG_STALL=0), stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        cli = subprocess.run([PYTHON, "-m", "earlylog", "dump", str(logdir)], env=clean_env(),
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert cli.returncode == 0, cli.stderr
        assert "pid %d: stacks written to" % proc.pid in cli.stdout
        text = "".join(read(p) for p in log_files(logdir))
        dump = text[text.index("dump: on request"):]
        assert "waiting for I/O in select/poll" in dump
        assert "1 pending task" in dump or "2 pending tasks" in dump
        assert "in worker > " in dump and "in fetch_shard > " in dump and "awaiting a Future" in dump
        assert proc.poll() is None  # asking did not disturb it
        finished = subprocess.run([PYTHON, "-m", "earlylog", "dump", "1"], env=clean_env(),
                                  capture_output=True, text=True, timeout=TIMEOUT)
        assert finished.returncode == 2 and "not a live earlylog process" in finished.stderr
    finally:
        proc.kill()
        proc.wait()


def test_bad_stall_value_warns_once_and_uses_the_default(logdir):
    res = run_python("print('hi')", logdir=logdir, env={"EARLYLOG_STALL": "abc"})
    assert res.returncode == 0 and res.out == "hi\n"
    warnings = [r for r in res.records() if r["kind"] == "WARNING"]
    assert len(warnings) == 1 and "EARLYLOG_STALL='abc'" in warnings[0]["msg"]
    assert "stacks after 30 s of silence" in res.text()


def test_a_programs_own_faulthandler_timer_is_left_alone(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import faulthandler, sys, time
        faulthandler.dump_traceback_later(1.5, file=sys.stdout)
        def my_slow_step():
            time.sleep(2.5)
        my_slow_step()
        """)], logdir=logdir, env=STALL)
    assert res.returncode == 0
    assert "Timeout (0:00:01.500000)!" in res.out and "in my_slow_step" in res.out  # still theirs
    assert "the program arms faulthandler's timer itself" in res.text()


@pytest.mark.skipif(not (shutil.which("gdb") or shutil.which("py-spy")), reason="needs gdb or py-spy")
def test_first_stall_dump_adds_native_stacks_once(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import threading, time
        from earlylog.runtime import state
        def park():
            # until the slow tool (gdb loads symbols) has written its lines, at most 20 s
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and "native stacks" not in open(state.logger.path).read():
                threading.Event().wait(0.5)
            threading.Event().wait(1.5)
        park()
        """)], logdir=logdir, env={**STALL, "EARLYLOG_NATIVE": "1"})
    native = [r for r in res.records() if r["kind"] == "dump" and "native stacks" in r["msg"]]
    assert res.returncode == 0 and len(native) == 1
    msg = native[0]["msg"]
    assert msg.startswith("native stacks from") or "ptrace may be forbidden" in msg


def test_a_program_that_never_imports_threading_still_exits(tmp_path, logdir):
    # Our threads start without threading; if one of them imported it (subprocess does), that
    # thread would become threading's main thread and the real one would wait for it at exit.
    res = run_python([script(tmp_path, """
        import sys, time
        time.sleep(3)
        print("threading" in sys.modules, "subprocess" in sys.modules)
        """)], logdir=logdir, env={**STALL, "EARLYLOG_NATIVE": "1"}, timeout=30)
    assert res.returncode == 0 and res.out == "False False\n", res.err
    text = res.text()
    assert "thread MainThread (tid" in text and "sleep(3)" in text and "exit: status 0" in text


WORKER = """
    import time
    for step in range(12):
        print("step", step, flush=True)
        time.sleep(0.25)
    """
LAUNCHERS = {
    "waits": """
        import os, subprocess, sys
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "worker.py")])
        """,
    "polls": """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "worker.py")])
        while child.poll() is None:  # a monitor loop, as torchrun's launcher has
            time.sleep(0.3)
        """,
}


def _on_a_terminal(args, env):
    """Run args with stdin, stdout and stderr on a new pseudo-terminal: (exit status, its text)."""
    import pty
    import select
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has ended
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
    return proc.wait(TIMEOUT), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("how", sorted(LAUNCHERS))
def test_a_launcher_on_a_terminal_leaves_its_working_childs_silence_to_the_childs_own_lines(tmp_path, logdir, how):
    # torchrun in a terminal: the ranks print; the launcher, silent while it waits, must not print
    # a stall line between their output at every 1, 2, 4 ... seconds of a healthy run.
    script(tmp_path, WORKER, "worker.py")
    status, shown = _on_a_terminal([PYTHON, script(tmp_path, LAUNCHERS[how], "launch.py")], _env(logdir))
    assert status == 0 and "step 11" in shown, shown
    launcher = [read(p) for p in log_files(logdir) if "-launch" in os.path.basename(p)][0]
    stalls = [line for line in launcher.splitlines() if " stall: silent for" in line]
    assert stalls and all("; waiting for child pid " in line and "(python worker.py); its own log says whether "
                          "it is stuck; stacks in " in line for line in stalls), launcher
    assert " stall: " not in shown, shown


def test_a_launcher_whose_child_cannot_print_its_own_stall_lines_relays_the_stuck_child(tmp_path, logdir):
    # Its stderr is a pipe (a GUI reads it): a child of an earlylog process then keeps its console
    # lines to its log. The launcher, a supervisor, prints nothing while its child is not stuck (a
    # healthy run's silent launcher is no alarm, issue 34); once the child's own log says it is
    # stuck, the launcher's line relays it, and it is the only one shown.
    script(tmp_path, "import time\ntime.sleep(3.5)\n", "worker.py")
    res = run_python([script(tmp_path, LAUNCHERS["waits"], "launch.py")], logdir=logdir,
                     env={**STALL, "EARLYLOG_CONSOLE": "stderr"})
    assert res.returncode == 0
    shown = [line for line in res.err.splitlines() if " stall: " in line]
    assert len(shown) == 1 and "launch stall: silent for 2 s; waiting for child pid " in shown[0], res.err
    assert re.search(r"\(python worker.py\); its own log says whether it is stuck; stuck: pid \d+ \(worker\): "
                     r"blocked: no CPU used", shown[0]), shown[0]
    launcher = [read(p) for p in log_files(logdir) if "-launch" in os.path.basename(p)][0]
    assert " stall: silent for 1 s; waiting for child pid " in launcher  # told in its log at 1 s


def test_a_launcher_whose_silent_child_works_keeps_its_line_off_the_console(tmp_path, logdir):
    # The same pipe, a child that works without printing and ends well: nothing for a person to see.
    script(tmp_path, WORKER.replace("range(12)", "range(6)").replace("print(", "(lambda *a, **k: None)("),
           "worker.py")
    res = run_python([script(tmp_path, LAUNCHERS["waits"], "launch.py")], logdir=logdir,
                     env={**STALL, "EARLYLOG_CONSOLE": "stderr"})
    assert res.returncode == 0 and " stall: " not in res.err, res.err
