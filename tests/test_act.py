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

from earlylog.grammar import records
from support import PYTHON, clean_env, free_port, kill_pid, log_files, read, report_json, run_python, script

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


NOISY_HANG = """
    import threading, time
    def telemetry():
        while True:
            print("telemetry: gpu 0%", flush=True)
            time.sleep(0.3)
    threading.Thread(target=telemetry, daemon=True).start()
    lock = threading.Lock()
    def read_index():
        with lock:
            with lock:
                pass
    read_index()
"""


def test_a_thread_stuck_while_another_prints_is_ended_and_announced_once(tmp_path, logdir):
    # The process never goes silent: its stall is the per-thread one (docs/watchdog.md#progress).
    env, out = alert_env(tmp_path, EARLYLOG_STALL_EXIT="3")
    res = run_python([script(tmp_path, NOISY_HANG, name="noisy.py")], logdir, env=env, timeout=30)
    assert res.returncode == 124, res.err
    assert res.out.count("telemetry: gpu 0%") >= 5
    rep = report_json(logdir)
    cause = next(c for c in rep["causes"] if c["kind"] == "stall-exit")
    assert "in read_index at noisy.py:11; earlylog ended it with exit status 124" in cause["text"], cause
    (alert,) = alerts(out)
    assert alert["function"] == "read_index" and "which it already holds" in alert["cause"], alert


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


# Rank 1 is stuck on the first attempt only, before the rendezvous rank 0 waits in; rank 0 says
# something first, so that rank 1 is the first one silent long enough.
FLAKY_JOB = """
    import os, threading, time
    import torch, torch.distributed as dist

    def read_index():
        threading.Event().wait()

    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    if os.environ["RANK"] == "1" and attempt == "0":
        read_index()
    if os.environ["RANK"] == "0" and attempt == "0":
        time.sleep(2)
        print("rank 0 ready", flush=True)
    # A rendezvous of its own per attempt: the agent's store keeps the first attempt's gloo
    # addresses, and a rank of the next one that reads them first fails to connect (a torch race).
    dist.init_process_group("gloo", init_method="file://%s/rdzv-%s" % (os.getcwd(), attempt),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    t = torch.ones(1)
    dist.all_reduce(t)
    print("attempt %s rank %d sum %d" % (attempt, dist.get_rank(), int(t.item())), flush=True)
    dist.destroy_process_group()
"""


def torchrun(tmp_path, logdir, timeout, **env):
    pytest.importorskip("torch")
    command = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=1",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               script(tmp_path, FLAKY_JOB, name="job.py")]
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=2, **env)
    proc = subprocess.Popen(command, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=str(tmp_path))
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(), err.decode()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        for path in log_files(logdir):  # torchrun starts each rank in a session of its own
            with open(path) as f:
                kill_pid(records.parse(f.readline())["pid"])
        proc.communicate()
        return None, "", ""


@pytest.mark.slow
def test_torchrun_restarts_a_rank_earlylog_ended(tmp_path, logdir):
    began = time.monotonic()
    sent = tmp_path / "alerts.jsonl"
    status, out, err = torchrun(tmp_path, logdir, 90, EARLYLOG_STALL_EXIT=10,
                                EARLYLOG_ON_STALL="cat >> %s; echo >> %s" % (sent, sent))
    took = time.monotonic() - began
    assert status == 0, err[-3000:]
    assert took < 50
    assert sorted(re.findall(r"attempt 1 rank \d sum 2", out)) == ["attempt 1 rank 0 sum 2", "attempt 1 rank 1 sum 2"]
    rep = report_json(logdir)
    cause = next(c for c in rep["causes"] if c["kind"] == "stall-exit")
    assert re.search(r"^rank 1 \(torchrun attempt 0\) was stuck for 1\d s in read_index at job.py:6; earlylog "
                     r"ended it with exit status 124 \(EARLYLOG_STALL_EXIT=10\) so that its launcher would "
                     r"restart it(; torchrun stopped rank 0 \(waiting in init_process_group\) to start the group again)?; "
                     r"torchrun's next attempt \(restart 1\) ran: ranks 0, 1 exited 0$", cause["text"])
    # ON_STALL: once per stuck process (rank 0 waits for rank 1 in the rendezvous: stuck too), never the agent.
    sent = alerts(sent)
    assert len({a["pid"] for a in sent}) == len(sent)
    assert all(a["rank"] is not None for a in sent)
    (first,) = [a for a in sent if a["rank"] == 1 and a["restart"] == 0]
    assert first["function"] == "read_index" and first["local_rank"] == 1 and "job" in first
    attempts = {(d["rank"], d["restart"]): d["state"] for d in rep["processes"] if d["rank"] is not None}
    assert attempts[(1, 0)] == "failed" and attempts[(0, 1)] == attempts[(1, 1)] == "exited"
    # The same story in `earlylog tail` (the rank's own line) and on the HTML page.
    tail = subprocess.run([PYTHON, "-m", "earlylog", "tail", "-n", "0", str(logdir)], capture_output=True,
                          text=True, env=clean_env(), timeout=60).stdout
    assert re.search(r"rank1 earlylog: EARLYLOG_STALL_EXIT=10: ending this process, stuck for 1\d s in read_index", tail)
    page = tmp_path / "run.html"
    subprocess.run([PYTHON, "-m", "earlylog", "report", "--html", str(page), str(logdir)], env=clean_env(),
                   capture_output=True, timeout=60)
    assert "earlylog ended it with exit status 124" in page.read_text()


# Issue 37: the ranks of a usual job (env:// rendezvous, torchrun's own store): rank 1 is stuck on a
# lock it holds in the first attempt only, rank 0 waits for it in an all_reduce.
LOCKED_JOB = """
    import os, threading
    import torch, torch.distributed as dist

    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    lock = threading.Lock()
    if dist.get_rank() == 1 and attempt == "0":
        lock.acquire()
        with lock:
            pass
    dist.all_reduce(t)
    print("attempt %s rank %d sum %d" % (attempt, dist.get_rank(), int(t.item())), flush=True)
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_stuck_rank_alone_is_ended_and_the_job_completes_on_its_restart(tmp_path, logdir):
    """Only the stuck rank is ended: rank 0, waiting for it in a collective, is left to torchrun, which
    stops it and starts the group again; the next attempt connects (earlylog took the ended attempt's
    addresses out of torchrun's store: PyTorch's restart race, docs/acting.md)."""
    pytest.importorskip("torch")
    command = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=1",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               script(tmp_path, LOCKED_JOB, name="job.py")]
    proc = subprocess.run(command, env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=2,
                                                 EARLYLOG_STALL_EXIT=6),
                          capture_output=True, timeout=150, cwd=str(tmp_path), text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(re.findall(r"attempt 1 rank \d sum 4", proc.stdout)) == ["attempt 1 rank 0 sum 4",
                                                                         "attempt 1 rank 1 sum 4"]
    texts = {os.path.basename(f): read(f) for f in log_files(logdir)}
    ended = [name for name, text in texts.items() if "ended by earlylog: stuck for" in text]
    assert len(ended) == 1 and "-rank1" in ended[0], sorted(texts)
    waited = [text for name, text in texts.items() if "-rank0" in name and "not acting on this stall: waiting in a "
              "collective for rank 1" in text]
    assert waited, "rank 0 was left to torchrun"
    assert "process-group address keys of this attempt out of torchrun's store" in texts[ended[0]]


@pytest.mark.slow
def test_torchrun_without_stall_exit_hangs_as_before(tmp_path, logdir):
    status, out, _err = torchrun(tmp_path, logdir, 25)
    assert status is None, "the job should still hang"
    assert "attempt 1" not in out


def test_watch_shows_each_process_and_runs_on_stall_once(tmp_path, logdir):
    alert = tmp_path / "alert.jsonl"
    proc = subprocess.Popen([PYTHON, script(tmp_path, HANG, name="hang.py")], start_new_session=True,
                            env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        try:
            watched = subprocess.run([PYTHON, "-m", "earlylog", "watch", str(logdir), "--every", "0.5",
                                      "--on-stall", "cat >> %s; echo >> %s" % (alert, alert)],
                                     capture_output=True, text=True, env=clean_env(), timeout=6).stdout
        except subprocess.TimeoutExpired as exc:  # it runs until stopped
            watched = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    # Piped: plain lines, one when a process's state or place changes, not one per look.
    stalled = [x for x in watched.splitlines() if re.search(r"pid %d \(hang\) +stalled +read_index at hang.py:4" % proc.pid, x)]
    assert len(stalled) == 1, watched
    assert "\x1b[" not in watched
    (sent,) = alerts(alert)
    assert sent["pid"] == proc.pid and sent["function"] == "read_index"
