"""gevent and eventlet: a monkey-patched program's stall names the greenlet that waits and what it
waits on (an Event nothing sets, a lock another greenlet holds across a sleep, a Queue nothing
fills), not the hub's `run at hub.py:647`; an idle StreamServer (an eventlet WSGI server) stays
idle; earlylog's watchdog goes on as a real OS thread after the patching. Real gevent and
eventlet, real processes, read back with `earlylog report`."""
import os

import pytest

from support import TIMEOUT, earlylog, kill_tree, log_files, read, report_json, run_python, script, start, wait_for

pytest.importorskip("gevent")
pytest.importorskip("eventlet")

# Silent programs: the watchdog dumps a process after EARLYLOG_STALL seconds of silence, and all
# greenlets share one OS thread, so a greenlet printing beside the stuck one keeps it from dumping.
STUCK = """
    from gevent import monkey; monkey.patch_all()
    import threading
    import gevent, gevent.event, gevent.queue
    ready = gevent.event.Event()
    cache_lock = threading.Lock()
    jobs = gevent.queue.Queue()
    def wait_ready():
        ready.wait()
    def refresh():
        with cache_lock:
            gevent.sleep(600)
    def lookup():
        gevent.sleep(0.1)
        with cache_lock:
            pass
    def consume():
        jobs.get()
    gevent.joinall([gevent.spawn(f) for f in (wait_ready, refresh, lookup, consume)])
    """
# The same waits under eventlet, which is pure Python: its own frames sit inside the user's calls.
EV_STUCK = """
    import eventlet; eventlet.monkey_patch()
    import threading
    import eventlet.event
    ready = eventlet.event.Event()
    cache_lock = threading.Lock()
    def wait_ready():
        ready.wait()
    def refresh():
        with cache_lock:
            eventlet.sleep(600)
    def lookup():
        eventlet.sleep(0.1)
        with cache_lock:
            pass
    for g in [eventlet.spawn(f) for f in (wait_ready, refresh, lookup)]:
        g.wait()
    """
EV_SERVER = """
    import eventlet; eventlet.monkey_patch()
    from eventlet import wsgi
    wsgi.server(eventlet.listen(("127.0.0.1", 0)), lambda env, start: [], log_output=False)
    """
# A server with a client connected and quiet: its handler waits for the client's next request
# (the connection's local port is the one the server listens on). create_connection resolves the
# address in gevent's thread pool, whose idle worker thread must not read as a stuck lock.
SERVER = """
    from gevent import monkey; monkey.patch_all()
    import socket
    from gevent.server import StreamServer
    def handle(sock, addr):
        while sock.recv(10):
            pass
    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    client = socket.create_connection(server.address)
    server.serve_forever()
    """


def test_a_gevent_stall_names_the_waiting_greenlets_and_an_idle_server_is_idle(tmp_path, logdir):
    programs = (("stuck", STUCK), ("server", SERVER), ("ev_stuck", EV_STUCK), ("ev_server", EV_SERVER))
    procs = [start(["-W", "ignore", script(tmp_path, code, name + ".py")], logdir) for name, code in programs]
    try:
        def dumped():
            logs = [read(f) for f in log_files(logdir)]
            return len(logs) == len(programs) and all("greenlets: " in text for text in logs)
        wait_for(dumped)
        rep = report_json(logdir)
        text = earlylog("report", logdir).stdout
    finally:
        for proc in procs:
            kill_tree(proc)
    procs = {p["tag"]: p for p in rep["processes"]}
    assert procs["server"]["state"] == "idle", rep["verdict"]
    assert procs["server"]["idle"] == "waiting for clients in a gevent server"
    assert not [c for c in rep["causes"] if procs["server"]["pid"] in c["pids"]], rep["causes"]
    assert ", ESTABLISHED, server; " in read(os.path.join(logdir, procs["server"]["files"][0]))
    stuck = procs["stuck"]
    assert stuck["state"] == "stalled", rep["verdict"]
    # The place is the greenlet's, not the hub's.
    assert "hub.py" not in stuck["summary"]
    assert stuck["where"]["function"] == "lookup"
    assert "(greenlet lookup waits on lock `cache_lock` (threading.Lock, patched by gevent) there)" in stuck["summary"]
    causes = [c for c in rep["causes"] if c["kind"] == "greenlet"]
    assert any(c["text"].startswith("pid %d (stuck): greenlet lookup waits on lock `cache_lock`" % stuck["pid"])
               and "greenlet refresh holds it (with block at stuck.py:11 in refresh) and now waits on sleep (gevent) "
                   "in refresh at stuck.py:12" in c["text"] and "`with cache_lock:`" in c["next"] for c in causes), [c["text"] for c in causes]
    assert any("greenlet wait_ready waits on event `ready` (gevent.event.Event) in wait_ready at stuck.py:9" in c["text"]
               and "ready.set()" in c["next"] for c in causes), [c["text"] for c in causes]
    assert any("greenlet consume waits on queue get `jobs` (gevent.queue.Queue) in consume at stuck.py:18" in c["text"]
               for c in causes), [c["text"] for c in causes]
    assert "greenlet lookup waits on lock `cache_lock`" in text
    log = read(os.path.join(logdir, stuck["files"][0]))
    # The dump lists the greenlets under the hub's thread, and not earlylog's own thread: the
    # watchdog still runs as a real OS thread and knows itself after patch_all().
    assert "  greenlet: main: " in log and "> waits on joinall (gevent.joinall)" in log
    assert "thread earlylog-watchdog" not in log
    # eventlet: the same words, its hub named.
    assert procs["ev_server"]["idle"] == "waiting for clients in an eventlet server", rep["verdict"]
    ev = procs["ev_stuck"]
    assert ev["state"] == "stalled" and ev["where"]["function"] == "lookup", rep["verdict"]
    assert any(c["text"].startswith("pid %d (ev_stuck): greenlet lookup waits on lock `cache_lock` (threading.Lock, "
                                    "patched by eventlet) in lookup at ev_stuck.py:14, under eventlet's hub" % ev["pid"])
               and "greenlet refresh holds it (with block at ev_stuck.py:10 in refresh)" in c["text"] for c in causes)
    assert any("greenlet wait_ready waits on event `ready` (eventlet.event.Event)" in c["text"] for c in causes)
    assert "thread earlylog-watchdog" not in read(os.path.join(logdir, ev["files"][0]))


# Stuck beside a chatty greenlet: the hub's thread moves all the time (a heartbeat greenlet
# prints), so the process is never silent; only the greenlets themselves can say one stopped.
NOISY = """
    from gevent import monkey; monkey.patch_all()
    import threading
    import gevent, gevent.event
    reply = gevent.event.AsyncResult()
    index_lock = threading.Lock()
    def heartbeat():
        while True:
            print("heartbeat: 12 requests/s", flush=True)
            gevent.sleep(0.2)
    def build_index():
        with index_lock:
            return reply.get()  # the answer nobody sends
    def search():
        gevent.sleep(0.1)
        with index_lock:
            pass
    gevent.spawn(heartbeat)
    gevent.joinall([gevent.spawn(build_index), gevent.spawn(search)])
    """
EV_NOISY = """
    import eventlet; eventlet.monkey_patch()
    import eventlet.event
    done = eventlet.event.Event()
    def heartbeat():
        while True:
            print("heartbeat", flush=True)
            eventlet.sleep(0.2)
    def upload():
        done.wait()  # nothing sends it
    eventlet.spawn(heartbeat)
    eventlet.spawn(upload).wait()
    """
# Healthy beside a chatty greenlet: a server's handler waiting for its client's next request, a
# worker on an empty queue until its producer puts, a sleeping poll loop, a client getting a quick
# reply after each request (a new AsyncResult each time), greenlets taking turns at a lock, a
# producer held back by a full queue, and the main greenlet waiting at its top level for its stop
# event (a service), for 5 s, then a clean exit.
HEALTHY = """
    from gevent import monkey; monkey.patch_all()
    import socket, threading
    import gevent, gevent.event, gevent.queue, gevent.server
    def heartbeat():
        while True:
            print("heartbeat", flush=True)
            gevent.sleep(0.2)
    def handle(sock, addr):
        while sock.recv(10):
            pass
    jobs = gevent.queue.Queue()
    def worker():
        while True:
            jobs.get()
    def poll():
        while True:
            gevent.sleep(0.5)
    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    client = socket.create_connection(server.address)
    def rpc():
        while True:
            reply = gevent.event.AsyncResult()
            gevent.spawn_later(0.05, reply.set, "ok")
            reply.get()
    turns = threading.Lock()
    def take_turns():
        while True:
            with turns:
                gevent.sleep(0.05)
    small = gevent.queue.Queue(1)
    def produce():
        while True:
            small.put(1)
    def consume():
        while True:
            small.get()
            gevent.sleep(0.05)
    for f in (heartbeat, worker, poll, rpc, take_turns, take_turns, take_turns, produce, consume):
        gevent.spawn(f)
    gevent.spawn_later(3, jobs.put, 1)
    stop = gevent.event.Event()
    gevent.spawn_later(5, stop.set)
    stop.wait()
    """


def test_a_greenlet_stuck_while_another_greenlet_prints_is_named_and_healthy_greenlets_are_not(tmp_path, logdir):
    from test_progress import stall_lines
    names = ("noisy", "ev_noisy")
    procs = [start(["-W", "ignore", script(tmp_path, code, name + ".py")], logdir, EARLYLOG_STALL=1)
             for name, code in zip(names, (NOISY, EV_NOISY))]
    try:
        # Each process's own stall dump: eventlet's slower import can leave one two dumps behind the other.
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) >= 2, timeout=30)
        rep = report_json(logdir)
        text = earlylog("report", logdir).stdout
    finally:
        for proc in procs:
            kill_tree(proc)
    lines = stall_lines(logdir)
    assert any("noisy stall: greenlet build_index on thread MainThread made no progress for 1 s while other greenlets "
               "kept running; waits on result `reply` (gevent.event.AsyncResult) in build_index at noisy.py:13"
               in line for line in lines), lines
    assert not any("greenlet heartbeat" in line or "greenlet search" in line for line in lines), lines
    assert any("ev_noisy stall: greenlet upload on thread MainThread made no progress" in line and
               "waits on event `done` (eventlet.event.Event) in upload at ev_noisy.py:10" in line for line in lines), lines
    procs = {p["tag"]: p for p in rep["processes"]}
    assert {p["state"] for p in procs.values()} == {"stalled"}, rep["verdict"]
    noisy = procs["noisy"]
    assert " ".join(noisy["summary"].split()).startswith(
        "stalled for ") and "in build_index at noisy.py:13 (greenlet build_index waits on result `reply` " \
        "(gevent.event.AsyncResult) there), while its hub ran the other greenlets" in " ".join(noisy["summary"].split()), \
        noisy["summary"]
    # The greenlet the stall names is the first cause of its process: the lock's waiter comes after it.
    mine = [c["text"] for c in rep["causes"] if c["pids"] == [noisy["pid"]]]
    assert mine and mine[0].startswith("pid %d (noisy): greenlet build_index waits on result `reply`" % noisy["pid"]), mine
    assert any("greenlet search waits on lock `index_lock`" in c and "greenlet build_index holds it" in c for c in mine), mine
    assert "greenlet upload waits on event `done`" in " ".join(text.split()), text
    healthy = run_python(["-W", "ignore", script(tmp_path, HEALTHY, "service.py")], logdir,
                         env={"EARLYLOG_STALL": 1, "EARLYLOG_NATIVE": 0}, timeout=TIMEOUT)
    assert healthy.returncode == 0, healthy.err[-2000:]
    assert [line for line in stall_lines(logdir) if " service stall: " in line] == []
    service = [p for p in report_json(logdir)["processes"] if p["tag"] == "service"]
    assert [p["state"] for p in service] == ["exited"]
