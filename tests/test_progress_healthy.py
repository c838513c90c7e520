"""No false alarm from the progress check (tests/test_progress.py): busy loops, idle servers, poll
loops, a slow first step, `import torch`, computing children and asyncio tasks waiting for work,
each beside a thread that prints all the time, end by themselves and are told nothing. A file of
its own so that the test run spreads it over another worker."""
import textwrap

import pytest

from support import TIMEOUT, report_json, run_python, script
from test_progress import CHATTY, STALL, stall_lines

HEALTHY = {
    "busy loop": """
        end = time.time() + 6
        n = 0
        while time.time() < end:
            n += 1
        """,
    "idle socket server": """
        import socket
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        def client():
            time.sleep(6)
            socket.create_connection(server.getsockname()).close()
        threading.Thread(target=client, daemon=True).start()
        conn, _ = server.accept()
        conn.close()
        """,
    "sleeping poll loop": """
        import os
        end = time.time() + 6
        while time.time() < end and not os.path.exists("/nonexistent/ready"):
            time.sleep(0.5)
        """,
    "slow first step": """
        import torch
        model = torch.nn.Linear(128, 128)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        a = torch.randn(128, 128)
        end = time.time() + 6  # loading and compiling: computing before the first step
        while time.time() < end:
            a = (a @ a).tanh()
        for step in range(20):
            loss = model(torch.randn(4, 128)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.05)
        """,
    "training, then a slow upload after the last epoch": """
        import torch
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 8), torch.randn(40, 1)),
                                           batch_size=4)
        for epoch in range(2):
            for x, y in data:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(0.05)
        time.sleep(5)  # uploading the checkpoint: no step is due any more
        """,
    "child computing": """
        import os, subprocess, sys
        env = {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}
        subprocess.run([sys.executable, "-c", "import time\\nend = time.time() + 6\\nwhile time.time() < end: pass"],
                       env=env, check=True)
        """,
    "process pool computing": """
        import concurrent.futures, multiprocessing
        def crunch(n):
            end = time.time() + 5
            while time.time() < end:
                n += 1
            return n
        if __name__ == "__main__":
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
                print(list(pool.map(crunch, range(2))))
        """,
    "import torch": """
        import torch
        time.sleep(2)
        """,
    # Tasks that wait for work or for other tasks: a server's idle client, workers in a gather, a
    # queue's consumer, an executor computing, a service's main task on its stop event.
    "asyncio tasks waiting for work": """
        import asyncio
        async def handle(reader, writer):
            while await reader.readline():
                pass
        async def worker(n):
            while True:
                await asyncio.sleep(0.05)
        async def consumer(queue):
            while True:
                await queue.get()
        def crunch():
            end = time.time() + 5
            while time.time() < end:
                pass
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            idle = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
            queue, stop = asyncio.Queue(), asyncio.Event()
            tasks = [asyncio.create_task(c) for c in (server.serve_forever(), consumer(queue))]
            tasks.append(asyncio.gather(*(worker(n) for n in range(3))))
            loop = asyncio.get_running_loop()
            loop.call_later(2, queue.put_nowait, 1)
            computing = loop.run_in_executor(None, crunch)
            loop.call_later(5.5, stop.set)
            await stop.wait()
            await computing
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run(main())
        """,
}


@pytest.mark.parametrize("kind", sorted(HEALTHY))
def test_healthy_programs_beside_a_chatty_thread_get_no_stall_line_and_no_cause(tmp_path, logdir, kind):
    res = run_python([script(tmp_path, textwrap.dedent(CHATTY) + textwrap.dedent(HEALTHY[kind]))], logdir,
                     env={"EARLYLOG_STALL": STALL, "EARLYLOG_NATIVE": 0}, timeout=TIMEOUT)
    assert res.returncode == 0, res.err[-2000:]
    # Its own log: a spawned pool's helpers (multiprocessing's resource tracker) are silent processes.
    assert " stall: " not in res.err and [line for line in stall_lines(logdir) if " script stall: " in line] == []
    rep = report_json(logdir)
    assert rep["causes"] == [] and {p["state"] for p in rep["processes"]} == {"exited"}
