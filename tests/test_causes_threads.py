"""The report's causes across the threads of one process, and across a run that ended at once:
each scenario is a real program (locks, a lock copied locked by fork, joins, a dead worker, a
starved thread pool, C code holding the GIL, a stack overflow, a run killed from outside) read back with `earlylog report`; the cause sentence, its
next step and the JSON are checked, and healthy programs must get no cause at all."""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from earlylog.grammar import records
from support import (PYTHON, ROOT, TIMEOUT, clean_env, earlylog, free_port, kill_tree, log_files, python_3, read,
                     report_json, run_python, script, start, wait_for)

QUIET = {"EARLYLOG_NATIVE": "0"}  # no gdb/py-spy pass: it pauses every thread for seconds


def stalled_report(logdir, proc, dumps=2, needle="dump: stall"):
    """The JSON and text reports once the program has written `dumps` stall dumps (the newest is
    read, so every thread is in place), then the whole tree is killed."""
    try:
        wait_for(lambda: sum(read(f).count(needle) for f in log_files(logdir)) >= dumps)
        return report_json(logdir), earlylog("report", logdir)
    finally:
        kill_tree(proc)


def only(rep, kind):
    found = [c for c in rep["causes"] if c["kind"] == kind]
    assert len(found) == 1, rep["causes"]
    return found[0]


def flat(text):
    return " ".join(text.split())


def leads(res, cause):
    """The text report gives the cause and its next step before the process tree."""
    head = flat(res.stdout.partition(" in %s" % os.path.sep)[0])  # up to `N processes in /folder`
    assert flat(cause["text"]) in head and flat("next: " + cause["next"]) in head, res.stdout


def test_demo_hang_names_the_prefetch_thread_as_the_lock_holder(logdir):
    proc = start([os.path.join(ROOT, "scripts", "demo_hang.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    (pid,) = [p["pid"] for p in rep["processes"]]
    cause = rep["causes"][0]
    assert cause["kind"] == "lock" and cause["pids"] == [pid] and cause["threads"] == ["MainThread", "prefetch"]
    text = cause["text"]
    assert "`_cache_lock`" in text and "load_dataset at demo_hang.py:15" in text
    assert "thread prefetch holds it" in text and "prefetch_shards at demo_hang.py:10" in text
    assert "deadlock" not in text
    assert "release" in cause["next"] and "_cache_lock" in cause["next"]
    leads(res, cause)


def test_the_demo_script_shows_the_lock_holder_in_its_report():
    res = subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "demo.py")], env=clean_env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    report = res.stdout.partition("(while it is still stuck)")[2]
    assert res.returncode == 0, res.stdout + res.stderr
    assert "thread prefetch holds it" in flat(report) and "`_cache_lock`" in report


def test_two_locks_taken_in_opposite_order_are_a_deadlock_naming_both_threads(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading
        lock_a = threading.Lock()
        lock_b = threading.Lock()
        both = threading.Barrier(2)
        def transfer():
            with lock_a:
                both.wait()
                with lock_b:
                    pass
        def audit():
            with lock_b:
                both.wait()
                with lock_a:
                    pass
        workers = [threading.Thread(target=f, name=f.__name__) for f in (transfer, audit)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        """, "bank.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = rep["causes"][0]
    assert cause["kind"] == "deadlock" and sorted(cause["threads"]) == ["audit", "transfer"]
    text = cause["text"]
    for part in ("deadlock", "thread transfer holds `lock_a` (with block at bank.py:7)",
                 "waits for `lock_b` at bank.py:9", "thread audit holds `lock_b` (with block at bank.py:12)",
                 "waits for `lock_a` at bank.py:14"):
        assert part in text, text
    assert "one order" in cause["next"]
    # The main thread's join is explained by the deadlock, not by a second lock story.
    join = only(rep, "join")
    assert "thread transfer" in join["text"] and "deadlock" in join["text"]
    assert [c["kind"] for c in rep["causes"]].count("lock") == 0
    leads(res, cause)


def test_rlock_on_self_names_the_holder_and_what_the_holder_waits_for(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading, time
        class Cache:
            def __init__(self):
                self._lock = threading.RLock()
                self.ready = threading.Event()
            def refresh(self):
                with self._lock:
                    self.ready.wait()
            def get(self, key):
                with self._lock:
                    return key
        cache = Cache()
        threading.Thread(target=cache.refresh, name="refresher", daemon=True).start()
        time.sleep(0.1)
        cache.get("x")
        """, "cache.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "lock")
    assert cause["threads"] == ["MainThread", "refresher"]
    text = cause["text"]
    assert "`self._lock`" in text and "get at cache.py:11" in text
    assert "thread refresher holds it (with block at cache.py:8 in refresh)" in text
    assert "event `self.ready`" in text and "cache.py:9" in text
    assert "cache.py:9" in cause["next"]


def test_a_thread_taking_a_plain_lock_it_already_holds_is_told_to_use_an_rlock(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading
        registry_lock = threading.Lock()
        def register(name):
            with registry_lock:
                return validate(name)
        def validate(name):
            with registry_lock:
                return name
        register("x")
        """, "registry.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "lock")
    assert cause["threads"] == ["MainThread"]
    assert "validate at registry.py:8" in cause["text"] and "already holds" in cause["text"]
    assert "with block at registry.py:5 in register" in cause["text"]
    assert "RLock" in cause["next"]


def test_a_lock_a_signal_handler_takes_from_the_code_it_interrupted_is_named_so(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import signal, threading, time
        metrics_lock, metrics = threading.Lock(), {}
        def flush(signum, frame):
            with metrics_lock:  # the alarm lands while the loop below holds it
                print(metrics)
        signal.signal(signal.SIGALRM, flush)
        signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)
        step = 0
        while True:
            with metrics_lock:
                metrics["step"] = step = step + 1
                time.sleep(0.2)
        """, "alarm.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "lock")
    assert "thread MainThread waits for lock `metrics_lock` in flush at alarm.py:5: flush at alarm.py:4 is the " \
           "SIGALRM handler, and the code it interrupted holds the lock (with block at alarm.py:11 in <module>)" \
           in cause["text"], cause["text"]
    assert cause["next"].startswith("take no lock in a signal handler") and "RLock" not in cause["next"][:40]
    leads(res, cause)


def test_a_thread_started_and_joined_at_import_is_an_import_deadlock(tmp_path, logdir):
    (tmp_path / "warmcache.py").write_text(
        "import threading\n"
        "def _prefetch():\n"
        "    from warmcache import CACHE_DIR  # this module: its import is not done\n"
        "CACHE_DIR = '/tmp/cache'\n"
        "_t = threading.Thread(target=_prefetch, name='prefetch')\n"
        "_t.start()\n"
        "_t.join()\n")
    proc = start([script(tmp_path, "import warmcache\n", "main.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "import-deadlock")
    assert cause["text"].endswith("thread prefetch waits to import `warmcache` (_prefetch at warmcache.py:3), which "
                                  "thread MainThread is importing and cannot finish: its top-level code waits in "
                                  "join at warmcache.py:7 for thread prefetch: a deadlock"), cause["text"]
    assert "top-level code" in cause["next"] and cause["threads"] == ["prefetch", "MainThread"]
    assert [c["kind"] for c in rep["causes"]] == ["import-deadlock"]  # not also a join cause
    leads(res, cause)


def test_an_import_another_thread_started_and_that_never_ends_names_that_thread_and_where_it_waits(tmp_path,
                                                                                                   logdir):
    script(tmp_path, """
        import threading
        threading.Event().wait()  # a module whose import never ends
        """, "slowmod.py")
    proc = start([script(tmp_path, """
        import threading, time
        threading.Thread(target=lambda: __import__("slowmod"), name="loader", daemon=True).start()
        time.sleep(0.3)
        import slowmod
        """, "main.py")], logdir, cwd=str(tmp_path), **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "import")
    assert cause["threads"] == ["MainThread", "loader"]
    assert "thread MainThread waits to import `slowmod` (<module> at main.py:5), which thread loader is importing, " \
           "and thread loader itself waits for an unnamed event in <module> at slowmod.py:3" in cause["text"], \
        cause["text"]
    assert cause["next"] == "find why the import of `slowmod` does not end in thread loader"
    leads(res, cause)


def test_a_child_forked_while_a_thread_imports_names_the_copied_import_lock(tmp_path, logdir):
    # The child starts workers before it imports: one of them gets the stack, and so the ident,
    # of the parent's loader thread, which the copied lock still names as its owner.
    (tmp_path / "heavy.py").write_text("import time\ntime.sleep(2)  # a large package's import\n")
    proc = start([script(tmp_path, """
        import os, sys, threading, time
        sys.path.insert(0, os.path.dirname(__file__))
        loader = threading.Thread(target=__import__, args=("heavy",), name="loader", daemon=True)
        loader.start()
        for _ in range(4):
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        time.sleep(0.5)
        if os.fork() == 0:
            workers = [threading.Thread(target=time.sleep, args=(60,), name="worker", daemon=True) for _ in range(8)]
            for w in workers:
                w.start()
            with open(os.path.join(os.path.dirname(__file__), "reused"), "w") as f:
                f.write(str(any(w.ident == loader.ident for w in workers)))
            import heavy  # its import lock was held by the parent's loader thread at the fork
            os._exit(0)
        os.wait()
        """, "prefork.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc, dumps=2, needle="waits for: import heavy")
    assert (tmp_path / "reused").read_text() == "True", "no worker got the loader's ident: the case is not staged"
    cause = only(rep, "fork-lock")
    assert "thread MainThread waits for import `heavy` in <module> at prefork.py:15, held by no thread of this " \
           "process: it was made by fork() from pid %d while threads " % proc.pid in cause["text"]
    assert "loader ran there" in cause["text"] and "worker" not in cause["text"]
    leads(res, cause)


def test_join_names_the_joined_thread_and_where_it_is(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading
        ack = threading.Event()
        def upload():
            ack.wait()
        worker = threading.Thread(target=upload, name="uploader")
        worker.start()
        worker.join()
        ack.set()  # after the join: too late (a wait cycle, told as the join it is)
        """, "up.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "join")
    assert cause["threads"] == ["MainThread", "uploader"]
    text = cause["text"]
    assert "join at up.py:8" in text and "thread uploader" in text
    assert "upload at up.py:5" in text and "event `ack`" in text
    assert "uploader" in cause["next"]
    leads(res, cause)


def test_finished_program_kept_alive_by_a_non_daemon_thread_says_so(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading, time
        def heartbeat():
            while True:
                time.sleep(0.2)
        threading.Thread(target=heartbeat, name="heartbeat").start()
        print("done")
        """, "hb.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "shutdown")
    assert cause["threads"] == ["heartbeat"]
    assert "finished" in cause["text"] and "thread heartbeat" in cause["text"]
    assert "heartbeat at hb.py:5" in cause["text"]
    assert "_shutdown" not in cause["text"]
    assert "daemon=True" in cause["next"]
    leads(res, cause)


def test_a_finished_program_waiting_at_exit_for_its_thread_pool_s_stuck_task_says_so(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        never = threading.Event()
        pool = ThreadPoolExecutor(max_workers=2)
        pool.submit(never.wait)
        print("main code done")
        """, "pool.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "shutdown")
    assert [c["kind"] for c in rep["causes"]] == ["shutdown"], rep["causes"]  # not also Python's own join
    assert "the program's main code has finished, but at exit Python waits for the running task of a " \
           "ThreadPoolExecutor: thread ThreadPoolExecutor-0_0 waits for an unnamed event in wait at threading.py:" \
           in cause["text"], cause["text"]
    assert "cancel_futures=True" in cause["next"]
    leads(res, cause)


def test_worker_thread_that_died_is_the_reason_the_main_thread_waits(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import queue, threading
        batches = queue.Queue()
        def load_batches():
            raise ValueError("bad shard 3")
        threading.Thread(target=load_batches, name="loader", daemon=True).start()
        batch = batches.get()
        """, "train.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "thread-died")
    assert cause["threads"] == ["loader", "MainThread"]
    text = cause["text"]
    assert "thread loader died" in text and "ValueError: bad shard 3" in text
    assert "load_batches at train.py:5" in text
    assert "queue `batches`" in text and "train.py:7" in text
    assert "load_batches" in cause["next"] and "queue.get(timeout=...)" in cause["next"]
    leads(res, cause)


def test_a_producer_blocked_on_a_full_queue_whose_consumer_died_is_told_to_put_with_a_timeout(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import queue, threading
        batches = queue.Queue(maxsize=4)
        def consume():
            while True:
                if batches.get() == 2:
                    raise ValueError("bad item")
        threading.Thread(target=consume, name="consumer", daemon=True).start()
        for i in range(100):
            batches.put(i)
        """, "feed.py")], logdir, **QUIET)
    rep, _res = stalled_report(logdir, proc)
    cause = only(rep, "thread-died")
    assert "room in queue `batches` at feed.py:10" in cause["text"], cause["text"]
    assert "queue.put(timeout=...)" in cause["next"], cause["next"]


NESTED_POOL = """
    import sys, time
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(max_workers=2)
    inner_pool = pool if sys.argv[1] == "same" else ThreadPoolExecutor(max_workers=2)
    def tokenize(shard):
        time.sleep(60)  # slow, not stuck: it runs in a pool of its own when asked
    def load(shard):
        inner = inner_pool.submit(tokenize, shard)
        return inner.result()
    print([f.result() for f in [pool.submit(load, s) for s in range(2)]])
    """


def test_tasks_waiting_for_tasks_of_their_own_full_pool_are_a_starved_pool(tmp_path, logdir):
    proc = start([script(tmp_path, NESTED_POOL, "nest.py"), "same"], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "pool-starved")
    # Not also "a future nobody sets" for each worker: the future they wait for is queued in their pool.
    assert [c["kind"] for c in rep["causes"]] == ["pool-starved"], rep["causes"]
    assert sorted(cause["threads"]) == ["ThreadPoolExecutor-0_0", "ThreadPoolExecutor-0_1"]
    text = cause["text"]
    assert "both workers of ThreadPoolExecutor-0 wait for futures" in text
    assert "load at nest.py:10" in text and "future `inner`" in text and "no worker has started" in text
    assert "separate executor" in cause["next"] and "max_workers" in cause["next"]
    leads(res, cause)
    # The same program with the inner work in a pool of its own is slow, not starved.
    proc = start([script(tmp_path, NESTED_POOL, "nest.py"), "other"], logdir / "other", **QUIET)
    rep, res = stalled_report(logdir / "other", proc)
    assert rep["causes"] == [], rep["causes"]


def test_a_queue_join_whose_worker_skipped_task_done_names_the_missing_call(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import queue, threading
        jobs = queue.Queue()
        def worker():
            while True:
                item = jobs.get()
                if item % 5 == 0:
                    continue  # skipped without task_done()
                jobs.task_done()
        threading.Thread(target=worker, name="worker", daemon=True).start()
        for i in range(1, 11):
            jobs.put(i)
        jobs.join()
        """, "jobs.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "task-done")
    assert cause["text"].endswith("thread MainThread waits in join() at jobs.py:13 for 2 unfinished items of queue "
                                  "`jobs`, which is empty; its consumer thread worker waits in get() for more "
                                  "(worker at jobs.py:6): an item was got without task_done(), so join() never returns")
    assert "finally:" in cause["next"] and cause["threads"] == ["MainThread", "worker"]
    leads(res, cause)


def test_a_future_nothing_sets_is_named_and_one_a_pool_runs_is_not(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import queue, threading, time
        from concurrent.futures import Future, ThreadPoolExecutor
        replies = queue.Queue()
        threading.Thread(target=replies.get, name="rpc-reader", daemon=True).start()
        if len(__import__("sys").argv) > 1:
            pool = ThreadPoolExecutor(1)
            pool.submit(time.sleep, 3600)
            pending = pool.submit(time.sleep, 0)  # queued behind the first: not started yet
        else:
            pending = Future()  # a reply's future; the request was never sent
        pending.result()
        """, "rpc.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "future-unset")
    assert "thread MainThread waits in result() at rpc.py:12 for future `pending`, which no executor runs" in cause["text"]
    assert "timeout" in cause["next"]
    leads(res, cause)
    proc = start([os.path.join(str(tmp_path), "rpc.py"), "pool"], logdir / "pool", **QUIET)
    rep, _ = stalled_report(logdir / "pool", proc)
    assert [c for c in rep["causes"] if c["kind"] == "future-unset"] == [], rep["causes"]


def test_a_lock_held_by_another_thread_at_fork_is_named_in_the_child(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import multiprocessing as mp, threading, time
        cache_lock = threading.Lock()
        def refresh():
            while True:
                with cache_lock:
                    time.sleep(0.05)
        def load_shard():
            with cache_lock:
                print("loaded")
        if __name__ == "__main__":
            threading.Thread(target=refresh, name="refresher", daemon=True).start()
            time.sleep(0.2)
            child = mp.get_context("fork").Process(target=load_shard)
            child.start()
            child.join()
        """, "shards.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc, dumps=3)
    (child,) = [p for p in rep["processes"] if p["ppid"] == proc.pid]
    cause = only(rep, "fork-lock")
    assert cause["pids"] == [child["pid"], proc.pid] and cause["threads"] == ["MainThread"]
    text = cause["text"]
    assert "lock `cache_lock` in load_shard at shards.py:9" in text
    assert "made by fork() from pid %d while thread refresher ran there" % proc.pid in text
    assert "'spawn'" in cause["next"]
    assert not any(c["kind"] == "lock" for c in rep["causes"])  # not "an acquire() never released"
    leads(res, cause)


def test_a_child_forked_after_torch_computed_is_named_with_the_parent_s_native_threads(tmp_path, logdir):
    """torch's OpenMP pool starts at the parent's first matmul; a child forked then copies the pool's
    locks without its threads, and its own first matmul waits for them forever (0% CPU)."""
    pytest.importorskip("torch")
    proc = start([script(tmp_path, """
        import multiprocessing as mp
        import torch
        torch.set_num_threads(2)
        warm = torch.randn(1500, 1500) @ torch.randn(1500, 1500)
        def embed():
            print(float((torch.randn(1500, 1500) @ torch.randn(1500, 1500)).sum()))
        if __name__ == "__main__":
            child = mp.get_context("fork").Process(target=embed)
            child.start()
            child.join()
        """, "embed.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc, dumps=3)
    parent = read(next(f for f in log_files(logdir) if "-%d-" % proc.pid in f))
    assert re.search(r"fork: fork\(\) while \d+ threads? with no Python stack runs? \(a native pool", parent), parent
    (child,) = [p for p in rep["processes"] if p["ppid"] == proc.pid]
    cause = only(rep, "fork-lock")
    assert cause["pids"] == [child["pid"], proc.pid] and cause["threads"] == ["MainThread"]
    # Which way the child hangs depends on the BLAS: a futex wait (OpenBLAS, GNU OpenMP) or, with
    # Intel's MKL, a sched_yield loop at 100% of a core, nearly all of it in the kernel.
    assert re.search(r"thread MainThread (is blocked on a lock|is spinning) inside native code in embed at "
                     r"embed.py:7(, which| \(\d+%% of its CPU time in the kernel: a loop yielding to threads that do "
                     r"not exist, not arithmetic\), which) no thread of this process can release: it was made by "
                     r"fork\(\) from pid %d while \d+ threads? with no Python stack ran there" % proc.pid,
                     cause["text"]), cause["text"]
    assert "'spawn'" in cause["next"] and "OMP_NUM_THREADS=1" in cause["next"]
    assert child["state"] == "stalled", child
    leads(res, cause)


def test_a_child_forked_after_torch_computed_that_computes_itself_is_busy_with_no_fork_cause(tmp_path, logdir):
    """The healthy look-alike: forked after the parent's matmul started a native pool, the child
    computes in Python (its CPU time is its own, in user space): busy, no fork-lock cause."""
    pytest.importorskip("torch")
    proc = start([script(tmp_path, """
        import multiprocessing as mp, time
        import torch
        torch.set_num_threads(2)
        warm = torch.randn(1500, 1500) @ torch.randn(1500, 1500)
        def crunch():
            end = time.time() + 60
            while time.time() < end:
                sum(i * i for i in range(10000))
        if __name__ == "__main__":
            child = mp.get_context("fork").Process(target=crunch)
            child.start()
            child.join()
        """, "crunch.py")], logdir, **QUIET)
    rep, _res = stalled_report(logdir, proc, dumps=3)
    (child,) = [p for p in rep["processes"] if p["ppid"] == proc.pid]
    assert child["state"] == "busy", child
    assert not [c for c in rep["causes"] if c["kind"] == "fork-lock"], rep["causes"]


def test_a_child_of_os_fork_is_read_by_its_own_kernel_thread(tmp_path, logdir):
    # threading keeps the parent's native_id for the main thread of a child of os.fork() (3.11):
    # the dump must read the child's own thread, whose kernel state says what it waits on.
    proc = start([script(tmp_path, """
        import os, threading, time
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        if os.fork() == 0:
            threading.Event().wait()
        os.wait()
        """, "forks.py")], logdir, **QUIET)
    rep, _ = stalled_report(logdir, proc, dumps=3)
    (child,) = [p for p in rep["processes"] if p["ppid"] == proc.pid]
    assert child["stall"]["main"]["state"].startswith("blocked: waiting on a lock"), child["stall"]["main"]
    assert "(tid %d, " % child["pid"] in read(os.path.join(str(logdir), child["files"][0]))


def test_c_code_holding_the_gil_is_a_stall_with_the_user_frame_and_the_c_call(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import re
        def check_input(text):
            return re.match(r"(a+)+$", text)
        print("checking")
        check_input("a" * 40 + "b")
        """, "validate.py")], logdir, **QUIET)
    try:
        rep, res = stalled_report(logdir, proc, dumps=1, needle="Timeout (")
        cause = only(rep, "gil")
        assert cause["threads"] == ["MainThread"] and cause["pids"] == [rep["processes"][0]["pid"]]
        text = cause["text"]
        assert "GIL" in text and "re.match" in text and "check_input at validate.py:4" in text
        assert "last sign of life" not in " ".join(rep["verdict"])
        assert rep["processes"][0]["state"] == "stalled"
        assert "py-spy dump --native" in cause["next"]
        leads(res, cause)
        # killed, the story stays: no "vanished ... last sign of life 0.0 s" as its only words
        wait_for(lambda: report_json(logdir)["processes"][0]["state"] == "vanished")
        after = report_json(logdir)
        assert after["causes"][0]["kind"] == "gil"
        assert not any(re.search(r"last sign of life 0\.\d s", line) for line in after["verdict"])
    finally:
        kill_tree(proc)


def test_a_sigterm_that_finds_c_code_holding_the_gil_is_told_as_the_end_not_a_vanishing(tmp_path, logdir):
    """`timeout 60 python job.py` on a job stuck in C: faulthandler's SIGTERM stacks come right
    after its GIL timeout's, with no line between; the report says it got SIGTERM there."""
    proc = start([script(tmp_path, """
        import re
        def check_input(text):
            return re.match(r"(a+)+$", text)
        check_input("a" * 40 + "b")
        """, "validate.py")], logdir, **QUIET)
    try:
        wait_for(lambda: any("Timeout (" in read(f) for f in log_files(logdir)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGTERM
    finally:
        kill_tree(proc)
    rep = report_json(logdir)
    p = rep["processes"][0]
    assert p["state"] == "killed" and "received SIGTERM in check_input at validate.py:4" in p["summary"], p
    assert only(rep, "gil")["pids"] == [p["pid"]]
    assert not any("likely cause" in line or "vanished" in line for line in rep["verdict"]), rep["verdict"]


def test_a_crash_whose_dump_names_a_just_started_thread_by_its_starter_s_ident_keeps_its_frames(tmp_path):
    """A crash a moment after start: the thread earlylog has just started has not run yet, and
    faulthandler shows it under the main thread's ident with no Python frame. The main thread's
    frames that follow are the crash's, not another dump's (Python 3.10, seen in a real run)."""
    from earlylog.read import logread, verdict
    from support import T0, write
    raw = ["Fatal Python error: Segmentation fault", "", "Thread 0x00007fba093beb80 (most recent call first):",
           "  <no Python frame>", "", "Current thread 0x00007fba093beb80 (most recent call first):",
           '  File "/usr/lib/python3.10/ctypes/__init__.py", line 517 in string_at',
           '  File "/app/crash.py", line 5 in write_checkpoint', '  File "/app/crash.py", line 7 in <module>']
    write(tmp_path, 40, [(0, "start", "pid 40 (parent 1) argv python crash.py; log x (via pth, earlylog 0.1.0 at "
                                      "/opt/earlylog, Python 3.10.13)", ()),
                         (0.1, "out", "saving", ())] + [(0.1, None, line, ()) for line in raw], "crash")
    (p,) = verdict.judge(logread.read(str(tmp_path)), now=T0 + 30)["processes"]
    assert p["state"] == "crashed" and "Segmentation fault (SIGSEGV) in write_checkpoint at crash.py:5" in p["summary"]


def test_segfault_from_runaway_recursion_is_named_a_stack_overflow(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import sys
        sys.setrecursionlimit(10 ** 7)
        def walk_node(depth):
            return walk_node.__call__(depth + 1)  # through C: each level costs C stack
        walk_node(0)
        """, "tree.py")], logdir=logdir, env=QUIET)
    rep = report_json(logdir)
    cause = only(rep, "stack-overflow")
    assert cause["pids"] == [rep["processes"][0]["pid"]] and len(cause["threads"]) == 1
    if res.returncode == -signal.SIGSEGV:  # 3.9-3.11; newer Pythons raise RecursionError instead
        assert "walk_node at tree.py:5 recursed at least 100 deep" in cause["text"]
        assert "Segmentation fault" in cause["text"]
    else:
        assert re.search(r"walk_node at tree.py:5 recursed \d+ deep", cause["text"]), cause["text"]
    assert "walk_node" in cause["next"]


def test_functions_recursing_through_each_other_are_a_stack_overflow(tmp_path, logdir):
    run_python([script(tmp_path, """
        def visit(node):
            return generic_visit(node)
        def generic_visit(node):
            return visit(node + 1)
        visit(0)
        """, "walker.py")], logdir=logdir, env=QUIET)
    cause = only(report_json(logdir), "stack-overflow")
    # The traceback is thousands of lines; the report keeps its ends, so the depth is a floor.
    assert re.search(r"visit at walker.py:3 \(through generic_visit\) recursed at least \d+ deep, until "
                     r"RecursionError", cause["text"]), cause["text"]


def test_a_traceback_too_long_to_keep_whole_still_names_where_it_was_raised(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        def parse_leaf(n):
            raise ValueError("bad leaf %d" % n)
        def descend(n):
            return parse_leaf(n) if n == 0 else descend(n - 1)
        descend(400)
        """, "deep.py")], logdir=logdir, env=QUIET)
    (p,) = report_json(logdir)["processes"]
    assert res.returncode == 1 and p["state"] == "failed"
    assert p["exception"]["text"] == "ValueError: bad leaf 0"
    assert p["where"]["function"] == "parse_leaf" and p["where"]["line"] == 3
    assert p["summary"].endswith("ValueError: bad leaf 0 in parse_leaf at deep.py:3")


def _run_of_workers(tmp_path, logdir):
    """A launcher with three chatty workers, killed all at once from outside."""
    proc = start([script(tmp_path, """
        import subprocess, sys, time
        if sys.argv[1:] == ["worker"]:
            while True:
                print("step", flush=True)
                time.sleep(0.1)
        workers = [subprocess.Popen([sys.executable, __file__, "worker"]) for _ in range(3)]
        for w in workers:
            w.wait()
        """, "job.py")], logdir, **QUIET)
    try:
        wait_for(lambda: len(log_files(logdir)) == 4 and
                 sum(read(f).count("out: step") >= 5 for f in log_files(logdir)) == 3 and
                 any("dump: stall" in read(f) for f in log_files(logdir)))
    finally:
        kill_tree(proc)
    wait_for(lambda: all(p["state"] == "vanished" for p in report_json(logdir)["processes"]))


def test_a_whole_run_killed_at_once_is_one_cause_not_one_per_process(tmp_path, logdir):
    _run_of_workers(tmp_path, logdir)
    rep = report_json(logdir)
    pids = sorted(p["pid"] for p in rep["processes"])
    cause = only(rep, "run-stopped")
    assert sorted(cause["pids"]) == pids and cause["threads"] == []
    assert re.search(r"the whole run was stopped at \d\d:\d\d:\d\d: 4 processes at once", cause["text"])
    assert "OOM" not in cause["text"] and "scheduler" in cause["next"]
    assert not [line for line in rep["verdict"] if line.startswith("likely cause for")]
    res = earlylog("report", logdir)
    leads(res, cause)
    assert "likely SIGKILL" not in res.stdout and "likely cause for" not in res.stdout

    # The same run with memory breadcrumbs that point at the OOM killer: then, and only then, OOM.
    oom = tmp_path / "oom"
    shutil.copytree(logdir, oom)
    last = max(log_files(oom), key=lambda f: "worker" in f)
    record = records.parse(read(last).splitlines()[0])
    with open(last, "a") as f:
        f.write(records.format_lines("text", time.time() - 0.5, record["pid"], record["tag"], "vm", "mem",
                                     "rss 1900 MiB; cgroup 1990 MiB of 2048 MiB (97%); oom_kill 1 (up from 0: the "
                                     "kernel's OOM killer killed a process in this cgroup)"))
    cause = only(report_json(oom), "run-stopped")
    assert "OOM killer" in cause["text"] and "dmesg" in cause["next"]


def test_a_run_stopped_at_its_time_limit_tells_the_hung_child_first(tmp_path, logdir):
    # A pool whose one task hangs, stopped as a job scheduler does at its limit (SIGTERM to the whole
    # group): the hang is the story, and being stopped its consequence, so it is told after.
    proc = start([script(tmp_path, """
        import multiprocessing as mp, time
        def work(x):
            if x == 3:
                time.sleep(1000)
            return x
        if __name__ == "__main__":
            with mp.Pool(2) as pool:
                print(pool.map(work, range(6)))
        """, "job.py")], logdir, **QUIET)
    try:
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) >= 2)
        time.sleep(1)  # every process's stall dumped, the idle worker's included
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=TIMEOUT)
    rep = report_json(logdir)
    stopped = only(rep, "run-stopped")
    hung = next(p for p in rep["processes"] if p["where"] and p["where"]["function"] == "work")
    waited = "pid %d (job) had waited in pool.map for child %d (fork<job), which had stalled in work at job.py:5 " \
             "when they ended" % (proc.pid, hung["pid"])
    told = [line.partition("; next:")[0] for line in rep["verdict"]]
    assert waited in told and stopped["text"] in told, rep["verdict"]
    assert told.index(waited) < told.index(stopped["text"]), rep["verdict"]


def test_a_run_stopped_while_its_child_computes_says_the_child_was_computing_not_stalled(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import multiprocessing as mp
        def work(q):
            while True:
                pass
        if __name__ == "__main__":
            q = mp.Queue()
            mp.Process(target=work, args=(q,)).start()
            print(q.get())
        """, "slow.py")], logdir, **QUIET)
    try:
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) >= 2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=TIMEOUT)
    rep = report_json(logdir)
    child = next(p for p in rep["processes"] if p["pid"] != proc.pid)
    line = re.compile(r"pid %d \(slow\) had waited in queues.get for child %d \(fork<slow\), which was still "
                      r"computing in work at slow.py:[45] when they ended$" % (proc.pid, child["pid"]))
    assert any(line.match(told) for told in rep["verdict"]), rep["verdict"]


STRANDED = {
    "results": """
        import queue, threading
        jobs, results = queue.Queue(maxsize=1), queue.Queue()
        def worker():
            while True:
                results.put(jobs.get() * 2)
        threading.Thread(target=worker, name="worker", daemon=True).start()
        for i in range(3):
            jobs.put(i)
        print(sum(results.get() for _ in range(4)))  # four results asked for, three jobs sent
        """,
    "lost_notify": """
        import queue, threading, time
        cv, jobs = threading.Condition(), queue.Queue()
        def loader():
            with cv:
                cv.notify()  # the data is ready, said before anyone listens: lost
        threading.Thread(target=lambda: print(jobs.get()), name="worker").start()
        threading.Thread(target=loader, name="loader").start()
        time.sleep(0.2)
        with cv:
            cv.wait()
        jobs.put("go")
        """,
    # No cause: a producer that sleeps between puts, an Event a SIGTERM handler sets.
    "slow_producer": """
        import queue, threading, time
        items = queue.Queue()
        def produce():
            while True:
                time.sleep(60)
                items.put(1)
        threading.Thread(target=produce, name="producer", daemon=True).start()
        print(items.get())
        """,
    "stop_on_signal": """
        import signal, threading
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *args: stop.set())
        threading.Thread(target=stop.wait, name="helper", daemon=True).start()
        stop.wait()
        """,
}


def test_threads_that_all_wait_on_each_other_are_stranded_and_a_sleeping_producer_is_not(tmp_path, logdir):
    procs = {name: start([script(tmp_path, code, name + ".py")], logdir / name, **QUIET)
             for name, code in STRANDED.items()}
    reps = {name: stalled_report(logdir / name, proc)[0] for name, proc in procs.items()}
    cause = only(reps["results"], "stranded")
    assert cause["text"].endswith("every thread waits for another, and none is left to wake them: thread MainThread "
                                  "waits for an item from queue `results` in <genexpr> at results.py:10; thread "
                                  "worker waits for an item from queue `jobs` in worker at results.py:6"), cause["text"]
    assert "put into queue `jobs` or put into queue `results`" in cause["next"] and "queue.get(timeout=...)" in cause["next"]
    notify = only(reps["lost_notify"], "stranded")
    assert "thread MainThread waits for a notify on condition `cv` in <module> at lost_notify.py:11; thread worker " \
           "waits for an item from queue `jobs` in <lambda> at lost_notify.py:7" in notify["text"], notify["text"]
    assert "cv.wait_for(lambda: ready)" in notify["next"]
    for quiet in ("slow_producer", "stop_on_signal"):
        assert reps[quiet]["causes"] == [], (quiet, reps[quiet]["causes"])


def test_the_rank_that_failed_first_is_named_before_the_ranks_its_failure_took_down(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import os, subprocess, sys
        if os.environ.get("RANK") is not None:
            import torch, torch.distributed as dist
            dist.init_process_group("gloo")
            if dist.get_rank() == 1:
                raise ValueError("shard 7 has no labels")
            dist.all_reduce(torch.ones(2))  # rank 1 never joins: gloo sees its connection close
            sys.exit(0)
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], WORLD_SIZE="2")
        ranks = [subprocess.Popen([sys.executable, __file__], env=dict(env, RANK=str(r))) for r in range(2)]
        print([rank.wait() for rank in ranks])
        # Later jobs that fail on their own are not taken down by the first.
        for _ in range(2):
            subprocess.run([sys.executable, "-c", "raise SystemExit(3)"])
        """, "ddp.py"), str(free_port())], logdir=logdir, env=QUIET)
    assert b"[1, 1]" in res.stdout
    rep = report_json(logdir)
    r0, r1 = sorted((p for p in rep["processes"] if p["rank"] is not None), key=lambda p: p["rank"])
    cause = only(rep, "first-failure")
    assert cause["pids"] == [r1["pid"], r0["pid"]]
    # Ranks its launcher did not tag rankN are named as ranks all the same (issue 34).
    assert cause["text"].startswith("rank 1 (pid %d) failed first: ValueError: shard 7 has no labels in <module> at "
                                    "ddp.py:7; then rank 0 (pid %d) " % (r1["pid"], r0["pid"]))
    assert "fix the error of rank 1 (pid %d)" % r1["pid"] in cause["next"]
    assert rep["verdict"][1].startswith("rank 1 (pid %d) failed first" % r1["pid"])


def test_busy_or_deliberately_sleeping_programs_get_no_cause(tmp_path, logdir):
    busy = start([script(tmp_path, """
        import threading, time
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(2)
        pool.submit(sum, [1]).result()  # two idle workers, waiting for work
        lock = threading.Lock()
        def poll():
            while True:
                with lock:
                    pass
                time.sleep(0.05)
        threading.Thread(target=poll, name="poller", daemon=True).start()
        def crunch(n):
            total = 0
            for i in range(n):
                with lock:
                    total += i * i
            return total
        while True:
            crunch(10 ** 5)
        """, "busy.py")], logdir / "busy", **QUIET)
    sleepy = start([script(tmp_path, """
        import threading, time
        lock = threading.Lock()
        stop = threading.Event()
        def keeper():
            with lock:
                stop.wait(60)  # holds a lock nobody wants, on purpose
        threading.Thread(target=keeper, name="keeper", daemon=True).start()
        time.sleep(60)
        """, "sleepy.py")], logdir / "sleepy", **QUIET)
    # Busy is not stuck: silent but computing is no trouble (docs/design.md#busy-is-not-stuck)
    for proc, folder, state, headline in ((busy, logdir / "busy", "busy", "1 process, none in trouble: 1 busy"),
                                          (sleepy, logdir / "sleepy", "stalled", "1 of 1 process in trouble: 1 stuck")):
        rep, res = stalled_report(folder, proc)
        assert rep["processes"][0]["state"] == state and rep["verdict"][0] == headline
        assert rep["causes"] == [], rep["causes"]
        assert "deadlock" not in res.stdout and "holds it" not in res.stdout


@pytest.mark.parametrize("minor", [9, 13])
def test_the_holder_is_found_on_other_pythons(logdir, minor):
    """The notes come from inside the live process, whose frames and bytecode differ by version."""
    exe = python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_CONSOLE="off",
                    PYTHONPATH=launch.variables({})["PYTHONPATH"], **QUIET)
    proc = subprocess.Popen([exe, os.path.join(ROOT, "scripts", "demo_hang.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rep, _ = stalled_report(logdir, proc)
    assert "Python 3.%d" % minor in read(log_files(logdir)[0])
    assert rep["causes"][0]["kind"] == "lock" and "thread prefetch holds it" in rep["causes"][0]["text"]


def test_leaving_a_thread_pool_s_with_block_while_its_task_waits_for_what_comes_after_it_says_so(tmp_path, logdir):
    """The `with ThreadPoolExecutor()` block's end waits for its running tasks (shutdown(wait=True));
    a consumer task waiting for the sentinel the code after the block would send never ends. It
    read as a plain join in threading.py's words."""
    proc = start([script(tmp_path, """
        import concurrent.futures, queue
        jobs, done = queue.Queue(), queue.Queue()
        def consume(q):
            while (item := q.get()) is not None:
                done.put(item * 2)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(consume, jobs)
            for i in range(3):
                jobs.put(i)
        jobs.put(None)  # the sentinel, after the block: too late
        """, "batch.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "join")
    assert "thread MainThread waits at batch.py:7 for a ThreadPoolExecutor's running task (leaving its `with` " \
           "block, shutdown(wait=True) waits for its tasks to end): thread ThreadPoolExecutor-0_0, which waits for " \
           "queue `q` in consume at batch.py:5" in cause["text"], cause["text"]
    assert "before the `with` block ends" in cause["next"] and "a sentinel" in cause["next"], cause["next"]
    leads(res, cause)


def test_a_pool_task_that_raised_leaves_the_main_thread_waiting_with_only_an_idle_worker(tmp_path, logdir):
    """The task meant to set the Event raised; the exception waits in its Future, which nobody
    reads, and the pool's worker waits for more work. It read as a deadlock with the worker, whose
    queue (`work_queue`) the next step told the user to fill, with no word of the exception."""
    proc = start([script(tmp_path, """
        import concurrent.futures, threading
        ready = threading.Event()
        def load_config(path):
            with open(path) as f:
                f.read()
            ready.set()
        pool = concurrent.futures.ThreadPoolExecutor(2)
        pool.submit(load_config, "/nonexistent/app.conf")
        ready.wait()
        """, "app.py")], logdir, **QUIET)
    rep, res = stalled_report(logdir, proc)
    cause = only(rep, "stranded")
    assert "thread MainThread waits for event `ready` in <module> at app.py:10; thread ThreadPoolExecutor-0_0 is " \
           "an executor's idle worker: no task of its runs" in cause["text"], cause["text"]
    assert "work_queue" not in cause["text"] + cause["next"], cause
    # concurrent.futures printed nothing of the task's exception; earlylog kept it (file only).
    assert "a task on thread ThreadPoolExecutor-0_0 raised FileNotFoundError: [Errno 2] No such file or directory: " \
           "'/nonexistent/app.conf' in load_config at app.py:5, kept in its Future (never printed)" in cause["text"]
    assert cause["next"].startswith("fix the FileNotFoundError in load_config at app.py:5, which ended the task "
                                    "meant to set event `ready`; read each task's Future"), cause["next"]
    leads(res, cause)
