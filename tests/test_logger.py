"""The forced-flush logger as a user meets it: live output through pipes, a console nobody reads,
consoles that cannot encode, the tee of the program's own output, and the exit/exception records."""
import glob
import signal
import os
import socket
import subprocess
import threading

import pytest

from support import PYTHON, TIMEOUT, clean_env, log_files, read, run_python, script, wait_log


def readline_within(stream, seconds):
    """One line from a pipe, or None if none arrives in time (the child keeps running)."""
    got = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    return got[0] if got else None


def test_print_without_flush_reaches_the_parent_while_the_child_blocks(logdir):
    code = "import sys, time\nprint('ready')\nprint('to stderr', file=sys.stderr)\ntime.sleep(600)\n"
    child = subprocess.Popen([PYTHON, "-c", code], env=clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert readline_within(child.stdout, TIMEOUT) == b"ready\n"
        text = wait_log(logdir, "err: to stderr")
        assert "out: ready" in text
    finally:
        child.kill()
        child.communicate()


@pytest.mark.parametrize("channel", ["pipe", "socketpair"])  # Node.js gives children socketpairs
def test_a_console_nobody_reads_never_blocks_logging(logdir, channel):
    # 3000 marks of 200 characters: far more than a pipe or a socket buffer holds.
    code = "import earlylog\nfor i in range(3000):\n    earlylog.log('mark %d ' % i + 'x' * 200)\n"
    ours, theirs = socket.socketpair() if channel == "socketpair" else (None, subprocess.PIPE)
    child = subprocess.Popen([PYTHON, "-c", code], env=clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir,
                                                                EARLYLOG_CONSOLE="stdout"),
                             stdin=subprocess.DEVNULL, stdout=theirs, stderr=theirs)
    try:
        assert child.wait(timeout=TIMEOUT) == 0
    finally:
        child.kill()
        child.communicate()
        for end in (ours, theirs):
            if end not in (None, subprocess.PIPE):
                end.close()
    text = "".join(read(p) for p in log_files(logdir))
    assert text.count("mark: mark ") == 3000
    assert "mark: mark 2999 " in text
    assert "console lines dropped" in [l for l in text.splitlines() if "exit: status 0" in l][0]


def test_ascii_console_with_non_ascii_cwd_and_argv(tmp_path, logdir):
    cwd = tmp_path / "données-数据"
    cwd.mkdir()
    path = script(cwd, "import sys\nprint('args', len(sys.argv))\nsys.exit(3)\n")
    proc = subprocess.run([PYTHON, path, "--name=日本語", b"raw-\xff"], cwd=str(cwd), capture_output=True,
                          timeout=TIMEOUT, env=clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir,
                                                         PYTHONIOENCODING="ascii", LANG="C", LC_ALL="C",
                                                         CUDA_HOME=os.fsdecode(b"/opt/cuda-\xfe")))
    assert proc.returncode == 3
    assert proc.stdout == b"args 3\n"
    assert b"Traceback" not in proc.stderr
    text = "".join(read(p) for p in log_files(logdir))
    assert "données-数据" in text and "--name=日本語" in text
    assert "raw-\\udcff" in text and "| CUDA_HOME=/opt/cuda-\\udcfe" in text  # non-UTF-8 bytes shown
    assert "\\u65e5\\u672c\\u8a9e" in proc.stderr.decode("ascii")  # the console got what it can show
    assert "WARNING: the console encoding ascii cannot show non-ASCII text" in text


@pytest.mark.parametrize("code, status, how", [
    ("import sys\nsys.exit(4)\n", 4, "sys.exit(4) in <module> at script.py:2"),
    ("import argparse\nargparse.ArgumentParser().parse_args(['--nope'])\n", 2, ", from <module> at script.py:2"),
    ("def main():\n    return 3\nraise SystemExit(main())\n", 3, "raise SystemExit"),
    ("exit(5)\n", 5, "exit(5) in <module> at script.py:1"),
    ("print('done')\n", 0, "end of program"),
    ("import os\nos._exit(6)\n", 6, "os._exit(6) in <module> at script.py:2"),
])
def test_the_exit_record_has_the_real_status(tmp_path, logdir, code, status, how):
    result = run_python([script(tmp_path, code)], logdir=logdir)
    assert result.returncode == status
    exits = [r["msg"] for r in result.records() if r["kind"] == "exit"]
    assert len(exits) == 1 and exits[0].startswith("status %d after " % status) and how in exits[0]


def test_uncaught_exceptions_are_logged_and_the_original_hooks_still_run(tmp_path, logdir):
    code = """
        import threading
        class Leaky:
            def __del__(self):
                raise ValueError("in __del__")
        Leaky()
        t = threading.Thread(target=lambda: {}["missing key"], name="worker")
        t.start(); t.join()
        raise RuntimeError("the main thread gave up")
    """
    result = run_python([script(tmp_path, code)], logdir=logdir)
    assert result.returncode == 1
    # The interpreter's own hooks still printed what they always print.
    assert "Exception ignored in" in result.err and "Exception in thread worker" in result.err
    assert "RuntimeError: the main thread gave up" in result.err
    text = result.text()
    assert "exception: unraisable: Exception ignored in" in text and "ValueError: in __del__" in text
    assert "exception: in thread worker: KeyError: 'missing key'" in text
    assert "exception: RuntimeError: the main thread gave up" in text
    assert "| Traceback (most recent call last):" in text
    assert "exit: status 1 after" in text and "uncaught RuntimeError" in text


def test_multiprocessing_fork_child_records_its_os_exit_status(tmp_path, logdir):
    code = """
        import multiprocessing, sys
        def work():
            sys.exit(7)
        if __name__ == "__main__":
            p = multiprocessing.get_context("fork").Process(target=work)
            p.start(); p.join()
            print("child exit code", p.exitcode)
    """
    result = run_python([script(tmp_path, code)], logdir=logdir)
    assert result.returncode == 0 and "child exit code 7" in result.out
    exits = [(r["tag"], r["msg"]) for r in result.records() if r["kind"] == "exit"]
    assert any(tag.startswith("fork") and msg.startswith("status 7 ") and "os._exit" in msg for tag, msg in exits)
    assert any(not tag.startswith("fork") and msg.startswith("status 0 ") for tag, msg in exits)


@pytest.mark.parametrize("unbuffered", [None, "1"])  # PYTHONUNBUFFERED=1: print() writes its "\n" alone
def test_the_tee_survives_replaced_stdout_logging_handlers_and_odd_lines(tmp_path, logdir, unbuffered):
    code = r"""
        import io, logging, sys
        assert isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.fileno() == 1
        logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
        logging.warning("from a logging handler")
        saved, sys.stdout = sys.stdout, io.StringIO()
        print("captured by the program")
        sys.stdout = sys.__stdout__
        print("after the redirect")
        sys.stdout.buffer.write(b"binary line\n")
        print("x" * 20000)
        print("step 1\rstep 2\rstep 3")
        print("begun", end="")
        sys.stdout.write("")
        print(", then ended")
        print("caf\u00e9", end="")
        print(" au lait")
        print("drawn\r", end="")
        print("redrawn")
        print("no newline at the end", end="")
    """
    result = run_python([script(tmp_path, code)], logdir=logdir, env={"PYTHONUNBUFFERED": unbuffered} if unbuffered
                        else None)
    assert result.returncode == 0, result.err
    assert result.out.startswith("WARNING from a logging handler\nafter the redirect\nbinary line\n")
    outs = [r["msg"] for r in result.records() if r["kind"] == "out"]
    assert outs[:3] == ["WARNING from a logging handler", "after the redirect", "binary line"]
    assert outs[3].startswith("xxxx") and "more characters cut" in outs[3]
    assert outs[4:] == ["step 3", "begun, then ended", "caf\u00e9 au lait", "redrawn", "no newline at the end"]
    assert "captured by the program" not in result.text()


def test_live_and_tee_can_be_turned_off(tmp_path, logdir):
    code = "import sys\nprint(sys.stdout.line_buffering, type(sys.stdout.buffer).__name__)\n"
    result = run_python(code, logdir=logdir, env={"EARLYLOG_LIVE": "0", "EARLYLOG_TEE": "0"})
    assert result.out == "False BufferedWriter\n"
    assert not [r for r in result.records() if r["kind"] == "out"]


def _python312():
    found = sorted(glob.glob("/root/.pyenv/versions/3.1[2-9].*/bin/python3.1[2-9]"))
    return found[0] if found else None


@pytest.mark.skipif(_python312() is None, reason="needs a Python 3.12+ interpreter")
def test_python312_sees_a_bare_raise_systemexit_in_dash_c(logdir):
    from earlylog.cli import launch
    env = launch.variables({})
    result = run_python("raise SystemExit(9)", logdir=logdir, python=_python312(), env=env)
    assert result.returncode == 9
    exits = [r["msg"] for r in result.records() if r["kind"] == "exit"]
    assert exits and exits[0].startswith("status 9 ") and "raise SystemExit" in exits[0]


def test_sigint_keeps_keyboardinterrupt_and_its_exit_by_signal(tmp_path, logdir):
    code = script(tmp_path, """
        import sys, time
        def train_step():
            print("ready", flush=True)
            time.sleep(60)
        train_step()
    """)
    env = clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir, EARLYLOG_CONSOLE="off")
    for enabled in ("0", "1"):
        env["EARLYLOG"] = enabled
        child = subprocess.Popen([PYTHON, code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=TIMEOUT)
        # Python ends an uncaught KeyboardInterrupt by dying of SIGINT, with or without earlylog.
        assert child.returncode == -signal.SIGINT
        assert b"KeyboardInterrupt" in err
    text = wait_log(logdir, "exception: KeyboardInterrupt")
    assert "in train_step" in text
