"""Synthetic log folders for the `earlylog report` row: many process logs in the real line format.
It writes only through records.format_lines and sinks.file_name, never a format of its own."""
import os
import random
import time
from types import SimpleNamespace

from earlylog.grammar import records
from earlylog.runtime import sinks

HOSTS = ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04")


def _process(rng, pid, index, size):
    """One process's life, about `size` bytes, in the shapes the runtime writes: start, probes,
    phases, its own output; every tenth process then stalls (stack dump, no exit), the rest exit.
    Yields (kind, text, continuation lines)."""
    yield "start", "pid %d (parent 4100) argv python train.py --config cfg.yaml; log /runs/r7/x.log " \
                   "(via pth, earlylog 0.1.0, Python 3.11.7)" % pid, ()
    yield "note", "watchdog: stacks after 30 s of silence; `earlylog dump %d` writes them now" % pid, ()
    for name in ("process", "stdio", "machine", "gpu", "packages"):
        yield "probe", "%s: %s" % (name, "x" * rng.randint(40, 120)), ()
    yield "phase", "begin import torch", ()
    yield "phase", "end import torch after %.3f s" % rng.uniform(1, 4), ()
    yield "phase", "begin init_process_group backend=gloo world_size=8", ()
    yield "phase", "end init_process_group after %.3f s" % rng.uniform(0.1, 9), ()
    stalls = index % 10 == 0
    for step in range((size - (2600 if stalls else 1400)) // 95):
        yield "out", "step %d loss %.4f lr 3.0e-04 tokens/s %d" % (step, rng.random(), rng.randint(9000, 12000)), ()
    if stalls:
        yield "phase", "begin all_reduce (gloo)", ()
        yield "stall", "silent for 30 s; blocked: no CPU used; each thread below says on what", ()
        yield "dump", "stall after 30 s of silence (1 thread)", [
            "thread MainThread (tid %d, ident 0x7f5c9fdfdb80, not daemon, main)" % pid,
            "  blocked: waiting on a lock or condition [kernel: futex_wait_queue]",
            "  /opt/venv/lib/python3.11/site-packages/torch/distributed/c10d.py:%d in all_reduce: work.wait()"
            % rng.randint(100, 4000),
            "  /runs/r7/train.py:%d in train_step: dist.all_reduce(loss)" % rng.randint(1, 300),
            "  /runs/r7/train.py:%d in <module>: main()" % rng.randint(300, 400)]
    else:
        yield "exit", "status 0 after %.3f s; end of program" % rng.uniform(10, 600), ()


def make(folder, count, size=10000, seed=8):
    """Write `count` process logs of about `size` bytes each into folder; returns folder."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    began = time.time() - 3600
    for index in range(count):
        pid, rank = 10000 + index, index % 8
        ident = SimpleNamespace(host=HOSTS[index % len(HOSTS)], pid=pid, role="rank", rank=rank)
        now = began + index * 0.01
        text = []
        for kind, message, more in _process(rng, pid, index, size):
            now += rng.uniform(0.001, 0.5)
            text.append(records.format_lines("text", now, pid, "rank%d" % rank, ident.host, kind, message, more))
        with open(os.path.join(folder, sinks.file_name(began, ident)), "w") as f:
            f.write("".join(text))
    return folder
