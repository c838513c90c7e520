"""Library marks on real torch (CPU, gloo, DataLoader): the last lines say what a hung job waits for."""
import os
import signal
import socket
import subprocess

import pytest

from earlylog.grammar import records
from support import (PYTHON, clean_env, free_port, log_files, read, report_json, run_both, run_python, script,
                     wait_for, wait_log)

pytestmark = pytest.mark.slow  # each test imports torch


def _start(logdir, *args):
    """A hanging job in its own session, so the test can kill it and every worker it forked."""
    env = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir), EARLYLOG_STALL="1")
    return subprocess.Popen([PYTHON, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _stop(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _phase_lines(path, kind="phase"):
    parsed = (records.parse(line) for line in read(path).splitlines())
    return [r["msg"] for r in parsed if r and r["kind"] == kind]


def test_rank_waiting_for_a_peer_that_never_starts(tmp_path, logdir):
    path = script(tmp_path, """
        import datetime, sys, torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[1], rank=0,
                                world_size=2, timeout=datetime.timedelta(seconds=120))
    """)
    port = free_port()
    proc = _start(logdir, path, str(port))
    try:
        wait_log(logdir, "phase: waiting init_process_group", timeout=60)
        # One rank, started without torchrun: its rank and world size come from its phase.
        wait_for(lambda: read(log_files(logdir)[0]).count("dump: stall") >= 2, timeout=60)
        verdict = report_json(logdir)["verdict"]
    finally:
        _stop(proc)
    assert "rank 0 waits in init_process_group; no rank is elsewhere: rank 1 never started (no log here; or it " \
           "runs on another host, or without EARLYLOG)" in verdict, verdict
    [log] = log_files(logdir)
    begin, waiting = _phase_lines(log)[-2:]
    expected = ("init_process_group backend=gloo init_method=tcp://127.0.0.1:%d rank=0 world_size=2 "
                "master=127.0.0.1:%d timeout=120 s" % (port, port))
    assert begin == "begin " + expected
    assert waiting.startswith("waiting " + expected + ": still waiting for peers after ")


def _loader_script(tmp_path, getitem, before=""):
    """A DataLoader with 2 workers over a dataset whose __getitem__ runs one line first."""
    return script(tmp_path, """
        import os, signal, threading, time
        from torch.utils.data import DataLoader, Dataset

        class Data(Dataset):
            def __len__(self):
                return 64

            def __getitem__(self, i):
                %s
                return i

        %s
        for batch in DataLoader(Data(), num_workers=2, batch_size=4):
            pass
    """ % (getitem, before))


def test_ranks_given_different_rendezvous_addresses_are_told_so(tmp_path, logdir):
    path = script(tmp_path, """
        import datetime, sys, torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[1], rank=int(sys.argv[2]),
                                world_size=2, timeout=datetime.timedelta(seconds=120))
    """)
    ports = [free_port(), free_port()]  # rank 1's port was mistyped
    procs = [_start(logdir, path, str(port), str(rank)) for rank, port in enumerate(ports)]
    try:
        wait_for(lambda: len(log_files(logdir)) == 2 and all(read(f).count("dump: stall") >= 2
                                                                for f in log_files(logdir)), timeout=60)
        verdict = report_json(logdir)["verdict"]
    finally:
        for proc in procs:
            _stop(proc)
    assert "ranks 0, 1 wait in init_process_group; the ranks use different rendezvous addresses (rank 0 " \
           "127.0.0.1:%d, rank 1 127.0.0.1:%d): give every rank the same MASTER_ADDR and MASTER_PORT (or " \
           "init_method)" % tuple(ports) in verdict, verdict


def test_dataloader_whose_worker_blocks(tmp_path, logdir):
    path = _loader_script(tmp_path, "time.sleep(600)",
                          'threading.Thread(target=time.sleep, args=(600,), name="sleeper", daemon=True).start()')
    proc = _start(logdir, path)
    try:
        wait_log(logdir, "begin DataLoader worker 1 of 2", timeout=60)
        wait_log(logdir, "begin DataLoader first batch", timeout=30)
        main = [p for p in log_files(logdir) if "-script.log" in p]
        workers = [p for p in log_files(logdir) if "-fork.log" in p]
        assert len(main) == 1 and len(workers) == 2
        phases = _phase_lines(main[0])
        assert ("begin DataLoader iterator num_workers=2 context=fork pin_memory=False persistent_workers=False"
                in phases)
        assert phases[-1] == "begin DataLoader first batch from 2 workers"
        # forking while another thread runs is named (the watchdog's line)
        assert any("sleeper" in line for line in _phase_lines(main[0], "fork"))
        for worker in workers:
            assert any(line.startswith("begin DataLoader worker ") for line in _phase_lines(worker))
            if "dump:" in wait_log(logdir, "stall:", timeout=10):  # the watchdog's stall dumps exist
                wait_for(lambda: "in __getitem__" in read(worker), timeout=10)  # the worker's own stack
    finally:
        _stop(proc)


TRAIN = """
    import inspect, os, pickle, sys, tempfile
    import torch
    import torch.utils.data._utils.worker as worker
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(400, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(400, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(1), persistent_workers=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    while step < 200:
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            if step == 200:
                break
    print("loss %.8f" % loss.item(), [round(v, 6) for v in model.weight.flatten().tolist()])

    folder = tempfile.mkdtemp()
    torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
    print("reloaded", torch.load(os.path.join(folder, "model.pt"))["weight"].equal(model.weight))
    from safetensors.torch import load_file, save_file
    save_file(model.state_dict(), os.path.join(folder, "model.safetensors"))
    print("safetensors", load_file(os.path.join(folder, "model.safetensors"))["bias"].equal(model.bias))
    try:
        torch.load(os.path.join(folder, "missing.pt"))
    except FileNotFoundError as exc:
        print("missing", exc.errno)
    print("signature", inspect.signature(torch.load))
    print("doc", torch.load.__doc__ == torch.serialization.load.__doc__, torch.load.__name__)
    print("pickled", pickle.loads(pickle.dumps(torch.load)) is torch.load,
          pickle.loads(pickle.dumps(worker._worker_loop)) is worker._worker_loop)
    from accelerate import Accelerator
    print("accelerator", Accelerator(cpu=True).device)
"""


def test_training_loop_identical_with_and_without(tmp_path, logdir):
    path = script(tmp_path, TRAIN)
    bare = run_python([path], enabled=False, timeout=180)
    logged = run_python([path], logdir=logdir, timeout=180, env={"EARLYLOG_CONSOLE": "off"})
    assert bare.returncode == 0, bare.err
    assert (logged.returncode, logged.out) == (0, bare.out)
    assert "loss " in bare.out and "pickled True True" in bare.out and "reloaded True" in bare.out
    main = [p for p in logged.files() if "-script.log" in p]
    phases = _phase_lines(main[0])
    assert "begin DataLoader iterator num_workers=2 context=fork pin_memory=False persistent_workers=True" in phases
    assert any(p.startswith("end DataLoader first batch after ") for p in phases)
    assert any(p.startswith("begin torch.load /") and p.endswith("model.pt (0.0 MB)") for p in phases)
    assert any(p.startswith("error torch.load after ") and "FileNotFoundError" in p for p in phases)
    assert any(p.startswith("begin safetensors load_file ") and "model.safetensors" in p for p in phases)
    assert any(p.startswith("end accelerate.Accelerator() after ") for p in phases)
    workers = [p for p in logged.files() if "-fork.log" in p]
    assert len(workers) == 2 and all(_phase_lines(w)[0].startswith("begin DataLoader worker ") for w in workers)
    assert sum(p.startswith("begin DataLoader") for p in phases) == 2  # later epochs reuse the workers


def test_rendezvous_address_that_cannot_work(tmp_path, logdir):
    path = script(tmp_path, """
        import datetime, sys, torch.distributed as dist
        for init, rank in (("tcp://127.0.0.1:" + sys.argv[1], 0), ("tcp://nonexistent.invalid:29500", 1)):
            try:
                dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2,
                                        timeout=datetime.timedelta(seconds=3))
            except Exception as exc:
                print(type(exc).__name__)
    """)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_python([path, str(port)], logdir=logdir, timeout=120)
    warnings = [r["msg"] for r in result.records() if r["kind"] == "WARNING"]
    assert "MASTER_PORT %d is already in use on this machine" % port in warnings[0]
    assert warnings[1].startswith("MASTER_ADDR nonexistent.invalid does not resolve")


def test_dataloader_worker_that_dies(tmp_path, logdir):
    # worker 1 dies on its first item, before it sends anything, as the OOM killer would kill it
    path = _loader_script(tmp_path, "if i == 4: os.kill(os.getpid(), signal.SIGKILL)")
    result = run_python([path], logdir=logdir, env={"EARLYLOG_CONSOLE": "off"})
    assert result.returncode == 1 and "RuntimeError: DataLoader worker (pid" in result.err
    [main] = [p for p in result.files() if "-script.log" in p]
    # torch notices in its SIGCHLD handler or while waiting for a batch, whichever comes first
    died = [p for p in _phase_lines(main) if p.startswith(("error DataLoader workers after ",
                                                           "error DataLoader batch after "))]
    assert len(died) == 1 and "RuntimeError: DataLoader worker (pid" in died[0]
    # The report names the dead worker as torch's error does, and the one torch then stopped as
    # stopped with its failing parent: not a whole run stopped from outside.
    rep = report_json(logdir)
    dead = int(died[0].split("DataLoader worker (pid ")[1].split(")")[0])
    states = {d["pid"]: d["state"] for d in rep["processes"] if d["tag"] == "fork<script"}
    assert states.pop(dead) == "killed" and list(states.values()) == ["terminated"], rep["processes"]
    assert [c["kind"] for c in rep["causes"]] != ["run-stopped"] and "from outside" not in " ".join(rep["verdict"])


def test_dataloader_whose_dataset_raises_behaves_the_same_and_blames_the_dataset(tmp_path, logdir):
    # The most common DataLoader failure: the error comes back to the main process, which ends
    # its workers as it exits (torch's workers leave silently on their parent's SIGTERM). In the
    # first batch: a later one may reach the main process before or after it asks for it, and
    # torch's traceback then names another line of its own (_next_data's stored-batch path), with
    # or without earlylog, on a loaded machine.
    path = _loader_script(tmp_path, "if i == 0: float('n/a')")
    on = run_both([path], logdir, env={"EARLYLOG_CONSOLE": "off"})  # no frame of earlylog's in the traceback
    assert on.returncode == 1 and "ValueError: could not convert string to float" in on.err
    rep = report_json(logdir)
    workers = [d for d in rep["processes"] if d["tag"] == "fork<script"]
    assert len(workers) == 2 and {d["state"] for d in workers} == {"terminated"}, workers
    assert rep["verdict"][0] == "1 of 3 processes in trouble: 1 failed (non-zero exit)", rep["verdict"]
    assert rep["causes"] == [] and "__getitem__ at script.py:" in rep["verdict"][1]
