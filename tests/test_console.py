"""Issue 38, quiet when healthy: a healthy run's console carries one earlylog line, the first
process's start line, whatever the number of epochs, ranks or workers; a hang, a crash and a failure
still reach it; EARLYLOG_CONSOLE=all shows every line as before. And the log file has a bound
(EARLYLOG_MAX_LOG): past it the program's output keeps its start and its last part, earlylog's own
records are all there, and the report and `earlylog tail` say how much was left out."""
import os
import re
import subprocess

import pytest

from support import (PYTHON, TIMEOUT, clean_env, earlylog, free_port, log_files, read, report_json, script,
                     wait_for)

TRAIN = """
    import os, sys, threading, torch
    from torch.utils.data import DataLoader, Dataset


    class Data(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            if os.environ.get("JOB") == "hang" and i == 40:
                threading.Event().wait()  # a sample whose download never ends
            return torch.randn(8), torch.randn(1)


    if __name__ == "__main__":
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(int(sys.argv[1])):
            for x, y in DataLoader(Data(), batch_size=16, num_workers=2):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            print("epoch", epoch, flush=True)
        if os.environ.get("JOB") == "fail":
            raise SystemExit("no checkpoint written")
        if os.environ.get("JOB") == "crash":
            raise ValueError("bad shape")
"""


def _ours(data):
    return [line for line in data.decode("utf-8", "replace").splitlines() if line.startswith("[earlylog]")]


def _train(tmp_path, logdir, epochs, **env):
    return subprocess.run([PYTHON, script(tmp_path, TRAIN, "train.py"), str(epochs)], capture_output=True,
                          timeout=TIMEOUT * 2, env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **env))


@pytest.mark.parametrize("epochs", [1, 5])
def test_a_healthy_dataloader_training_leaves_one_console_line(tmp_path, logdir, epochs):
    res = _train(tmp_path, logdir, epochs)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    shown = _ours(res.stdout) + _ours(res.stderr)
    assert len(shown) == 1 and " start: pid " in shown[0], shown
    assert res.stdout.decode().count("epoch ") == epochs
    logged = "".join(read(f) for f in log_files(logdir))
    # The healthy run's work is all in the files: workers' phases and exits, the fork warning.
    assert logged.count("phase: begin DataLoader worker") == 2 * epochs
    assert re.search(r" fork: fork\(\) while ", logged) and " exit: status 0 " in logged


def test_a_healthy_torchrun_job_leaves_one_console_line(tmp_path, logdir):
    job = script(tmp_path, """
        import sys, time, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        for step in range(30):
            t = torch.ones(4)
            dist.all_reduce(t)
            time.sleep(0.1)
        # One write: torchrun runs its ranks with -u, where print() writes each piece on its own
        # and two ranks' lines interleave word by word, with earlylog or without.
        sys.stdout.write("rank %d sum %d\\n" % (dist.get_rank(), int(t[0])))
        dist.destroy_process_group()
        """, "job.py")
    res = subprocess.run([os.path.join(os.path.dirname(PYTHON), "torchrun"), "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()), job],
                         capture_output=True, timeout=TIMEOUT * 2,
                         env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    shown = _ours(res.stdout) + _ours(res.stderr)
    assert len(shown) == 1 and " torchrun start: pid " in shown[0], "\n".join(shown)
    assert sorted(re.findall(rb"rank \d sum 2", res.stdout)) == [b"rank 0 sum 2", b"rank 1 sum 2"]
    launcher = read(next(f for f in log_files(logdir) if "-torchrun" in f))
    # Told in its log, not on the console: at a stall after its ranks started (its first 1 s stall
    # may still see torchrun starting them, busy, on a loaded machine).
    assert re.search(r" stall: silent for \d+ s; waiting for children ", launcher), launcher[-3000:]


def test_a_silent_sleep_loop_is_waiting_at_every_stall_never_blocked(tmp_path, logdir):
    """A thread in a 0.2 s sleep loop runs five times a second. A stall's deadline woke the watchdog a
    few milliseconds after its last beat, and a thread compared over those milliseconds had not run:
    'blocked', on the console, at 2 of the 4 stalls of every run of this program (a healthy rank
    between two all_reduce calls, relayed by torchrun as stuck)."""
    program = script(tmp_path, """
        import time
        end = time.time() + 9
        while time.time() < end:
            time.sleep(0.2)
        """, "loop.py")
    res = subprocess.run([PYTHON, program], capture_output=True, timeout=TIMEOUT,
                         env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1))
    assert res.returncode == 0
    told = re.findall(r" stall: silent for (\d+) s; (\w+)", read(log_files(logdir)[0]))
    assert told == [("1", "waiting"), ("2", "waiting"), ("4", "waiting"), ("8", "waiting")], told
    assert len(_ours(res.stderr)) == 1, _ours(res.stderr)


@pytest.mark.parametrize("job, seen", [
    ("fail", r" exit: status 1 after [\d.]+ s; raise SystemExit\('no checkpoint written'\)"),
    ("crash", r" exception: ValueError: bad shape"),
])
def test_a_failure_and_a_crash_still_reach_the_console(tmp_path, logdir, job, seen):
    res = _train(tmp_path, logdir, 1, JOB=job)
    assert res.returncode == 1
    shown = _ours(res.stderr)
    assert re.search(seen, "\n".join(shown)), shown
    assert not [line for line in shown if " phase: " in line or " fork: " in line], shown


def test_a_hang_still_reaches_the_console(tmp_path, logdir):
    proc = subprocess.Popen([PYTHON, script(tmp_path, TRAIN, "train.py"), "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, JOB="hang"))
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 3)
    finally:
        os.killpg(proc.pid, 9)
        _out, err = proc.communicate(timeout=TIMEOUT)
    shown = _ours(err)
    assert [line for line in shown if " stall: " in line], shown


def test_console_all_shows_every_line_as_before(tmp_path, logdir):
    res = _train(tmp_path, logdir, 1, EARLYLOG_CONSOLE="all")
    assert res.returncode == 0
    shown = "\n".join(_ours(res.stderr))
    assert " phase: begin DataLoader worker" in shown and " fork: fork() while " in shown
    assert " exit: status 0 after " in shown


def test_a_log_past_its_bound_keeps_every_record_and_the_last_output(tmp_path, logdir):
    """The program prints ten times the bound: its output is unchanged, its log stays under the
    bound with the start, the records and the last lines, and the report and tail say what was left out."""
    program = script(tmp_path, """
        import sys
        from earlylog.phases import phase
        with phase("flood"):
            for i in range(100000):
                print("line %06d %s" % (i, "x" * 40))
        print("the end", flush=True)
        sys.exit(3)
        """, "flood.py")
    bound = 0.5  # MiB; the program prints about 5 MiB
    res = subprocess.run([PYTHON, program], capture_output=True, timeout=TIMEOUT,
                         env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_MAX_LOG=bound))
    assert res.returncode == 3
    lines = res.stdout.decode().splitlines()
    assert len(lines) == 100001 and lines[0].startswith("line 000000 ") and lines[-1] == "the end"
    [path] = log_files(logdir)
    assert os.path.getsize(path) < bound * 1048576
    text = read(path)
    for record in (" start: pid ", " phase: begin flood", " phase: end flood after ", " exit: status 3 after ",
                   " out: line 000000 ", " out: line 099999 ", " out: the end"):
        assert record in text, record
    note = re.search(r" note: output left out: (\d+) lines \([\d.]+ MiB\) of the program's output from .* on, "
                     r"past the log's bound \(EARLYLOG_MAX_LOG=0.5 MiB\); the (\d+) lines after them are kept", text)
    assert note and int(note.group(1)) > 80000, text[-2000:]
    rep = report_json(str(logdir))
    [d] = rep["processes"]
    assert d["state"] == "failed" and d["status"] == 3 and d["output_left_out"]["lines"] == int(note.group(1))
    assert "its log left out %s lines" % note.group(1) in earlylog("report", str(logdir)).stdout
    assert "note: output left out: " in earlylog("tail", str(logdir), "-n", "0").stdout
