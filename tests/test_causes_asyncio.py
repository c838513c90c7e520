"""asyncio causes: an event loop blocked by a synchronous call inside a coroutine is named with the
task, its coroutine, the line and the call; a task that died with an exception nobody retrieved,
while another task waits for what it would have produced, is named with its exception, its line
and the waiting task. No false alarm: an idle asyncio server stays idle, a loop computing is busy.
Real programs, read back with `earlylog report`."""
import os
import subprocess

import pytest

from support import clean_env, log_files, python_3, read, reports_when, script, start

QUIET = {"EARLYLOG_NATIVE": "0"}  # no gdb/py-spy pass: it pauses every thread for seconds

PROGRAMS = {
    # A neighbour thread waits quietly beside the loop: each thread gets its own notes. (The watchdog
    # writes its dump after a silence; a neighbour that prints is the per-thread watchdog's matter.)
    "sleep_loop": """
        import asyncio, threading, time
        threading.Thread(target=threading.Event().wait, name="sidecar", daemon=True).start()

        async def ticker():
            while True:
                await asyncio.sleep(0.2)

        async def fetch_all():
            await asyncio.sleep(0.1)
            time.sleep(3600)

        async def main():
            await asyncio.gather(fetch_all(), ticker())

        asyncio.run(main())
        """,
    # The same while a telemetry thread prints all the time: the per-thread watchdog sees the loop's
    # thread stay in one task's step (docs/watchdog.md#progress).
    "noisy_loop": """
        import asyncio, threading, time

        def telemetry():
            while True:
                print("telemetry: gpu 0%", flush=True)
                time.sleep(0.3)

        async def heartbeat():
            while True:
                print("tick", flush=True)
                await asyncio.sleep(0.2)

        async def fetch_all():
            await asyncio.sleep(0.1)
            time.sleep(3600)

        async def main():
            await asyncio.gather(fetch_all(), heartbeat())

        threading.Thread(target=telemetry, daemon=True).start()
        asyncio.run(main())
        """,
    "recv_loop": """
        import asyncio, socket
        listener = socket.create_server(("127.0.0.1", 0))

        async def ask_backend():
            sock = socket.create_connection(listener.getsockname())
            sock.sendall(b"ping")
            return sock.recv(100)

        async def main():
            await asyncio.sleep(0.1)
            await asyncio.gather(ask_backend(), asyncio.sleep(3600))

        asyncio.run(main())
        """,
    # The classic: the producer raises, nobody awaits it, the consumer awaits queue.get() for ever.
    # A task nobody keeps is freed as it fails, and asyncio says so on stderr ...
    "lost_producer": """
        import asyncio

        async def producer(queue):
            for row in ["1", "2", "x"]:
                await asyncio.sleep(0.05)
                await queue.put(int(row))

        async def consumer(queue):
            while True:
                print(await queue.get())

        async def main():
            queue = asyncio.Queue()
            asyncio.create_task(producer(queue))
            await asyncio.create_task(consumer(queue))

        asyncio.run(main())
        """,
    # ... one the program keeps lives on, its exception unread: the dump finds it among the tasks,
    # and the consumer waits on the queue the producer held (here in `self.rows`).
    "kept_producer": """
        import asyncio

        def parse(row):
            raise ValueError("bad row %r" % row)

        class Feed:
            def __init__(self):
                self.rows = asyncio.Queue()

            async def produce(self):
                await asyncio.sleep(0.05)
                await self.rows.put(parse("x"))

        async def consumer(queue):
            return await queue.get()

        async def main():
            feed = Feed()
            feeder = asyncio.create_task(feed.produce())
            await asyncio.create_task(consumer(feed.rows))

        asyncio.run(main())
        """,
    # A server whose warm-up task failed long ago (kept, never awaited) and whose worker waits for
    # jobs: the worker waits on nothing the dead task held, so the server is idle.
    "server_failed_once": """
        import asyncio

        async def warm_cache():
            raise ConnectionError("cache down")

        async def worker(jobs):
            while True:
                await (await jobs.get())

        async def main():
            jobs = asyncio.Queue()
            warm = asyncio.create_task(warm_cache())
            busy = asyncio.create_task(worker(jobs))
            server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
            await server.serve_forever()

        asyncio.run(main())
        """,
    "idle_server": """
        import asyncio

        async def handle(reader, writer):
            await reader.readline()

        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            await server.serve_forever()

        asyncio.run(main())
        """,
    "busy_loop": """
        import asyncio

        async def crunch():
            total = 0
            while True:
                total += 1

        async def main():
            await asyncio.gather(crunch(), asyncio.sleep(3600))

        asyncio.run(main())
        """,
}


def _run(tmp_path, logdir, names, python=None, env=None, programs=PROGRAMS):
    procs = [start([script(tmp_path, programs[name], name + ".py")], logdir, **QUIET) if python is None else
             subprocess.Popen([python, script(tmp_path, programs[name], name + ".py")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for name in names]

    def dumped():  # twice each: the newest dump is read, with every thread in place
        logs = [read(f) for f in log_files(logdir)]
        return len(logs) == len(names) and all(text.count("dump: stall") >= 2 for text in logs)
    rep, text = reports_when(logdir, procs, dumped)
    return rep, text, {p["tag"]: p for p in rep["processes"]}


def _cause(rep, kind, pid):
    found = [c for c in rep["causes"] if c["kind"] == kind and pid in c["pids"]]
    assert len(found) == 1, rep["causes"]
    return found[0]


def test_blocked_loops_dead_tasks_and_no_false_alarms(tmp_path, logdir):
    rep, text, procs = _run(tmp_path, logdir, list(PROGRAMS))
    states = {tag: p["state"] for tag, p in procs.items()}
    assert states == {"sleep_loop": "stalled", "noisy_loop": "stalled", "recv_loop": "stalled", "lost_producer": "stalled",
                      "kept_producer": "stalled", "server_failed_once": "idle", "idle_server": "idle",
                      "busy_loop": "busy"}, rep["verdict"]

    blocked = _cause(rep, "loop-blocked", procs["sleep_loop"]["pid"])
    assert blocked["text"] == "pid %d (sleep_loop): the asyncio event loop in thread MainThread is blocked: task " \
                              "Task-2 (fetch_all) calls time.sleep at sleep_loop.py:11 inside a coroutine, so no " \
                              "other task runs (sleeping)" % procs["sleep_loop"]["pid"]
    assert blocked["next"].startswith("`await asyncio.sleep(...)` instead of time.sleep")
    assert "asyncio.to_thread" in blocked["next"] and "run_in_executor" in blocked["next"]

    noisy = _cause(rep, "loop-blocked", procs["noisy_loop"]["pid"])
    assert "blocked: task Task-2 (fetch_all) calls time.sleep at noisy_loop.py:16 inside a coroutine" in noisy["text"]

    recv = _cause(rep, "loop-blocked", procs["recv_loop"]["pid"])
    assert "blocked: task Task-2 (ask_backend) calls sock.recv at recv_loop.py:8 inside a coroutine, so no other " \
           "task runs (waiting in a network call from 127.0.0.1:" in recv["text"]
    assert "`await asyncio.to_thread(sock.recv, ...)`" in recv["next"]

    lost = _cause(rep, "task-died", procs["lost_producer"]["pid"])
    assert lost["text"] == "pid %d (lost_producer): asyncio task Task-2 (producer) died at lost_producer.py:7 with " \
                           "ValueError(\"invalid literal for int() with base 10: 'x'\"), and nobody awaited it; " \
                           "task Task-3 (consumer) waits for queue.get() at lost_producer.py:11 for what it would " \
                           "have produced" % procs["lost_producer"]["pid"]
    assert "await the task" in lost["next"] and "add_done_callback" in lost["next"]

    kept = _cause(rep, "task-died", procs["kept_producer"]["pid"])
    assert kept["text"] == "pid %d (kept_producer): asyncio task Task-2 (Feed.produce) died at kept_producer.py:5 " \
                           "with ValueError(\"bad row 'x'\"), and nobody awaited it; task Task-3 (consumer) waits " \
                           "for queue.get() at kept_producer.py:16 for what it would have produced" % \
                           procs["kept_producer"]["pid"]
    assert kept["next"].startswith("fix the ValueError in parse; ")

    # No false alarm: the server waits for clients, the computing loop is busy; neither gets a cause.
    assert procs["idle_server"]["idle"].startswith("waiting for connections in an asyncio server on 127.0.0.1:")
    assert procs["server_failed_once"]["idle"].startswith("waiting for connections in an asyncio server on ")
    quiet = {procs[tag]["pid"] for tag in ("idle_server", "busy_loop", "server_failed_once")}
    assert not [c for c in rep["causes"] if quiet & set(c["pids"])], rep["causes"]
    assert "the asyncio event loop in thread MainThread is blocked" in text and "nobody awaited it" in text


@pytest.mark.parametrize("minor", [9, 13])
def test_the_tasks_are_read_on_other_pythons(tmp_path, logdir, minor):
    """The notes come from inside the live process, whose tasks and frames differ by version."""
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_CONSOLE="off",
                    PYTHONPATH=launch.variables({})["PYTHONPATH"], **QUIET)
    rep, _text, procs = _run(tmp_path, logdir, ["sleep_loop", "kept_producer"], python=exe, env=env)
    assert "Python 3.%d" % minor in read(log_files(logdir)[0])
    assert "task Task-2 (fetch_all) calls time.sleep at sleep_loop.py:11" in \
        _cause(rep, "loop-blocked", procs["sleep_loop"]["pid"])["text"]
    assert "task Task-3 (consumer) waits for queue.get() at kept_producer.py:16" in \
        _cause(rep, "task-died", procs["kept_producer"]["pid"])["text"]


LOCKS = {
    # A heartbeat task prints all along: the loop runs on while one task waits for ever.
    "lock_twice": """
        import asyncio
        lock = asyncio.Lock()

        async def heartbeat():
            while True:
                print("tick", flush=True)
                await asyncio.sleep(0.2)

        async def save():
            async with lock:
                return 1

        async def step():
            async with lock:
                return await save()

        async def main():
            asyncio.create_task(heartbeat())
            await step()

        asyncio.run(main())
        """,
    "held_lock": """
        import asyncio

        class Cache:
            def __init__(self):
                self._lock = asyncio.Lock()
                self.ready = asyncio.Event()

            async def refresh(self):
                async with self._lock:
                    await self.ready.wait()  # nothing sets it: the lock is never let go

            async def get(self):
                async with self._lock:
                    return 1

        async def main():
            cache = Cache()
            asyncio.create_task(cache.refresh())
            await asyncio.sleep(0.1)
            await cache.get()

        asyncio.run(main())
        """,
    "crossed_locks": """
        import asyncio
        a, b = asyncio.Lock(), asyncio.Lock()

        async def one():
            async with a:
                await asyncio.sleep(0.1)
                async with b:
                    pass

        async def two():
            async with b:
                await asyncio.sleep(0.1)
                async with a:
                    pass

        async def main():
            await asyncio.gather(one(), two())

        asyncio.run(main())
        """,
    # No cause: a semaphore limiting work whose holder is slow, a lock whose holder sleeps.
    "throttled": """
        import asyncio
        slots, lock = asyncio.Semaphore(1), asyncio.Lock()

        async def fetch(i):
            async with slots:
                await asyncio.sleep(3600)

        async def tidy():
            async with lock:
                await asyncio.sleep(3600)

        async def main():
            await asyncio.gather(fetch(1), fetch(2), tidy(), tidy())

        asyncio.run(main())
        """,
}


def test_a_task_waiting_for_an_asyncio_lock_names_who_holds_it(tmp_path, logdir):
    """An asyncio.Lock that its own task holds (asyncio's locks are not reentrant), one held by a
    task that waits for an Event nothing sets, two tasks each holding the lock the other wants: each
    named with the lock as the code writes it and where its holder took it; a slow semaphore holder
    and a sleeping lock holder are no cause."""
    rep, text, procs = _run(tmp_path, logdir, list(LOCKS), programs=LOCKS)
    twice = _cause(rep, "task-lock", procs["lock_twice"]["pid"])
    assert twice["text"].endswith("asyncio task Task-1 waits for asyncio.Lock `lock` in save at lock_twice.py:11, "
                                  "which it already holds: it took it in step at lock_twice.py:15, and asyncio's "
                                  "locks are not reentrant, so the task waits for itself"), twice["text"]
    assert "do not take `lock` again" in twice["next"]
    assert "an asyncio task awaits asyncio.Lock `lock` there, which that task holds itself" in \
        procs["lock_twice"]["summary"], procs["lock_twice"]["summary"]

    held = _cause(rep, "task-lock", procs["held_lock"]["pid"])
    assert held["text"].endswith("asyncio task Task-1 waits for asyncio.Lock `self._lock` in get at held_lock.py:14, "
                                 "held by task Task-2 since refresh at held_lock.py:10, which itself waits for "
                                 "asyncio.Event `self.ready` in refresh at held_lock.py:11"), held["text"]
    assert "find why task Task-2's wait never ends" in held["next"]

    crossed = [c for c in rep["causes"] if c["kind"] == "task-lock" and procs["crossed_locks"]["pid"] in c["pids"]]
    assert crossed and all("the two tasks wait for each other (a deadlock)" in c["text"] for c in crossed), crossed
    assert "take the locks in one order" in crossed[0]["next"]

    assert not [c for c in rep["causes"] if procs["throttled"]["pid"] in c["pids"]], rep["causes"]
    assert "which it already holds" in text


UNMARKED = """
    import asyncio

    async def worker(q):
        while True:
            item = await q.get()
            if item % 5 == 0:
                continue  # skipped without task_done()
            q.task_done()

    async def main():
        q = asyncio.Queue()
        asyncio.create_task(worker(q))
        for i in range(1, 11):
            q.put_nowait(i)
        await q.join()

    asyncio.run(main())
    """


def test_an_asyncio_queue_join_whose_consumer_skipped_task_done_names_the_missing_call(tmp_path, logdir):
    rep, _text, procs = _run(tmp_path, logdir, ["unmarked"], programs={"unmarked": UNMARKED})
    cause = _cause(rep, "task-done", procs["unmarked"]["pid"])
    assert cause["text"].endswith("asyncio task Task-1 awaits join() in main at unmarked.py:16 for 2 unfinished items "
                                  "of asyncio.Queue `q`, which is empty; its consumer task Task-2 awaits get() for "
                                  "more (worker at unmarked.py:6): an item was got without task_done(), so join() "
                                  "never returns"), cause["text"]
    assert "finally:" in cause["next"]
