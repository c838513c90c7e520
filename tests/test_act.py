"""Issue 21: acting on a hang, only when asked. EARLYLOG_STALL_EXIT ends a stuck process with
status 124 so that its launcher restarts it; EARLYLOG_ON_STALL runs a command once per stall with
the stall as JSON. Neither acts on an idle, busy, waiting or interactive process."""
import json
import os
import pty
import re
import subprocess
import textwrap
import time

import pytest

from support import PYTHON, clean_env, free_port, read, report_json, run_python, script

HANG = """
    import threading
    def read_index():
        threading.Event().wait()
    print("started", flush=True)
    read_index()
"""
ACT = {"EARLYLOG_STALL": "1", "EARLYLOG_STALL_EXIT": "2"}


def alert_env(tmp_path, **extra):
    """ACT plus an ON_STALL command that appends its stdin to a file."""
    out = tmp_path / "alerts.jsonl"
    env = dict(ACT, EARLYLOG_ON_STALL="cat >> %s; echo >> %s" % (out, out))
    env.update(extra)
    return env, out


def alerts(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_stall_exit_ends_a_stuck_process_and_says_why(tmp_path, logdir):
    env, out = alert_env(tmp_path, EARLYLOG_STALL_EXIT="3")
    began = time.monotonic()
    res = run_python([script(tmp_path, HANG, name="hang.py")], logdir, env=env, timeout=30)
    assert res.returncode == 124, res.err
    assert time.monotonic() - began < 15
    assert "started" in res.out
    # The console says why the process ended, once.
    assert res.err.count("EARLYLOG_STALL_EXIT=3: ending this process, stuck for 3 s in read_index at hang.py:4") == 1
    text = res.text()
    assert "exit: status 124 after" in text and "ended by earlylog" in text
    rep = report_json(logdir)
    (d,) = rep["processes"]
    assert d["state"] == "failed" and d["status"] == 124
    cause = next(c for c in rep["causes"] if c["kind"] == "stall-exit")
    assert "was stuck for 3 s in read_index at hang.py:4; earlylog ended it with exit status 124" in cause["text"]
    # ON_STALL ran once for the episode (stall dumps came at 1 and 2 s), with the JSON the issue asks.
    (alert,) = alerts(out)
    assert alert["pid"] == d["pid"] and alert["function"] == "read_index" and alert["line"] == 4
    assert alert["file"].endswith("hang.py") and alert["log"] == os.path.join(logdir, d["files"][0])
    assert "hang.py" in alert["argv"] and alert["host"] and alert["thread"] == "MainThread"
    assert "read_index at hang.py:4" in alert["cause"] and alert["seconds"] >= 1
    assert {"rank", "local_rank", "job", "next"} <= set(alert)


def test_on_stall_alone_announces_once_and_never_ends(tmp_path, logdir):
    env, out = alert_env(tmp_path, EARLYLOG_STALL_EXIT="0")
    code = textwrap.dedent(HANG).replace("\nread_index()", "\nthreading.Thread(target=read_index, daemon=True).start()") \
        + "threading.Event().wait(5)\nprint('done', flush=True)\n"
    res = run_python([script(tmp_path, code, name="slow.py")], logdir, env=env, timeout=30)
    assert res.returncode == 0 and "done" in res.out, res.err
    (alert,) = alerts(out)  # dumps at 1, 2 and 4 s: one command
    assert alert["pid"] and alert["where"]
    assert "ended by earlylog" not in res.text()


def test_a_bad_value_is_one_warning_and_off(tmp_path, logdir):
    res = run_python("import time; time.sleep(3); print('ok')", logdir,
                     env={"EARLYLOG_STALL": "1", "EARLYLOG_STALL_EXIT": "soon"}, timeout=30)
    assert res.returncode == 0 and res.out == "ok\n"
    assert res.err.count("EARLYLOG_STALL_EXIT='soon' is not a number of seconds") == 1


def test_a_parent_waiting_for_its_child_lives_to_see_it_end(tmp_path, logdir):
    child = script(tmp_path, HANG, name="hang.py")
    parent = script(tmp_path, """
        import subprocess, sys
        status = subprocess.call([sys.executable, %r])
        print("child ended with", status, flush=True)
    """ % child, name="parent.py")
    env, out = alert_env(tmp_path)
    res = run_python([parent], logdir, env=env, timeout=40)
    assert res.returncode == 0, res.err
    assert "child ended with 124" in res.out
    assert [a["function"] for a in alerts(out)] == ["read_index"]  # the child's alert only


# Nothing is ended or announced for a process that is not stuck: each ends on its own, with status 0.
NOT_STUCK = {
    "idle-server": """
        import socketserver, threading
        server = socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)
        threading.Timer(6, server.shutdown).start()
        server.serve_forever()
    """,
    "busy-loop": """
        import time
        end = time.time() + 6
        while time.time() < end:
            sum(range(10000))
    """,
    "sleeping-poll-loop": """
        import os, time
        for _ in range(30):
            if os.path.exists("/nonexistent/flag"):
                break
            time.sleep(0.2)
    """,
    "slow-first-step": """
        import torch
        a = torch.randn(300, 300)
        end = __import__("time").time() + 6
        while __import__("time").time() < end:  # one long first step: CPU-bound, silent
            a = torch.tanh(a @ a)
        print("step 1 done", flush=True)
    """,
}


@pytest.mark.parametrize("kind", sorted(NOT_STUCK))
def test_nothing_is_ended_or_announced_when_not_stuck(tmp_path, logdir, kind):
    if kind == "slow-first-step":
        pytest.importorskip("torch")
    env, out = alert_env(tmp_path)
    res = run_python([script(tmp_path, NOT_STUCK[kind], name="%s.py" % kind.replace("-", "_"))], logdir,
                     env=env, timeout=60)
    assert res.returncode == 0, res.err[-2000:]
    assert alerts(out) == []
    assert "ending this process" not in res.err and "ended by earlylog" not in res.text()
    assert "stall:" in res.text()  # it was silent long enough to be judged


def test_a_person_at_a_terminal_is_never_ended(tmp_path, logdir):
    env, out = alert_env(tmp_path)
    master, slave = pty.openpty()
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **env)
    proc = subprocess.Popen([PYTHON, "-c", "name = input('name? '); print('hello', name)"], env=full,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        time.sleep(6)
        assert proc.poll() is None, "ended while waiting for its user"
        os.write(master, b"ada\n")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        seen = b""
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            seen += data
        os.close(master)
    assert b"hello ada" in seen
    assert alerts(out) == []
