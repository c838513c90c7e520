"""Stuck while noisy: a thread that stopped making progress, an asyncio task, or a training loop
with no step, gets its stall line, dump and cause even while other threads print the whole time (a
telemetry thread, a progress bar's refresh thread, a heartbeat task); healthy programs beside a
chatty thread get none (tests/test_progress_healthy.py). Real programs, read back with `earlylog
report`."""
import re
import signal
import subprocess
import time

import pytest

from support import (PYTHON, TIMEOUT, clean_env, earlylog, kill_tree, log_files, python_3, read, report_json,
                     run_python, script, wait_for)

STALL = 1
# A thread that prints a line every 0.3 s all the time the program runs.
CHATTY = """
    import sys, threading, time
    def telemetry():
        n = 0
        while True:
            n += 1
            print("telemetry: step time 0.3 s, gpu util 0%%, line %d" % n, flush=True)
            time.sleep(0.3)
    threading.Thread(target=telemetry, name="telemetry", daemon=True).start()
    """


def start(path, logdir, python=PYTHON, **env):
    """A real program with the console on (its stderr kept), in its own session."""
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=STALL, EARLYLOG_NATIVE=0, **env)
    return subprocess.Popen([python, path], env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def stall_lines(logdir):
    return [line for f in log_files(logdir) for line in read(f).splitlines() if " stall: " in line]


def stuck_report(logdir, proc, dumps=1):
    """The JSON and text reports once `dumps` stall dumps are written while the program prints,
    then again after the whole tree is killed with SIGKILL (the story must stay)."""
    began = time.monotonic()
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= dumps, timeout=30)
        took = time.monotonic() - began
        live = report_json(logdir), earlylog("report", logdir)
    finally:
        kill_tree(proc)
    return live, report_json(logdir), took


def flat(text):
    return " ".join(text.split())


LOCKED = CHATTY + """
    lock = threading.Lock()
    def prefetch():
        lock.acquire()
        threading.Event().wait()
    threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
    time.sleep(0.2)
    def load_shards():
        with lock:
            print("loaded")
    load_shards()
    """


def test_a_main_thread_stuck_on_a_lock_while_telemetry_prints_gets_its_dump_and_the_lock_cause(tmp_path, logdir):
    proc = start(script(tmp_path, LOCKED, "train.py"), logdir)
    (rep, res), after, took = stuck_report(logdir, proc)
    assert took < 10 * STALL + 8  # a few stall periods after the start (the interpreter's start-up included)
    line = stall_lines(logdir)[0]
    assert "stall: thread MainThread made no progress for" in line and "while other threads kept printing" in line
    assert "waiting for lock lock at train.py:18 in load_shards" in line
    cause = next(c for c in rep["causes"] if c["kind"] == "lock")
    assert "waits for lock `lock` in load_shards at train.py:18" in flat(cause["text"])
    assert "thread prefetch holds it" in flat(cause["text"]) and "prefetch at train.py:13" in flat(cause["text"])
    assert "release" in cause["next"]
    (p,) = rep["processes"]
    assert p["state"] == "stalled" and "while other threads kept printing" in p["summary"]
    assert "load_shards at train.py:18" in p["summary"]
    assert flat(cause["text"]) in flat(res.stdout)
    # Killed while stuck: not "vanished" alone; the stall and its cause stay.
    (p,) = after["processes"]
    assert "it had stalled" in p["summary"] and "load_shards at train.py:18" in p["summary"]
    assert any(c["kind"] == "lock" for c in after["causes"])
    # The stall line reached the console, among the telemetry lines.
    err = proc.stderr.read().decode("utf-8", "replace")
    assert "stall: thread MainThread made no progress" in err


@pytest.mark.parametrize("minor", [9, 13])
def test_the_stuck_thread_is_told_on_other_pythons(tmp_path, logdir, minor):
    """Frames, last instructions and lock waits differ by version; the rule must not."""
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    proc = start(script(tmp_path, LOCKED, "train.py"), logdir, python=exe,
                 PYTHONPATH=launch.variables({})["PYTHONPATH"])
    (rep, _res), _after, _took = stuck_report(logdir, proc)
    assert "Python 3.%d" % minor in read(log_files(logdir)[0])
    assert "waiting for lock lock at train.py:18 in load_shards" in stall_lines(logdir)[0]
    assert any(c["kind"] == "lock" and "thread prefetch holds it" in flat(c["text"]) for c in rep["causes"])


@pytest.mark.parametrize("minor", [None, 13])  # 3.12 keeps scheduled and eager tasks apart
def test_an_asyncio_task_stuck_while_another_task_prints_is_named(tmp_path, logdir, minor):
    """The event loop runs on (a heartbeat task prints), so its thread moves: the task that waits
    for a reply nobody sends is the one told, with where it waits."""
    exe, env = PYTHON, {}
    if minor is not None:
        exe = python_3(minor)
        if exe is None:
            pytest.skip("python3.%d is not on this machine" % minor)
        from earlylog.cli import launch
        env = {"PYTHONPATH": launch.variables({})["PYTHONPATH"]}
    proc = start(script(tmp_path, """
    import asyncio
    async def heartbeat():
        while True:
            print("alive", flush=True)
            await asyncio.sleep(0.2)
    async def fetch(reply):
        return await reply
    async def main():
        asyncio.create_task(heartbeat())
        print(await fetch(asyncio.get_running_loop().create_future()))
    asyncio.run(main())
    """, "serve.py"), logdir, python=exe, **env)
    (rep, _res), _after, _took = stuck_report(logdir, proc)
    line = stall_lines(logdir)[0]
    assert "stall: task Task-1 (main) on thread MainThread made no progress for" in line, line
    assert "waiting for a Future in fetch at serve.py:8" in line, line
    (p,) = rep["processes"]
    assert p["state"] == "stalled" and "in fetch at serve.py:8 (an asyncio task awaits a Future there), while its " \
        "event loop ran on (task Task-1 (main) made no progress)" in flat(p["summary"]), p["summary"]


def test_an_asyncio_task_stays_stuck_between_the_watchdog_s_looks_at_the_tasks(tmp_path, logdir):
    """The watchdog looks at the tasks a quarter of a stall apart; in between, a stuck task stays
    told, with no `over` line until it moves."""
    res = run_python([script(tmp_path, """
    import asyncio
    async def heartbeat():
        while True:
            print("alive", flush=True)
            await asyncio.sleep(0.2)
    async def main():
        asyncio.create_task(heartbeat())
        reply = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(6.5, reply.set_result, "late")
        print(await reply)
        await asyncio.sleep(1)
    asyncio.run(main())
    """, "late.py")], logdir, env={"EARLYLOG_STALL": 4, "EARLYLOG_NATIVE": 0}, timeout=TIMEOUT)
    assert res.returncode == 0, res.err[-2000:]
    told = [line.partition(" stall: ")[2] for line in stall_lines(logdir)]
    assert told[0].startswith("task Task-1 (main) on thread MainThread made no progress for 4 s"), told
    overs = [i for i, line in enumerate(told) if line.startswith("over:")]
    assert overs in ([], [len(told) - 1]), told  # an `over` only once the reply came, as the last word


def ended_by_sigterm(logdir, proc):
    """`timeout` ends the program with SIGTERM once a stall dump is written; its report then."""
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 1, timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGTERM
    finally:
        kill_tree(proc)
    (p,) = report_json(logdir)["processes"]
    assert p["state"] == "killed" and p["summary"].startswith("received SIGTERM"), p["summary"]
    return p


def test_a_worker_stuck_while_the_main_thread_redraws_a_bar_is_told_where_it_waits_after_a_sigterm(tmp_path, logdir):
    """After the timeout's SIGTERM the report says where the worker waited, not where the main
    thread was when the signal came (redrawing its bar)."""
    proc = start(script(tmp_path, """
    import sys, threading, time
    def work():
        time.sleep(0.5)
        threading.Event().wait()
    threading.Thread(target=work, name="worker").start()
    i = 0
    while True:
        sys.stdout.write("\\rwaiting for worker %d" % i)
        sys.stdout.flush()
        i += 1
        time.sleep(0.1)
    """, "job.py"), logdir)
    summary = flat(ended_by_sigterm(logdir, proc)["summary"])
    assert "it had stalled for" in summary and "in work at job.py:5, while other threads kept printing (thread " \
        "worker made no progress)" in summary, summary


def test_a_main_thread_joining_a_thread_that_computes_is_busy_and_that_thread_is_named(tmp_path, logdir):
    """Waiting for a thread that computes is work going on, not a hang: busy, and where it computes."""
    proc = start(script(tmp_path, """
    import threading
    def crunch():
        x = 0
        while True:
            x = (x * 31 + 7) % 1000003
    worker = threading.Thread(target=crunch, name="cruncher")
    worker.start()
    worker.join()
    """, "crunch.py"), logdir)
    wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 1, timeout=30)
    (p,) = report_json(logdir)["processes"]
    assert p["state"] == "busy" and p["summary"].startswith("busy for"), p
    assert "thread cruncher running on a CPU" in p["summary"] and "in crunch at crunch.py:5" in p["summary"], p
    summary = flat(ended_by_sigterm(logdir, proc)["summary"])
    assert "it had been busy for" in summary and "thread cruncher running on a CPU" in summary, summary


def test_a_future_nobody_sets_beside_a_tqdm_bar_updated_by_a_thread_is_named(tmp_path, logdir):
    pytest.importorskip("tqdm")
    proc = start(script(tmp_path, """
    import concurrent.futures, sys, threading, time
    from tqdm import tqdm
    bar = tqdm(total=100000, file=sys.stderr, mininterval=0, ascii=True)
    def download():
        while True:
            bar.update(1)
            time.sleep(0.1)
    threading.Thread(target=download, name="download", daemon=True).start()
    reply = concurrent.futures.Future()
    def fetch_config():
        return reply.result()
    fetch_config()
    """, "fetch.py"), logdir)
    (rep, _res), _after, _took = stuck_report(logdir, proc)
    assert "waiting for future reply at fetch.py:12 in fetch_config" in stall_lines(logdir)[0]
    cause = next(c for c in rep["causes"] if c["kind"] == "future-unset")
    assert "waits in result() at fetch.py:12" in flat(cause["text"]) and "set_result()" in cause["next"]


def test_a_reply_that_never_comes_while_a_heartbeat_thread_prints_names_the_peer(tmp_path, logdir):
    proc = start(script(tmp_path, CHATTY + """
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()  # it never accepts: the connection is made, no reply ever comes
    def fetch_weights():
        conn = socket.create_connection(server.getsockname())
        conn.sendall(b"GET /weights\\r\\n")
        return conn.recv(1024)
    fetch_weights()
    """, "client.py"), logdir)
    (rep, _res), _after, _took = stuck_report(logdir, proc)
    assert "made no progress" in stall_lines(logdir)[0] and "fetch_weights" in stall_lines(logdir)[0]
    cause = next(c for c in rep["causes"] if c["kind"] == "network")
    assert "has been waiting for a reply from 127.0.0.1:" in cause["text"] and "fetch_weights at client.py" in \
        cause["text"]
    assert "timeout" in cause["next"]


def test_a_rich_progress_bar_refreshing_beside_a_lock_taken_twice_is_named(tmp_path, logdir):
    pytest.importorskip("rich")
    proc = start(script(tmp_path, """
    import threading
    from rich.console import Console
    from rich.progress import Progress
    lock = threading.Lock()
    lock.acquire()
    with Progress(console=Console(force_terminal=True), refresh_per_second=10) as progress:
        task = progress.add_task("training", total=100)
        progress.update(task, advance=3)
        def save():
            with lock:
                pass
        save()
    """, "bar.py"), logdir)
    (rep, _res), _after, _took = stuck_report(logdir, proc)
    assert "thread MainThread made no progress" in stall_lines(logdir)[0]
    cause = next(c for c in rep["causes"] if c["kind"] == "lock")
    assert "which it already holds" in cause["text"] and "RLock" in cause["next"]


def test_a_training_loop_whose_step_hangs_while_a_thread_prints_says_no_training_step(tmp_path, logdir):
    proc = start(script(tmp_path, CHATTY + """
    import torch
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1)),
                                       batch_size=4)
    checkpoint_done = threading.Event()
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.05)
        if step == 5:
            checkpoint_done.wait()
    """, "train.py"), logdir)
    (rep, res), _after, _took = stuck_report(logdir, proc)
    line = stall_lines(logdir)[0]
    assert re.search(r"stall: no training step for \d+ s \(steps came every ~[\d.]+ s before; last step 6\)", line)
    (p,) = rep["processes"]
    assert p["state"] == "stalled"
    assert re.search(r"no training step for [\d.]+ s \(steps came every ~[\d.]+ s before; last step 6\), "
                     r"in <module> at train.py:24", p["summary"]), p["summary"]
    assert "no training step for" in res.stdout


def test_a_thread_that_moves_again_ends_the_stall(tmp_path, logdir):
    """A wait that ends (a lock released after a few stalls) writes `stall: over`, and the report
    no longer calls the process stalled while it prints on."""
    proc = start(script(tmp_path, CHATTY + """
    lock = threading.Lock()
    lock.acquire()
    threading.Timer(4, lock.release).start()
    with lock:
        print("got it", flush=True)
    time.sleep(60)
    """), logdir)
    try:
        wait_for(lambda: any("stall: over: progress again" in line for line in stall_lines(logdir)), timeout=30)
        assert [p["state"] for p in report_json(logdir)["processes"]] == ["running"]
    finally:
        kill_tree(proc)


# --- the reader's side, fed a log written line by line ------------------------------------------

def _noisy_log(folder, over=False):
    from support import thread, write
    main = thread("MainThread", "0x1", [("/app/train.py", 12, "load", "with cache_lock:"),
                                        ("/app/train.py", 30, "<module>", "load()")], main=True, daemon=False,
                  notes=["waits for: lock cache_lock (threading.Lock at 0x7f00)",
                         "held by: thread prefetch (ident 0x2); acquire() at /app/train.py:5 in prefetch, "
                         "not released since"])
    other = thread("prefetch", "0x2", [("/app/train.py", 6, "prefetch", "done.wait()")])
    events = [(0, "start", "pid 40 (parent 1) argv python train.py; log x (via pth, earlylog 0.1.0 at /opt/earlylog, "
                           "Python 3.11.7)", ()),
              (3, "stall", "thread MainThread made no progress for 2 s while other threads kept printing; waiting "
                           "for lock cache_lock at train.py:12 in load; stacks in x", ()),
              (3.1, "dump", "stall after 2 s without progress (2 threads)", main + other)]
    events += [(3.5 + i, "out", "telemetry: gpu util 0%", ()) for i in range(20)]
    if over:
        events.append((24, "stall", "over: progress again after 23 s", ()))
    write(folder, 40, events, "train")


def test_the_reader_keeps_a_stall_told_while_others_print_open_through_their_output(tmp_path):
    from earlylog.read import logread, verdict
    from support import T0
    _noisy_log(tmp_path)
    rep = verdict.judge(logread.read(str(tmp_path)), now=T0 + 30)
    (p,) = rep["processes"]
    assert p["state"] == "stalled" and p["idle"] is None
    # From the thread's last move (its line at 3 s, 2 s into the stall) to the last line (22.5 s).
    assert p["summary"].startswith("stalled for 22 s in load at train.py:12, while other threads kept printing "
                                   "(thread MainThread made no progress)"), p["summary"]
    (cause,) = [c for c in rep["causes"] if c["kind"] == "lock"]
    assert "thread prefetch holds it" in cause["text"]


def test_its_over_line_ends_it(tmp_path):
    from earlylog.read import logread, verdict
    from support import T0
    _noisy_log(tmp_path, over=True)
    rep = verdict.judge(logread.read(str(tmp_path)), now=T0 + 30)
    assert [p["state"] for p in rep["processes"]] == ["unknown"] and rep["causes"] == []
