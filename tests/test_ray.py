"""Ray, as the README's recipe says: a real local cluster started and stopped by the driver, every
worker logging through `runtime_env`; a hung task and a hung actor method are named by the title Ray
gives their worker, while Ray's own daemons and idle workers are idle, and stopped, not trouble;
a worker Ray's memory monitor kills is killed, by whom. Skipped where ray is not installed."""
import re

import pytest

from earlylog.read import html
from earlylog.grammar.records import parse
from support import TIMEOUT, earlylog, kill_tree, log_files, read, report_json, script, start, wait_for

_FORWARDED_STALL = re.compile(r"\[earlylog\] \S+ \S+ (\d+) \S+ stall: silent for ")


def records(path):
    return [r for r in map(parse, read(path).splitlines()) if r]

HUNG = {"ray::hang_forever", "ray::Indexer.build"}
DRIVER = """
    import os, sys, time
    import ray

    folder, stop = sys.argv[1], sys.argv[2]
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"EARLYLOG": "1", "EARLYLOG_DIR": folder, "EARLYLOG_STALL": "2"}})

    @ray.remote
    def hang_forever():
        time.sleep(10 ** 6)

    @ray.remote
    class Indexer:
        def build(self):
            time.sleep(10 ** 6)

    @ray.remote
    def double(x):
        return 2 * x

    print(ray.get([double.remote(i) for i in range(4)]))
    task, indexer = hang_forever.remote(), Indexer.remote()
    build = indexer.build.remote()
    while not os.path.exists(stop):
        time.sleep(0.2)
    ray.shutdown()
    """


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_hung_task_and_actor_are_named_and_daemons_are_not_trouble(tmp_path, logdir):
    pytest.importorskip("ray", reason="ray is not installed here (pip install ray): the Ray recipe is not checked")
    stop = tmp_path / "stop"
    driver = start([script(tmp_path, DRIVER, "driver.py"), str(logdir), str(stop)], logdir,
                   EARLYLOG_STALL=2, EARLYLOG_NATIVE=0, RAY_USAGE_STATS_ENABLED=0, EARLYLOG_CONSOLE="stderr")
    try:
        wait_for(lambda: all(_dumped_in(logdir, name) for name in ("hang_forever", "build")), timeout=TIMEOUT * 2)
        # On a loaded machine a worker's own output (Ray's warnings) can end a stall just after
        # its dump; the next dump comes in a few seconds: read the report until both are stalled.
        reports = []

        def both_stalled():
            reports.append(report_json(logdir))
            return {p["title"] for p in reports[-1]["processes"] if p["state"] == "stalled"} >= HUNG
        try:
            wait_for(both_stalled, timeout=TIMEOUT, interval=1)
        except AssertionError:
            pass  # the assertions below say what the last report showed
        during = reports[-1]
        stop.write_text("")
        driver.wait(timeout=TIMEOUT)
        after = report_json(logdir)
        text = earlylog("report", logdir).stdout
    finally:
        kill_tree(driver)
    hung = {p["title"]: p for p in during["processes"] if p["state"] == "stalled"}
    assert set(hung) == HUNG, during["verdict"]
    assert hung["ray::hang_forever"]["where"]["function"] == "hang_forever"
    assert hung["ray::Indexer.build"]["where"]["function"] == "build"
    assert during["verdict"][0].startswith("2 of %d processes in trouble: 2 stuck" % during["counts"]["processes"])
    assert any(line.startswith("pid %d (ray::hang_forever) stalled for " % hung["ray::hang_forever"]["pid"])
               for line in during["verdict"])
    others = [p for p in during["processes"] if p["state"] != "stalled"]
    assert {p["state"] for p in others} <= {"idle", "running", "exited", "terminated"}, during["verdict"]
    roles = {p["tag"] for p in others if p["state"] == "idle"}
    assert {"dashboard", "log_monitor", "monitor", "agent"} <= roles, roles  # Ray's own daemons, waiting
    # After ray.shutdown() the driver exits 0: what Ray stopped is not trouble; the hung task and
    # actor are hangs cut short, named by their tasks, whether Ray killed their workers or their
    # worker loops exited cleanly (sys.exit(0) in main_loop) around the call that never returned.
    assert driver.returncode == 0
    troubled = [p for p in after["processes"] if p["state"] in ("stalled", "crashed", "killed", "vanished", "failed")]
    assert {p["title"] for p in troubled} == HUNG, after["verdict"]
    for p in troubled:
        assert p["summary"].startswith("stalled for ") and (
            "until it was stopped at the end of the run" in p["summary"] or
            "until Ray's own code around that call ended the process (sys.exit(0) in main_loop at worker.py:"
            in p["summary"]), p["summary"]
    assert after["counts"]["terminated"] >= 6 and "ray::IDLE" not in " ".join(after["verdict"])
    assert "default_worker" not in " ".join(after["verdict"] + during["verdict"])
    assert text.startswith("2 of %d processes in trouble: 2 stuck" % after["counts"]["processes"]), text
    assert "(ray::hang_forever) stalled for " in text and "(ray::Indexer.build) stalled for " in text
    # The driver's terminal (Ray forwards its workers' and daemons' output there; the driver's log
    # keeps what it printed): stall lines of the hung workers only, none of an idle daemon or worker.
    console = [r["msg"] for f in log_files(logdir) if "-driver.log" in f for r in records(f) if r["kind"] in ("out", "err")]
    stalled_pids = {str(p["pid"]) for p in troubled}
    told = {m.group(1) for m in map(_FORWARDED_STALL.search, console) if m}
    assert told and told <= stalled_pids, [(p["pid"], p["title"], p["state"], p["summary"]) for p in after["processes"]
                                           if str(p["pid"]) in told - stalled_pids]
    # The incident page: the hung lanes hatched from their stall, the daemons' idle drawn plain.
    page = html._data(after)  # what the page's script draws from
    kinds = {p["pid"]: (p.get("stall") or {}).get("kind") for p in page["procs"]}
    assert all(kinds[p["pid"]] == "stuck" for p in troubled)
    idle = [p["pid"] for p in during["processes"] if p["state"] == "idle"]
    assert idle and all(kinds[pid] in ("idle", "quiet", None) for pid in idle), [
        (p["pid"], p["title"], p["state"], p["summary"], kinds[p["pid"]]) for p in after["processes"]
        if p["pid"] in idle and kinds[p["pid"]] not in ("idle", "quiet", None)]


def _dumped_in(logdir, function):
    """A stall dump whose stack shows `function` in the driver's file."""
    return any("dump: stall" in text and " in %s: " % function in text.partition("dump: stall")[2]
               for text in (read(f) for f in log_files(logdir)))


OOM_DRIVER = """
    import os, sys, time
    import ray

    # Ray's memory monitor kills a task's worker once the node's memory use passes a share of it:
    # that share is set 1 GiB above the use now, and the task grows until killed (3 GiB at most).
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    used = info["MemTotal"] - info["MemAvailable"]
    os.environ["RAY_memory_usage_threshold"] = "%.4f" % ((used + 2 ** 30) / info["MemTotal"])
    os.environ["RAY_memory_monitor_refresh_ms"] = "100"
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"EARLYLOG": "1", "EARLYLOG_DIR": sys.argv[1], "EARLYLOG_STALL": "2"}})

    @ray.remote(max_retries=0)
    def grow_cache():
        cache = []
        for _ in range(30):
            cache.append(bytearray(100 * 2 ** 20))
            time.sleep(0.1)
        return len(cache)

    try:
        print("grew", ray.get(grow_cache.remote()))
    except ray.exceptions.OutOfMemoryError as exc:
        print(exc)
    ray.shutdown()
    """


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_worker_killed_by_the_memory_monitor_is_reported_killed(tmp_path, logdir):
    pytest.importorskip("ray", reason="ray is not installed here (pip install ray): the Ray recipe is not checked")
    driver = start([script(tmp_path, OOM_DRIVER, "driver.py"), str(logdir)], logdir, EARLYLOG_STALL=2,
                   EARLYLOG_NATIVE=0, RAY_USAGE_STATS_ENABLED=0)
    try:
        assert driver.wait(timeout=TIMEOUT * 2) == 0
    finally:
        kill_tree(driver)
    rep = report_json(logdir)
    (killed,) = [p for p in rep["processes"] if p["state"] == "killed"]
    assert killed["killed_by"] == "Ray's memory monitor"
    assert "task name=grow_cache" in killed["summary"] and "pid=%d" % killed["pid"] in killed["summary"]
    assert rep["verdict"][0] == "1 of %d processes in trouble: 1 killed by a signal" % rep["counts"]["processes"], \
        rep["verdict"]
    assert rep["verdict"][1].startswith("pid %d (" % killed["pid"]) and "next: the node ran low on memory" in rep["verdict"][1]
