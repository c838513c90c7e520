"""The workloads the benchmark runs inside its child processes: `bench_child.py SCENARIO RESULT ...`.
Each scenario times itself and writes one Python literal to RESULT; it never reads earlylog's logs."""
import os
import sys
import time


def _result(path, value):
    with open(path, "w") as f:
        f.write(repr(value))


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def torch_loop(result, steps):
    """`import torch`, then a small CPU training loop: DataLoader workers, a print per step."""
    began, cpu = time.perf_counter(), time.process_time()
    import torch
    imported, cpu = time.perf_counter(), time.process_time() - cpu
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the bench shares 2 cores with other work; one thread is steadier
    steps = int(steps)
    data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    # The first optimizer step imports torch._dynamo and sympy (~2 s): the import rows' business.
    train_step(*data[:64])
    looping = time.perf_counter()
    for step, (x, y) in enumerate(DataLoader(data, batch_size=64, shuffle=True, num_workers=2)):
        print("step %d loss %.4f" % (step, train_step(x, y)))
    _result(result, {"import": imported - began, "import_cpu": cpu, "loop": time.perf_counter() - looping})


def log_line(result, calls, blocks):
    """earlylog.log() against the same bytes written by two raw os.write calls, block by block."""
    import earlylog
    from earlylog.grammar import records
    from earlylog.runtime import state
    logger = state.logger
    if logger is None:
        raise SystemExit("earlylog did not start in this process")
    message = "epoch 3 step 1200: checkpoint saved to /data/run-7/ckpt-1200.pt"
    raw = records.format_lines(logger.config.format, time.time(), logger.ident.pid, logger.ident.tag,
                               logger.ident.host, "mark", message).encode()
    raw_file = os.open(logger.path + ".raw", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_WRONLY)
    calls, timed = int(calls), {"earlylog": [], "raw": []}
    for _ in range(int(blocks)):
        began = time.perf_counter()
        for _ in range(calls):
            earlylog.log(message)
        middle = time.perf_counter()
        for _ in range(calls):
            os.write(raw_file, raw)
            os.write(null, raw)
        timed["earlylog"].append((middle - began) / calls)
        timed["raw"].append((time.perf_counter() - middle) / calls)
    _result(result, timed)


def prints(result, count, flush):
    """A user's per-step print(); flush=1 is the baseline's print(..., flush=True)."""
    count, flush = int(count), flush == "1"
    began = time.perf_counter()
    for step in range(count):
        print("step %d loss %.4f" % (step, 1.0 / (step + 1)), flush=flush)
    _result(result, (time.perf_counter() - began) / count)


def epochs(result, count):
    """A small healthy DataLoader training (2 workers) of `count` epochs (bench.py counts the
    earlylog lines on its console)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(int(count)):
        for x, y in DataLoader(data, batch_size=16, num_workers=2):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        print("epoch", epoch, flush=True)
    _result(result, int(count))


def busy(result, seconds):
    """A silent busy loop (pure Python compute): the longest gap between two of its iterations."""
    worst, last = 0.0, time.perf_counter()
    end = last + float(seconds)
    while last < end:
        sum(range(300))
        now = time.perf_counter()
        worst = max(worst, now - last)
        last = now
    _result(result, worst)


def stuck_waiters(result, seconds):
    """A main thread that prints a tick every 0.2 s and sleeps 1 ms between its iterations (a
    computing one would be work the waiters wait for: no stall is told beside it), beside 8 threads
    stuck on events nothing sets, in a program with a large namespace (each stall dump asks who
    could set each event, runtime/reach.py): the longest gap between two iterations, less its sleep."""
    import threading
    table = {"row%d" % i: [i, str(i)] for i in range(20000)}  # what a search may walk
    events = [threading.Event() for _ in range(8)]

    def wait(event, rows):
        event.wait()

    for i, event in enumerate(events):
        threading.Thread(target=wait, args=(event, table), daemon=True).start()
    worst, last = 0.0, time.perf_counter()
    end, tick = last + float(seconds), last
    while last < end:
        time.sleep(0.001)
        now = time.perf_counter()
        worst = max(worst, now - last - 0.001)
        last = now
        if now - tick >= 0.2:
            print("tick", flush=True)
            tick = now
    _result(result, worst)


def heartbeat(result, calls, blocks):
    """earlylog's training heartbeat (the optimizer step hook) against an empty hook of the same
    signature, blocks alternating; and the time of one small optimizer step, for scale."""
    import torch
    from earlylog.runtime import marks
    if not marks._step_hook:
        raise SystemExit("earlylog's optimizer step hook is not registered")

    def empty(optimizer, args, kwargs):
        pass

    calls, timed = int(calls), {"earlylog": [], "raw": []}
    for _ in range(int(blocks)):
        began = time.perf_counter()
        for _ in range(calls):
            marks._stepped(None, (), {})
        middle = time.perf_counter()
        for _ in range(calls):
            empty(None, (), {})
        timed["earlylog"].append((middle - began) / calls)
        timed["raw"].append((time.perf_counter() - middle) / calls)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    began = time.perf_counter()
    for _ in range(200):
        optimizer.step()
    timed["step"] = (time.perf_counter() - began) / 200
    _result(result, timed)


def idle(result, seconds):
    """A process that sleeps: its own CPU time over the window, and its resident memory."""
    rss_start, cpu = _rss_kib(), time.process_time()
    time.sleep(float(seconds))
    _result(result, {"cpu": time.process_time() - cpu, "seconds": float(seconds),
                     "rss_start_kib": rss_start, "rss_end_kib": _rss_kib()})


def forks(result, count):
    """fork() + _exit() in the child + waitpid(), `count` times: the mean seconds of one."""
    count = int(count)
    began = time.perf_counter()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    _result(result, (time.perf_counter() - began) / count)


def idle_threads(result, seconds):
    """idle() with two more threads, parked on an event and in a long sleep, as a program's helpers."""
    import threading
    done = threading.Event()
    threading.Thread(target=done.wait, daemon=True).start()
    threading.Thread(target=time.sleep, args=(float(seconds) + 5,), daemon=True).start()
    idle(result, seconds)


def stall(result, seconds):
    """Says it is starting, then goes silent: the time it fell silent goes to RESULT first."""
    print("starting job...", flush=True)
    _result(result, time.time())
    time.sleep(float(seconds))


def audit(result, calls, hook):
    """The alternative runtime/retries.py rejected (docs/design.md#retrying-is-not-idle): an audit
    hook like the one it would need (hook "1") against none, on `sys._getframe()` (the cheapest
    audit event) and `copy.deepcopy` (an `id()`, so an audit event, per object); best of 5 blocks."""
    import copy
    calls = int(calls)
    if hook == "1":
        watched = frozenset(("socket.connect", "os.kill"))

        def on_event(event, args, _watched=watched):
            if event in _watched:
                pass
        sys.addaudithook(on_event)
    data = [{"a": [1, 2, 3], "b": {"c": "x", "d": (1, 2)}} for _ in range(calls // 10)]

    def frames(n):
        for _ in range(n):
            sys._getframe()

    _result(result, {"event": _best(frames, calls * 10), "deepcopy": _best(lambda n: copy.deepcopy(data), 1)})


def _best(work, n):
    times = []
    for _ in range(5):
        began = time.perf_counter()
        work(n)
        times.append((time.perf_counter() - began) / n)
    return min(times)


def retry_beat(result, threads, handling):
    """One watchdog beat's retry check (runtime/retries.beat) with THREADS threads asleep, each inside
    an `except` block (handling "1") or in a plain sleep; best of 5 blocks of 200 beats."""
    import threading
    from earlylog.runtime import retries
    ready = threading.Barrier(int(threads) + 1)

    def sleeper():
        try:
            if handling == "1":
                raise ConnectionRefusedError(111, "Connection refused")
            ready.wait()
            time.sleep(60)
        except ConnectionRefusedError:
            ready.wait()
            time.sleep(60)
    for _ in range(int(threads)):
        threading.Thread(target=sleeper, daemon=True).start()
    ready.wait()
    _result(result, _best(lambda n: [retries.beat(dict, 10.0) for _ in range(n)], 200))


def _ddp_rank(rank, port, calls, steps, result):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % port, rank=rank, world_size=2)
    t = torch.ones(16)
    for _ in range(20):  # connections made, buffers warm
        dist.all_reduce(t)
    # A training step's cost, not start-up's: earlylog's probes (0.1 s in) and the first watchdog
    # beat use a core for a moment, which two ranks on two cores feel as a slower ping-pong.
    time.sleep(3)
    dist.barrier()
    began = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t)
    reduce = (time.perf_counter() - began) / calls
    peer = 1 - rank
    began = time.perf_counter()
    for _ in range(calls):  # a ping-pong: send then recv on rank 0, the mirror on rank 1
        if rank == 0:
            dist.send(t, peer)
            dist.recv(t, peer)
        else:
            dist.recv(t, peer)
            dist.send(t, peer)
    p2p = (time.perf_counter() - began) / calls
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                        torch.nn.Linear(256, 8)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    for step in range(steps + 5):
        if step == 5:
            began = time.perf_counter()
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    step = (time.perf_counter() - began) / steps
    dist.barrier()
    if rank == 0:
        _result(result, {"all_reduce": reduce, "p2p": p2p, "step": step})
    # Not destroy_process_group(): gloo's teardown aborts a rank now and then ("terminate called
    # without an active exception", with earlylog or without), which would cost the bench its row.
    sys.stdout.flush()
    os._exit(0)


def ddp(result, port, calls, steps):
    """Two gloo ranks on CPU: a small all_reduce, a send/recv ping-pong and a DDP training step, each
    timed on rank 0 over many calls; and `import torch.distributed`'s own time in the parent."""
    began = time.perf_counter()
    import torch.distributed  # noqa: F401  (earlylog's marks and the p2p wrap install here)
    imported = time.perf_counter() - began
    import torch.multiprocessing as mp
    mp.start_processes(_ddp_rank, args=(port, int(calls), int(steps), result), nprocs=2, start_method="spawn")
    with open(result) as f:
        timed = eval(f.read())
    timed["import"] = imported
    _result(result, timed)


def p2p_wrap(result, calls, blocks):
    """earlylog's count wrap of isend/irecv (runtime/marks.py) around a trivial function, against
    the function called bare, blocks alternating."""
    from earlylog.runtime import collectives, marks

    def original(tensor, dst=None, group=None, tag=0, group_dst=None):
        return None

    wrapped = marks._counting(original, "send", "dst", collectives.P2P_COUNTS)
    calls, timed = int(calls), {"earlylog": [], "raw": []}
    for _ in range(int(blocks)):
        began = time.perf_counter()
        for _ in range(calls):
            wrapped(None, 1)
        middle = time.perf_counter()
        for _ in range(calls):
            original(None, 1)
        timed["earlylog"].append((middle - began) / calls)
        timed["raw"].append((time.perf_counter() - middle) / calls)
    _result(result, timed)


if __name__ == "__main__":
    scenario = {"torch": torch_loop, "ddp": ddp, "p2p-wrap": p2p_wrap, "epochs": epochs, "logline": log_line, "print": prints, "busy": busy, "stuck-waiters": stuck_waiters, "idle": idle,
                "heartbeat": heartbeat, "idle-threads": idle_threads,
                "stall": stall, "forks": forks, "audit": audit, "retries": retry_beat}[sys.argv[1]]
    scenario(*sys.argv[2:])
