"""Issue 34, distributed training understood: real two-rank DistributedDataParallel jobs on the gloo
backend, started by torchrun and by torch.multiprocessing, and read as a user would. Each rank is
named with the collective it waits in, its ordinal in its group and its step; ranks in different
collectives, a straggler outside any collective, both ends of a pair in recv; a healthy slow rank is
slowed, not stuck; a launcher waiting for its ranks supervises, never stalls."""
import os
import re
import signal
import subprocess

import pytest

from support import (PYTHON, TIMEOUT, clean_env, earlylog, free_port, log_files, read, report_json, script,
                     wait_for)
from test_causes_threads import only

pytest.importorskip("torch")
BIN = os.path.dirname(PYTHON)

# One training job, its hang picked by JOB: uneven (rank 1 has one batch fewer and leaves its loop
# for the final barrier), branch (rank 0 alone calls a broadcast), straggler (rank 1 takes a lock
# it holds, outside any collective), p2p (both ranks end in recv from each other), slow (rank 1 takes
# SLOW seconds to read each batch), healthy (both exchange a send and a recv each step too, the
# healthy look-alike of p2p). A monitor thread prints the whole time.
JOB = """
    import os, sys, threading, time
    import torch, torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset

    MODE = os.environ.get("JOB", "healthy")


    def monitor():
        while True:
            print("monitor: alive", flush=True)
            time.sleep(0.3)


    def next_batch(rank, batch):
        if MODE == "slow" and rank == 1:
            time.sleep(float(os.environ["SLOW"]))
        return batch[0]


    def train_step(model, opt, x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()


    def main(rank, world):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", rank=rank, world_size=world)
        threading.Thread(target=monitor, daemon=True).start()
        model = DDP(nn.Linear(8, 8))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = int(os.environ.get("STEPS", "6")) - (MODE == "uneven" and rank == 1)
        loader = DataLoader(TensorDataset(torch.randn(batches, 8)), batch_size=1)
        lock = threading.Lock()
        for step, batch in enumerate(loader):
            if MODE == "straggler" and rank == 1 and step == 3:
                lock.acquire()
                with lock:
                    pass
            train_step(model, opt, next_batch(rank, batch))
            if MODE in ("healthy", "slow"):  # a point-to-point exchange each step, as pipeline stages do
                t = torch.zeros(2)
                if rank == 0:
                    dist.send(t, 1); dist.recv(t, 1)
                else:
                    dist.recv(t, 0); dist.send(t, 0)
            if MODE == "branch" and step == 3 and rank == 0:
                dist.broadcast(torch.zeros(2), src=0)
            print("rank", rank, "step", step, flush=True)
            time.sleep(float(os.environ.get("PAUSE", "0")))
        if MODE == "p2p":
            t = torch.zeros(2)
            if rank == 0:
                dist.send(t, 1); dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0); dist.recv(t, 0)
                dist.recv(t, 0)
        dist.barrier()
        dist.destroy_process_group()
        print("rank", rank, "done", flush=True)


    if __name__ == "__main__":
        if os.environ.get("LOCAL_RANK") is not None:
            main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        else:
            import torch.multiprocessing as mp
            mp.start_processes(main, args=(2,), nprocs=2, start_method=sys.argv[1])
"""


def _command(launcher, job, port):
    """The command line of a two-rank job: torchrun, accelerate (gloo on CPU: no GPU here), or
    torch.multiprocessing with a start method."""
    if launcher == "torchrun":
        return [os.path.join(BIN, "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(port), job]
    if launcher == "accelerate":
        return [os.path.join(BIN, "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
                "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
                "--main_process_port", str(port), job]
    return [PYTHON, job, launcher]


def _start(tmp_path, logdir, launcher, mode, stall="1", **env):
    port = free_port()
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=stall, JOB=mode, MASTER_PORT=port, **env)
    return subprocess.Popen(_command(launcher, script(tmp_path, JOB, name="train.py"), port), env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            cwd=str(tmp_path))


def _tree(pid):
    """pid and its descendants (torchrun starts each rank in a session of its own)."""
    found = [pid]
    for tid in os.listdir("/proc/%d/task" % pid) if os.path.isdir("/proc/%d/task" % pid) else ():
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                found += [p for child in f.read().split() for p in _tree(int(child))]
        except OSError:
            pass
    return found


def _stop(proc):
    for pid in _tree(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.communicate(timeout=TIMEOUT)


def _ranks_told(logdir, needles):
    """Every rank's log has a dump whose notes hold one of needles (a `collective:` note...)."""
    texts = [read(f) for f in log_files(logdir)]
    ranks = [t for t in texts if "init_process_group backend=gloo" in t]
    return len(ranks) == 2 and all(any(n in t for n in needles) for t in ranks)


def _live_report(tmp_path, logdir, launcher, mode, ready, **env):
    """The JSON and text reports of a hung job, read while it hangs; then the job is killed."""
    proc = _start(tmp_path, logdir, launcher, mode, **env)
    try:
        wait_for(lambda: ready(logdir) or proc.poll() is not None, timeout=90)
        assert proc.poll() is None, _stop(proc)[1].decode()[-3000:]
        return report_json(str(logdir)), earlylog("report", str(logdir)).stdout
    finally:
        _stop(proc)


def _launcher_process(rep):
    return [p for p in rep["processes"] if p["tag"] in ("torchrun", "accelerate", "train")]


@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_uneven_batches_name_each_ranks_collective_and_the_cause_not_a_fork_lock(tmp_path, logdir, launcher):
    """Rank 1 runs out of batches and waits in the final barrier; rank 0 waits in DDP's gradient
    all_reduce in backward of its next step: different collectives at one ordinal. Under forked
    ranks the report used to blame a lock copied by fork; under torchrun, it called rank 0 the one
    to look at. Neither launcher is stalled: it supervises its ranks."""
    rep, text = _live_report(tmp_path, logdir, launcher, "uneven", lambda d: _ranks_told(d, ["collective: "]))
    cause = only(rep, "ranks-differ")
    ordinal = re.search(r"rank 0 is in all_reduce #(\d+) on group 0 \(DDP's gradient all_reduce, issued from C\+\+ "
                        r"during backward\) in train_step at train.py:\d+, in its step 6", cause["text"])
    assert ordinal, cause["text"]
    assert "rank 1 is in barrier #%s on group 0 in main at train.py:" % ordinal.group(1) in cause["text"]
    assert "after 5 training steps" in cause["text"]
    assert "rank 1 ran out of batches and left the training loop while rank 0 went on" in cause["text"]
    assert "DistributedSampler" in cause["next"] and "join()" in cause["next"]
    assert not any(c["kind"] == "fork-lock" for c in rep["causes"]), rep["verdict"]
    assert "start the child with the 'spawn'" not in " ".join(rep["verdict"])
    boss = _launcher_process(rep)
    assert len(boss) == 1 and boss[0]["state"] == "idle" and "supervising: waiting for children" in boss[0]["summary"]
    assert rep["verdict"][0] == "2 of 3 processes in trouble: 2 stuck"
    assert "the ranks issued different collectives on group 0" in text


def test_a_collective_under_a_rank_condition(tmp_path, logdir):
    """Rank 0 alone calls a broadcast after step 4; rank 1 goes on to DDP's all_reduce of step 5."""
    rep, _text = _live_report(tmp_path, logdir, "fork", "branch", lambda d: _ranks_told(d, ["collective: "]))
    cause = only(rep, "ranks-differ")
    m = re.search(r"rank 0 is in broadcast #(\d+) on group 0 in main at train.py:\d+, after 4 training steps",
                  cause["text"])
    assert m, cause["text"]
    assert "rank 1 is in all_reduce #%s on group 0 (DDP's gradient all_reduce" % m.group(1) in cause["text"]
    assert "a collective that rank 0 calls and rank 1, inside a training step, does not" in cause["text"]
    assert cause["next"].startswith("call every collective on every rank of its group")


def test_a_straggler_outside_any_collective_is_named_with_its_own_cause(tmp_path, logdir):
    """Rank 1 waits for a lock it holds itself; rank 0 waits for it in DDP's all_reduce."""
    def told(d):
        # Under load a rank can be dumped inside an earlier step's all_reduce that then went on
        # (its stall over): the notes alone came before the hang. Both ranks must be in this stall,
        # as the report reads them, before it is read for good.
        return _ranks_told(d, ["collective: all_reduce", "waits for: lock"]) and \
            "is the straggler" in " ".join(report_json(str(d))["verdict"])
    rep, _text = _live_report(tmp_path, logdir, "torchrun", "straggler", told)
    verdict = " ".join(rep["verdict"])
    assert re.search(r"rank 1 is the straggler: it is in main at train.py:\d+, outside any collective \(waiting on a "
                     r"lock, condition or event\); rank 0 waits in all_reduce #\d+ on group 0 for it", verdict), verdict
    lock = only(rep, "lock")
    assert lock["text"].startswith("rank 1: thread MainThread waits for lock `lock`") and "already holds" in lock["text"]
    assert not [c for c in rep["causes"] if c["kind"] in ("ranks-differ", "collective-stuck", "fork-lock")]


def test_both_ranks_in_recv_say_whose_send_is_missing(tmp_path, logdir):
    rep, _text = _live_report(tmp_path, logdir, "fork", "p2p", lambda d: _ranks_told(d, ["collective: recv"]))
    cause = only(rep, "p2p-unmatched")
    assert "ranks 0 and 1 both wait in recv from each other" in cause["text"]
    assert "rank 0's recv #1 from rank 1 has no send to match: rank 1 sent 0 to it" in cause["text"]
    assert "rank 1's recv #3 from rank 0 has no send to match: rank 0 sent 2 to it" in cause["text"]


# PyTorch Lightning's DDP on CPU: the process the user started is rank 0, and starts rank 1 as its
# child. Rank 1 takes a lock it holds at its fourth step.
LIGHTNING = """
    import os, threading, time
    import torch, torch.nn as nn
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset


    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(8, 1)
            self.lock = threading.Lock()

        def training_step(self, batch, index):
            if os.environ.get("JOB") == "straggler" and self.global_rank == 1 and index == 3:
                self.lock.acquire()
                with self.lock:
                    pass
            time.sleep(0.05)
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)


    if __name__ == "__main__":
        data = DataLoader(TensorDataset(torch.randn(40, 8)), batch_size=1)
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Model(), data)
        print("done", flush=True)
"""


def test_lightning_rank_zero_started_its_peer_and_is_a_rank_not_its_parent(tmp_path, logdir):
    """Lightning's rank 0 is the user's process and the parent of rank 1: waiting in a collective it
    waits for its peer rank, never "for child N"; rank 1, stuck on a lock, is the straggler."""
    pytest.importorskip("lightning")
    port = free_port()
    proc = subprocess.Popen([PYTHON, script(tmp_path, LIGHTNING, name="lit.py")], cwd=str(tmp_path),
                            env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL="1", JOB="straggler",
                                          MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: _ranks_told(logdir, ["collective: ", "waits for: lock"]) or proc.poll() is not None,
                 timeout=120)
        assert proc.poll() is None, _stop(proc)[1].decode()[-3000:]
        rep = report_json(str(logdir))
    finally:
        _stop(proc)
    verdict = " ".join(rep["verdict"])
    assert re.search(r"rank 1 is the straggler: it is in training_step at lit.py:\d+, outside any collective "
                     r"\(waiting on a lock, condition or event\); rank 0 waits in \w+ #\d+ on group 0 for it", verdict), \
        verdict
    assert "for child" not in verdict and rep["verdict"][0] == "2 of 2 processes in trouble: 2 stuck", verdict
    assert only(rep, "lock")["text"].startswith("rank 1 (pid ")
