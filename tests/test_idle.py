"""Idle is not stuck: servers, event loops, worker queues and sleep loops waiting for work are
`idle`, while a thread awaiting a reply, a result or a task's end stays `stalled`; a process its
parent stops at the end of a run is `terminated`; a DataLoader worker waiting for indices is idle,
the one stuck in `__getitem__` is not. Real processes, read back with `earlylog report`."""
import os
import subprocess

from support import PYTHON, STALL, clean_env, earlylog, kill_tree, log_files, read, report_json, script, start, wait_for

# Each program, by the tag its log gets, with the state the report must give it.
PROGRAMS = {
    "asyncio_server": ("idle", """
        import asyncio
        async def handle(reader, writer):
            writer.close()
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            async with server:
                await server.serve_forever()
        asyncio.run(main())
        """),
    "keepalive_server": ("idle", """
        import asyncio, socket
        async def handle(reader, writer):
            while await reader.readline():  # the client's next request, which may come any time
                pass
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            client = socket.create_connection(server.sockets[0].getsockname())  # connected, quiet
            async with server:
                await server.serve_forever()
        asyncio.run(main())
        """),
    "forever_server": ("idle", """
        import asyncio
        async def main():
            server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
            await asyncio.Future()  # serve until killed: the idiom of many servers' main()
        asyncio.run(main())
        """),
    "until_stopped": ("idle", """
        import asyncio
        async def main():
            stop = asyncio.Event()  # a signal handler would set it
            server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
            await stop.wait()
        asyncio.run(main())
        """),
    "server_asks": ("stalled", """
        import asyncio
        async def ask_backend():
            return await asyncio.get_running_loop().create_future()  # a reply nobody sends
        async def main():
            server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
            await ask_backend()
        asyncio.run(main())
        """),
    "http_server": ("idle", """
        import http.server
        server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        server.serve_forever()
        """),
    "pause_server": ("idle", """
        import http.server, signal, threading
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        signal.pause()  # serve until Ctrl-C
        """),
    "join_server": ("idle", """
        import http.server, threading
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        serving = threading.Thread(target=server.serve_forever)
        serving.start()
        serving.join()
        """),
    "event_server": ("idle", """
        import http.server, threading
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        threading.Event().wait()  # a signal handler would set it
        """),
    "no_sentinel": ("stalled", """
        import queue, threading
        jobs = queue.Queue()
        def consume():
            while True:
                jobs.get()
        worker = threading.Thread(target=consume)
        worker.start()
        jobs.put(1)
        worker.join()  # the worker is never told to stop: this program never ends
        """),
    "heartbeat": ("idle", """
        import queue, threading, time
        jobs = queue.Queue()
        def consume():
            while True:
                jobs.get()
        for _ in range(2):
            threading.Thread(target=consume, daemon=True).start()
        while True:
            time.sleep(0.3)
        """),
    "sigterm_service": ("idle", """
        import signal, threading, time
        stop = threading.Event()
        def heartbeat():
            while not stop.is_set():
                time.sleep(30)
        threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
        signal.signal(signal.SIGTERM, lambda *args: stop.set())
        stop.wait()  # a service's main thread: until SIGTERM's handler sets the event
        """),
    "pause_daemon": ("idle", """
        import signal, threading, time
        def housekeeping():
            while True:
                time.sleep(1)
        threading.Thread(target=housekeeping, daemon=True).start()
        signal.signal(signal.SIGHUP, lambda *args: print("reload"))
        while True:
            signal.pause()
        """),
    "ready_wait": ("stalled", """
        import signal, threading
        ready, stopping = threading.Event(), []
        signal.signal(signal.SIGTERM, lambda *args: stopping.append(1))  # a handler, but not for `ready`
        ready.wait()  # set by a loader that never came
        """),
    "fetch_reply": ("stalled", """
        import socket
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        def fetch_reply():
            client.sendall(b"ping")
            return client.recv(100)
        fetch_reply()
        """),
    "async_client": ("stalled", """
        import asyncio, socket
        listener = socket.create_server(("127.0.0.1", 0))
        async def fetch_reply():
            reader, writer = await asyncio.open_connection(*listener.getsockname())
            return await reader.read(100)
        asyncio.run(fetch_reply())
        """),
    "async_gather": ("stalled", """
        import asyncio
        async def fetch_weights(url):
            return await asyncio.get_running_loop().create_future()  # nobody ever sets it
        async def main():
            await asyncio.gather(fetch_weights("a"), fetch_weights("b"))
        asyncio.run(main())
        """),
    "pool_task": ("stalled", """
        import time
        from concurrent.futures import ThreadPoolExecutor
        def slow_task():
            time.sleep(3600)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(slow_task).result()
        """),
    "result_wait": ("stalled", """
        import queue
        results = queue.Queue()
        def collect_result():
            return results.get()
        collect_result()
        """),
}


# Servers whose every thread waits for work: their stall lines stay in their logs, off the console
# (runtime/stuck.py's waiting_for_work); every stuck program's goes to its console.
QUIET = {"asyncio_server", "keepalive_server", "http_server", "join_server", "event_server"}


def _with_console(path, logdir, console):
    with open(console, "wb") as err:
        return subprocess.Popen([PYTHON, path], env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **dict(STALL, EARLYLOG_CONSOLE="stderr")),
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)


def test_idle_programs_are_idle_and_waiting_ones_stuck(tmp_path, logdir):
    procs = [_with_console(script(tmp_path, code, name + ".py"), logdir, tmp_path / (name + ".err"))
             for name, (_, code) in PROGRAMS.items()]
    try:
        def all_dumped():
            # Two stall dumps each: on a loaded machine a program's first (at 1 s) may come while it
            # still starts (a server before its client connected); the report reads the newest.
            logs = {os.path.basename(f).rsplit("-", 1)[1][:-4]: read(f) for f in log_files(logdir)}
            return set(logs) == set(PROGRAMS) and all(text.count("dump: stall") >= 2 for text in logs.values())
        wait_for(all_dumped)
        rep = report_json(logdir)
        text = earlylog("report", logdir).stdout
    finally:
        for proc in procs:
            kill_tree(proc)
    states = {p["tag"]: p["state"] for p in rep["processes"]}
    assert states == {name: state for name, (state, _) in PROGRAMS.items()}, ({k: v for k, v in states.items() if v != PROGRAMS[k][0]}, rep["verdict"])
    procs = {p["tag"]: p for p in rep["processes"]}
    assert procs["asyncio_server"]["idle"].startswith("waiting for connections in an asyncio server on 127.0.0.1:")
    # A server's main() parked on a bare Future or an Event is serving; one awaiting a reply deeper
    # down, beside the same server, is stuck.
    assert procs["forever_server"]["idle"].startswith("waiting for connections in an asyncio server on 127.0.0.1:")
    assert procs["until_stopped"]["idle"].startswith("waiting for connections in an asyncio server on ")
    assert procs["server_asks"]["where"]["function"] == "ask_backend"
    assert procs["http_server"]["summary"].startswith("idle for ")
    assert "waiting for work in serve_forever, in <module> at http_server.py:4" in procs["http_server"]["summary"]
    assert procs["heartbeat"]["idle"].startswith("sleeping in <module>")
    assert procs["fetch_reply"]["where"]["function"] == "fetch_reply"
    assert procs["result_wait"]["where"]["function"] == "collect_result"
    # An event loop's stall is where its tasks wait, not the asyncio.run() line; the task that
    # waits for the others is named by what it waits for.
    assert procs["async_client"]["where"]["function"] == "fetch_reply"
    # The task's socket is in the dump: a reply that never comes is a network cause, as for a blocking call.
    assert any(c["kind"] == "network" and c["text"].startswith("pid %d (async_client), in fetch_reply at "
               "async_client.py:6, has been waiting for a reply from 127.0.0.1:" % procs["async_client"]["pid"])
               and "asyncio.wait_for" in c["next"] for c in rep["causes"]), rep["causes"]
    assert procs["async_gather"]["where"] == {"file": os.path.join(str(tmp_path), "async_gather.py"), "line": 4,
                                              "function": "fetch_weights"}
    assert "in fetch_weights at async_gather.py:4 (2 asyncio tasks await a Future there)" in \
        procs["async_gather"]["summary"]
    assert "in main > awaiting gather of 2 tasks" in read(os.path.join(logdir, procs["async_gather"]["files"][0]))
    assert rep["verdict"][0] == "8 of 19 processes in trouble: 8 stuck"
    # Waiting to be told by a signal is a service's idleness; an event no handler sets is a wait.
    assert procs["sigterm_service"]["idle"] == "waiting to be told to stop: the SIGTERM handler <lambda> at " \
                                               "sigterm_service.py:8 sets the event it waits on"
    assert procs["pause_daemon"]["idle"] == "waiting for a signal (it handles SIGHUP with <lambda> at pause_daemon.py:7)"
    assert procs["ready_wait"]["where"]["line"] == 5
    # A main thread parked until Ctrl-C, on a stop event or in a join of its server's thread, while
    # that thread serves, is a server waiting for requests; a join of a queue worker never told to
    # stop is a program that never ends.
    assert procs["pause_server"]["idle"] == "waiting for work in serve_forever in thread Thread-1 " \
                                            "(serve_forever); the main thread waits for a signal (Ctrl-C)"
    assert procs["join_server"]["idle"].endswith("; the main thread waits in a join of the server's thread "
                                                 "Thread-1 (serve_forever)")
    assert procs["event_server"]["idle"].endswith("; the main thread waits on an event (to stop)")
    assert any(c["kind"] == "queue-orphaned" and "(no_sentinel): thread Thread-1 (consume) waits in consume at "
               "no_sentinel.py:" in c["text"] and "queue `jobs`" in c["text"] and "thread MainThread waits for it in "
               "join: no end of work (a sentinel) was ever sent" in c["text"] for c in rep["causes"]), rep["causes"]
    assert procs["keepalive_server"]["idle"].startswith("waiting for connections in an asyncio server on ")
    assert not any("_server" in line or "heartbeat" in line for line in rep["verdict"]), rep["verdict"]
    assert "http_server idle" in text and "idle for" in text
    consoles = {name: (tmp_path / (name + ".err")).read_text() for name in PROGRAMS}
    for name in QUIET:
        assert "stall:" not in consoles[name], consoles[name]
        assert "stall: silent for 1 s; idle: every thread waits for work" in read(
            os.path.join(logdir, procs[name]["files"][0]))
    for name, (state, _) in PROGRAMS.items():
        assert state != "stalled" or " stall: silent for " in consoles[name], (name, consoles[name])


def test_a_launcher_waiting_for_a_working_child_is_idle(tmp_path, logdir):
    # accelerate's launcher waits for its script and copies the child's stderr in a thread; a
    # parent joins a worker that prints: waiting for work being done is not being stuck.
    proc = start([script(tmp_path, """
        import subprocess, sys, threading
        child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True:\\n    print(1, flush=True)\\n"
                                  "    time.sleep(0.3)"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        def copy_stderr():
            for line in child.stderr:
                sys.stderr.buffer.write(line)
        threading.Thread(target=copy_stderr, name="copy_stderr").start()
        child.wait()
        """, "launch.py")], logdir)
    try:
        wait_for(lambda: any("dump: stall" in read(f) for f in log_files(logdir) if f.endswith("-launch.log")))
        rep = wait_for(lambda: (lambda r: r if r["counts"]["processes"] == 2 else None)(report_json(logdir)))
    finally:
        kill_tree(proc)
    launcher = next(d for d in rep["processes"] if d["tag"] == "launch")
    child = next(d for d in rep["processes"] if d["tag"] == "cmd")
    assert launcher["state"] == "idle" and child["state"] == "running", rep["verdict"]
    assert launcher["idle"] == "waiting for its child %d (cmd), which is running" % child["pid"]
    assert rep["verdict"][0] == "2 processes, none in trouble: 1 idle, 1 running"


def test_children_stopped_by_their_parent_at_the_end_are_not_trouble(tmp_path, logdir):
    path = script(tmp_path, """
        import subprocess, sys, time
        if sys.argv[1:] == ["serve"]:
            import http.server
            http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler).serve_forever()
        children = [subprocess.Popen([sys.executable, __file__, "serve"]) for _ in range(2)]
        time.sleep(3)  # both children dump their idle stacks (EARLYLOG_STALL=1)
        children[0].terminate()
        children[1].kill()
        for child in children:
            child.wait()
        """, "supervisor.py")
    proc = start([path], logdir)
    try:
        proc.wait(timeout=60)
    finally:
        kill_tree(proc)
    rep = report_json(logdir)
    parent = next(p for p in rep["processes"] if p["ppid"] not in {q["pid"] for q in rep["processes"]})
    kids = [p for p in rep["processes"] if p is not parent]
    assert parent["state"] == "exited" and len(kids) == 2
    assert {p["state"] for p in kids} == {"terminated"}, [p["summary"] for p in kids]
    assert all(p["summary"].startswith("stopped at the end of the run: ") for p in kids)
    assert all(("then its parent %d (supervisor) exited with status 0" % parent["pid"]) in p["summary"] for p in kids)
    assert rep["verdict"][0] == "3 processes, none in trouble: 1 exited, 2 terminated"
    assert sorted(p["summary"].split(": ")[1].split(",")[0] for p in kids) == [
        "ended by SIGTERM", "ended with no exit record (SIGKILL)"]


def test_the_dataloader_worker_stuck_in_getitem_is_the_one_named_not_the_idle_one(tmp_path, logdir):
    path = script(tmp_path, """
        import threading
        import torch
        from torch.utils.data import DataLoader, Dataset
        class Shards(Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                if i == 5:
                    threading.Event().wait()  # a shard download that never finishes
                return torch.tensor([i])
        if __name__ == "__main__":
            for batch in DataLoader(Shards(), batch_size=4, num_workers=2):
                print(batch.tolist())
        """, "shards.py")
    proc = start([path], logdir, EARLYLOG_NATIVE=0)
    try:
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) >= 3)
        rep = report_json(logdir)
    finally:
        kill_tree(proc)
    workers = {p["phase"].split(" (")[0]: p for p in rep["processes"] if p["ppid"] == proc.pid}
    assert workers["DataLoader worker 0 of 2"]["idle"] == "waiting for work in a DataLoader worker"
    stuck = workers["DataLoader worker 1 of 2"]
    assert stuck["state"] == "stalled" and stuck["where"]["function"] == "__getitem__"
    assert rep["verdict"][0] == "2 of 3 processes in trouble: 2 stuck"
    assert rep["verdict"][1] == "pid %d (shards) waits in queues.get for child %d (fork<shards), which is stalled " \
                                "in __getitem__ at shards.py:10" % (proc.pid, stuck["pid"])
    # Read after the job was killed (a scheduler's time limit), the report still links the two.
    line = "pid %d (shards) had waited in queues.get for child %d (fork<shards), which had stalled in __getitem__ " \
           "at shards.py:10 when they ended" % (proc.pid, stuck["pid"])
    try:
        wait_for(lambda: line in report_json(logdir)["verdict"])
    except AssertionError:
        raise AssertionError(report_json(logdir)["verdict"])


def test_a_library_daemon_stuck_in_its_own_code_when_a_good_run_ends_is_not_trouble(tmp_path, logdir):
    """A library's own daemon (Ray's log monitor blocked on its GCS as the cluster shut down, seen
    in a loaded run) stuck in nothing but its own code, stopped by SIGTERM at the end of a run that
    exited 0, is no story of the run; the program's own code stuck there stays stalled."""
    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "daemonx.py").write_text("import threading\nlock = threading.Lock()\nlock.acquire()\n"
                                     "def publish():\n    lock.acquire()\npublish()\n")
    own = script(tmp_path, "import threading\nlock = threading.Lock()\nlock.acquire()\nlock.acquire()\n", "own.py")
    path = script(tmp_path, """
        import os, subprocess, sys, time
        env = dict(os.environ, PYTHONPATH=sys.argv[1])
        children = [subprocess.Popen([sys.executable, "-m", "daemonx"], env=env),
                    subprocess.Popen([sys.executable, sys.argv[2]])]
        time.sleep(3)  # both children dump their stacks (EARLYLOG_STALL=1)
        for child in children:
            child.terminate()
            child.wait()
        """, "supervisor.py")
    proc = start([path, str(site), own], logdir)
    try:
        proc.wait(timeout=60)
    finally:
        kill_tree(proc)
    rep = report_json(logdir)
    by_tag = {p["tag"]: p for p in rep["processes"]}
    assert by_tag["supervisor"]["state"] == "exited"
    assert by_tag["daemonx"]["state"] == "terminated", by_tag["daemonx"]["summary"]
    assert by_tag["daemonx"]["summary"].startswith("stopped at the end of the run: ")
    assert by_tag["own"]["state"] == "stalled" and "until it was stopped at the end of the run" in by_tag["own"]["summary"]
    assert rep["verdict"][0] == "1 of 3 processes in trouble: 1 stuck", rep["verdict"]
