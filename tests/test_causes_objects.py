"""Causes in the state of the object a thread waits on, and who can still change it: a barrier that
can never trip, a semaphore drained by failures, a lost wakeup, a queue whose producer ended, an
event nothing sets. Each program keeps another thread printing the whole time (the stall is found
by the stuck thread's lack of progress, not by silence), and each has a healthy look-alike that
must get no cause: parties that arrive slowly, a semaphore at its limit that turns over, a notify
that comes after the wait, a producer that is slow."""
import pytest

from support import log_files, read, report_json, script, start, wait_for
from test_causes_threads import QUIET, flat, leads, only, stalled_report

TICKER = """
    import threading, time
    def tick():
        n = 0
        while True:
            n += 1
            print("tick", n, flush=True)
            time.sleep(0.2)
    threading.Thread(target=tick, name="ticker", daemon=True).start()
    def run_all(target, prefix, count):
        workers = [threading.Thread(target=target, args=(i,), name="%s-%d" % (prefix, i)) for i in range(count)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
"""


def program(tmp_path, body, name):
    return script(tmp_path, TICKER + body, name)


def test_a_barrier_with_more_parties_than_threads_can_never_trip(tmp_path, logdir):
    proc = start([program(tmp_path, """
    barrier = threading.Barrier(4)
    def scan(shard):
        time.sleep(0.1)
        barrier.wait()
    run_all(scan, "scan", 3)
    """, "scan.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "barrier-short")
    text = flat(cause["text"])
    assert "barrier `barrier` can never trip: 3 of its 4 parties have arrived (threads scan-0, scan-1 and " \
           "scan-2 wait in scan at scan.py:" in text, text
    assert "no other live thread refers to it, so the last party never comes" in text
    assert "thread MainThread waits for them in join" in text
    assert "threading.Barrier(len(threads))" in cause["next"] and "BrokenBarrierError" in cause["next"]
    assert [c["kind"] for c in rep["causes"]] == ["barrier-short"], rep["causes"]  # not also the join
    leads(res, cause)


def test_a_semaphore_drained_by_failed_calls_names_the_failures_once_for_all_waiters(tmp_path, logdir):
    proc = start([program(tmp_path, """
    import logging
    logging.basicConfig(format="%(levelname)s %(message)s")
    slots = threading.BoundedSemaphore(3)
    attempts = iter(range(10 ** 6))
    def upload(n):
        slots.acquire()
        if n < 3:
            raise ConnectionError("upload %d refused" % n)
        time.sleep(0.05)
        slots.release()
    def uploader(_):
        while True:
            n = next(attempts)
            try:
                upload(n)
            except ConnectionError as e:
                logging.warning("upload failed: %s", e)
            time.sleep(0.05)
    run_all(uploader, "uploader", 4)
    """, "uploads.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "semaphore-drained")
    text = flat(cause["text"])
    assert "semaphore `slots` has 0 of its 3 permits free and no thread holds one" in text, text
    assert "threads uploader-0, uploader-1, uploader-2 and uploader-3 wait in upload at uploads.py:" in text
    assert "the program reported 3 failures before" in text and '"WARNING upload failed: upload 0 refused"' in text
    assert "`with slots:`" in cause["next"] and "upload at uploads.py:" in cause["next"]
    assert [c["kind"] for c in rep["causes"]] == ["semaphore-drained"], rep["causes"]  # once, not per thread
    leads(res, cause)


def test_a_notify_before_the_wait_is_a_lost_wakeup(tmp_path, logdir):
    proc = start([program(tmp_path, """
    cond = threading.Condition()
    model = None
    def load():
        global model
        with cond:
            model = "weights"
            cond.notify_all()
    threading.Thread(target=load, name="loader").start()
    time.sleep(0.5)
    def wait_for_model():
        with cond:
            cond.wait()
        return model
    wait_for_model()
    """, "serve.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "lost-wakeup")
    text = flat(cause["text"])
    assert "thread MainThread waits in wait_for_model at serve.py:" in text, text
    assert "for a notify on condition `cond`, with no predicate, and no other live thread refers to it" in text
    assert "(a lost wakeup)" in text
    assert "cond.wait_for(lambda: <it is ready>)" in cause["next"]
    leads(res, cause)


def test_a_predicate_nothing_can_make_true_is_a_condition_nothing_can_notify(tmp_path, logdir):
    proc = start([program(tmp_path, """
    cond = threading.Condition()
    jobs = []
    def worker(_):
        with cond:
            cond.wait_for(lambda: jobs)  # nothing left appends a job, nor notifies
    run_all(worker, "worker", 1)
    """, "pool.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "condition-unnotified")
    assert "thread worker-0 waits in worker at pool.py:" in flat(cause["text"]), cause["text"]
    assert "in wait_for() for condition `cond` whose predicate is false, and no other live thread refers to it" \
        in flat(cause["text"])
    leads(res, cause)


def test_a_consumer_whose_producer_ended_quietly_is_told_nothing_can_fill_its_queue(tmp_path, logdir):
    proc = start([program(tmp_path, """
    import queue
    records = queue.Queue()
    def produce():
        try:
            for i in range(3):
                records.put(i)
            raise ValueError("bad record 3")
        except ValueError:
            pass  # swallowed: the thread just ends
    threading.Thread(target=produce, name="producer").start()
    while True:
        item = records.get()
        print("got", item, flush=True)
    """, "consume.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "queue-orphaned")
    text = flat(cause["text"])
    assert "thread MainThread waits in <module> at consume.py:" in text, text
    assert "for an item from queue `records`, and no other live thread refers to it: nothing can put one in it" \
        in text
    assert "sentinel" in cause["next"] and "get() a timeout" in cause["next"]
    leads(res, cause)


def test_an_event_nothing_can_set_is_named(tmp_path, logdir):
    proc = start([program(tmp_path, """
    ready = threading.Event()
    def warm_up():
        time.sleep(0.1)  # returns without ready.set(): the path that sets it was skipped
    threading.Thread(target=warm_up, name="warmer").start()
    def serve():
        ready.wait()  # (a main thread's top-level wait on an event is a service waiting to be told to stop)
    serve()
    """, "warm.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "event-unset")
    assert "for event `ready`, which is not set, and no other live thread refers to it: nothing can set it" in \
        flat(cause["text"]), cause["text"]
    leads(res, cause)


HEALTHY = {
    # every round's parties arrive over 0.6 s, under the 1 s stall threshold, for 4 s
    "slow-barrier": """
    barrier = threading.Barrier(4)
    def scan(i):
        for round_ in range(7):
            time.sleep(0.15 * i)
            barrier.wait()
    run_all(scan, "scan", 4)
    """,
    # at its limit the whole time, each permit given back after 0.3 s
    "busy-semaphore": """
    slots = threading.BoundedSemaphore(2)
    def work(_):
        for _ in range(6):
            with slots:
                time.sleep(0.3)
    run_all(work, "worker", 4)
    """,
    # notified after the main thread has waited three stall thresholds
    "late-notify": """
    cond = threading.Condition()
    def load():
        time.sleep(3)
        with cond:
            cond.notify_all()
    threading.Thread(target=load, name="loader").start()
    def wait_for_model():
        with cond:
            cond.wait()
    wait_for_model()
    """,
    # set by a timer, and by a handler found in a table: what will set it is not on any stack yet
    "timer-and-table": """
    ready, done = threading.Event(), threading.Event()
    threading.Timer(2.5, ready.set).start()
    def finish():
        done.set()
    handlers = {"finish": finish}
    def later():
        time.sleep(2.5)
        handlers["finish"]()
    threading.Thread(target=later, name="later").start()
    def serve():
        ready.wait()
        done.wait()
    serve()
    """,
    # set by callbacks the program stored away, which no thread's stack shows: a finalizer that runs
    # when a ticker drops the last reference (as a C library's own thread would call one), and a
    # closure handed to a table that a later thread runs
    "stored-callbacks": """
    import weakref
    ready, done = threading.Event(), threading.Event()
    class Resource:
        pass
    held = [Resource()]
    weakref.finalize(held[0], ready.set)
    later = []
    def register(event):
        later.append(lambda: event.set())
    register(done)
    def release():
        time.sleep(2.5)
        held.clear()
        time.sleep(0.5)
        threading.Thread(target=later.pop(), name="runner").start()
    threading.Thread(target=release, name="releaser").start()
    def serve():
        ready.wait()
        done.wait()
    serve()
    """,
    # a reply a reader thread sets after three stall thresholds, from its table of pending calls
    "late-reply": """
    import concurrent.futures
    pending = {}
    def read_replies():
        time.sleep(3)
        pending.pop(7).set_result("ok")
    reply = pending[7] = concurrent.futures.Future()
    threading.Thread(target=read_replies, name="reader").start()
    def call():
        return reply.result()
    call()
    """,
    # a producer slower than the stall threshold, and a last party slower than it
    "slow-producer": """
    import queue
    records = queue.Queue()
    barrier = threading.Barrier(2)
    def produce():
        for i in range(2):
            time.sleep(1.6)
            records.put(i)
        time.sleep(1.6)
        barrier.wait()
    threading.Thread(target=produce, name="producer").start()
    for _ in range(2):
        records.get()
    barrier.wait()
    """,
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_look_alikes_get_no_cause(tmp_path, logdir, name):
    folder = logdir / name
    proc = start([program(tmp_path, HEALTHY[name], name + ".py")], folder, **QUIET)
    slow = name not in ("slow-barrier", "busy-semaphore")
    during = live_report(folder, proc) if slow else None
    assert proc.wait(timeout=30) == 0
    text = "".join(read(f) for f in log_files(folder))
    if slow:  # read while it waited past the stall threshold: a live thread can still change what it waits on
        assert during["causes"] == [], during["causes"]
        assert "can change it: no other thread" not in text, text[-3000:]
    else:
        assert text.count(" stall: ") == 0, text[-3000:]  # slow or full is not stuck
    assert report_json(folder)["causes"] == []


def live_report(folder, proc):
    """The report of a program read during its first stall dump, while it waits."""
    wait_for(lambda: any("dump: stall" in read(f) for f in log_files(folder)))
    assert proc.poll() is None, "it ended before its report was read: make its wait longer"
    return report_json(folder)


ASYNC = """
    import asyncio, time
    async def tick():
        n = 0
        while True:
            n += 1
            print("tick", n, flush=True)
            await asyncio.sleep(0.2)
    async def main():
        loop = asyncio.get_running_loop()
        loop.create_task(tick())
        pending = {}
        %s
    asyncio.run(main())
"""


def test_an_asyncio_future_nothing_can_complete_is_named(tmp_path, logdir):
    proc = start([script(tmp_path, ASYNC % """
        reply = pending[7] = loop.create_future()
        del pending[7]  # the reply for request 7 was dropped: nothing will set it
        await reply
    """, "client.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "future-orphaned")
    assert "asyncio task Task-1 awaits a Future in main at client.py:" in flat(cause["text"]), cause["text"]
    assert "no other task, callback, reader or thread refers to: nothing can complete it" in flat(cause["text"])
    assert "asyncio.wait_for" in cause["next"]
    leads(res, cause)


def test_an_asyncio_event_nothing_can_set_is_named_once_the_task_that_would_set_it_returned(tmp_path, logdir):
    proc = start([script(tmp_path, ASYNC % """
        ready = asyncio.Event()
        async def warm_up():
            await asyncio.sleep(0.1)  # returns without ready.set()
        await loop.create_task(warm_up())
        async def serve():
            await ready.wait()  # (a top-level `await stop.wait()` is a service waiting to be stopped)
        await serve()
    """, "warm.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "async-unset")
    assert "asyncio task Task-1 awaits asyncio.Event `ready` in serve at warm.py:" in flat(cause["text"]), \
        cause["text"]
    assert "no other task, callback, reader or thread refers to: nothing can set it" in flat(cause["text"])
    leads(res, cause)


@pytest.mark.parametrize("name, body", [
    ("queue-and-event", """
        jobs, ready = asyncio.Queue(), asyncio.Event()
        async def feed():
            await asyncio.sleep(2.5)
            await jobs.put(1)
            loop.call_later(1, ready.set)
        loop.create_task(feed())
        async def serve():
            await jobs.get()
            await ready.wait()
        await serve()
    """),
    ("timer", """
        reply = pending[7] = loop.create_future()
        loop.call_later(2.5, reply.set_result, "ok")  # a timer holds it
        await reply
    """),
    ("executor", """
        await loop.run_in_executor(None, time.sleep, 2.5)  # a thread pool's future completes it
    """),
    ("other-task", """
        reply = loop.create_future()
        async def answer(fut):
            await asyncio.sleep(2.5)
            fut.set_result("ok")
        loop.create_task(answer(reply))
        await reply
    """)])
def test_an_asyncio_future_something_will_complete_gets_no_cause(tmp_path, logdir, name, body):
    folder = logdir / name
    proc = start([script(tmp_path, ASYNC % body, name + ".py")], folder, **QUIET)
    # A Future awaited is read at a stall; a queue's or event's wait that a task can still end is
    # no stall at all (a service waits so for work or to be stopped).
    during = live_report(folder, proc) if name != "queue-and-event" else None
    assert proc.wait(timeout=30) == 0
    assert during is None or during["causes"] == [], during["causes"]
    assert report_json(folder)["causes"] == []
    assert not any("nothing completes" in read(f) for f in log_files(folder))
    assert any("dump: stall" in read(f) for f in log_files(folder)) == (name != "queue-and-event")


PROTOCOL = """
    import asyncio
    async def serve(reader, writer):
        line = await reader.readline()
        await asyncio.sleep(2.5)  # a slow server: the reply comes after two stall thresholds
        writer.write(line)
        await writer.drain()
    class Client(asyncio.Protocol):
        def __init__(self):
            self.pending = {}
        def connection_made(self, transport):
            self.transport = transport
        def data_received(self, data):
            self.pending.pop(int(data)).set_result(data)
        def call(self, request_id, register):
            reply = asyncio.get_running_loop().create_future()
            if register:
                self.pending[request_id] = reply
            self.transport.write(b"%d\\n" % request_id)
            return reply
    async def tick():
        while True:
            print("tick", flush=True)
            await asyncio.sleep(0.2)
    async def main():
        loop = asyncio.get_running_loop()
        loop.create_task(tick())
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, client = await loop.create_connection(Client, "127.0.0.1", port)
        reply = client.call(7, register=REGISTER)
        await reply
    asyncio.run(main())
"""


def test_a_reply_future_its_protocol_never_registered_is_named_and_a_registered_one_is_not(tmp_path, logdir):
    """The Future a client awaits is completed by its protocol's data_received, which the loop
    reaches through the connection it watches: registered there, it is waited for; not
    registered (the bug), nothing can complete it."""
    lost = start([script(tmp_path, PROTOCOL.replace("REGISTER", "False"), "lost.py")], logdir / "lost", **QUIET)
    kept = start([script(tmp_path, PROTOCOL.replace("REGISTER", "True"), "kept.py")], logdir / "kept", **QUIET)
    during = live_report(logdir / "kept", kept)
    assert kept.wait(timeout=30) == 0
    assert during["causes"] == [], during["causes"]
    assert not any("nothing completes" in read(f) for f in log_files(logdir / "kept"))
    rep, res = stalled_report(logdir / "lost", lost)
    cause = only(rep, "future-orphaned")
    assert "asyncio task Task-1 awaits a Future in main at lost.py:" in flat(cause["text"]), cause["text"]
    leads(res, cause)
