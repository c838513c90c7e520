"""Runs that span machines: one folder written by two hosts (UTS namespaces give this machine two
hostnames) is one report grouped by host, each host judged by what can be known from where the
report runs; a torchrun job of two nodes names the straggler rank, its node, and the rank waiting."""
import os
import shutil
import subprocess

import pytest

from support import (PYTHON, STALL, STRAGGLER_JOB, TIMEOUT, by_tag, clean_env, earlylog, free_port, kill_pid,
                     kill_tree, log_files, read, report_json, run_python, script, straggler_dumped, wait_for)

HOSTS = ("nodeA", "nodeB")


def _uts():
    """Why two hostnames cannot be had here, or None when `unshare --uts` works."""
    if not (shutil.which("unshare") and shutil.which("hostname")):
        return "no unshare or hostname command"
    res = subprocess.run(["unshare", "--uts", "hostname", "probe"], capture_output=True, text=True)
    return None if res.returncode == 0 else "unshare --uts is refused here (%s)" % res.stderr.strip()


def on_host(host, argv, env=None):
    """argv run with `host` as its hostname: a UTS namespace of its own (same network, pids, files)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host] + argv if host else argv


def start_on(host, args, logdir, **env):
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **STALL)
    full.update({k: str(v) for k, v in env.items()})
    return subprocess.Popen(on_host(host, [PYTHON] + args), env=full, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def report_on(host, folder, *args):
    res = subprocess.run(on_host(host, [PYTHON, "-m", "earlylog", "report", *args, str(folder)]),
                         env=clean_env(EARLYLOG=1), capture_output=True, text=True, timeout=TIMEOUT)
    assert res.stderr == "", res.stderr
    return res


def json_on(host, folder):
    import json
    return json.loads(report_on(host, folder, "--json").stdout)


def test_two_hosts_sharing_a_folder_are_one_report_grouped_by_host(tmp_path, logdir):
    why = _uts()
    if why:
        pytest.skip(why)
    prep = script(tmp_path, "print('shards written')\n", "prep.py")
    serve = script(tmp_path, """
        import time
        while True:
            time.sleep(0.3)
        """, "serve.py")
    shard = script(tmp_path, """
        import threading
        def load_shard():
            threading.Event().wait()
        load_shard()
        """, "shard.py")
    procs = [start_on("nodeA", [prep], logdir), start_on("nodeA", [serve], logdir), start_on("nodeB", [shard], logdir)]
    try:
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) == 2 and
                 any("exit: status 0" in read(f) for f in log_files(logdir)))
        rep = json_on("nodeA", logdir)
        text = report_on("nodeA", logdir).stdout
        stuck = by_tag(rep, "shard")[0]
        kill_pid(stuck["pid"])
        wait_for(lambda: json_on("nodeB", logdir)["counts"].get("vanished") == 1)
        seen_from_a, seen_from_b = json_on("nodeA", logdir), json_on("nodeB", logdir)
    finally:
        for proc in procs:
            kill_tree(proc)
    assert rep["host"] == "nodeA" and rep["hosts"] == list(HOSTS)
    states = {(p["host"], p["tag"]): (p["state"], p["checked_here"]) for p in rep["processes"]}
    assert states == {("nodeA", "prep"): ("exited", True), ("nodeA", "serve"): ("idle", True),
                      ("nodeB", "shard"): ("stalled", False)}
    assert stuck["where"]["function"] == "load_shard"
    assert rep["verdict"][0] == "1 of 3 processes in trouble: 1 stuck"
    assert rep["verdict"][1].startswith("pid %d (shard) stalled for " % stuck["pid"])
    assert "in load_shard at shard.py:4" in rep["verdict"][1]
    assert rep["verdict"][-1].startswith("on nodeB, whether a process still runs cannot be checked from here")
    lines = text.splitlines()
    a, b = lines.index("host nodeA (this host), 2 processes:"), next(
        i for i, line in enumerate(lines) if line.startswith("host nodeB, 1 process: another host; whether they"))
    assert a < b and any(("%d shard stalled" % stuck["pid"]) in line for line in lines[b:])
    assert max(len(line) for line in lines if str(logdir) not in line) <= 80
    # Killed on nodeB: from nodeA it cannot be told, so it stays stalled; on nodeB it vanished.
    assert by_tag(seen_from_a, "shard")[0]["state"] == "stalled"
    assert by_tag(seen_from_b, "shard")[0]["state"] == "vanished"
    assert by_tag(seen_from_b, "serve")[0]["state"] == "idle"  # nodeA's: judged by its log there


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_two_nodes_name_the_straggler_rank_and_its_node(tmp_path, logdir):
    pytest.importorskip("torch")
    hosts = ("node0", "node1") if _uts() is None else (None, None)  # else both "nodes" on this host
    job = script(tmp_path, STRAGGLER_JOB, "job.py")
    port = free_port()
    agents = [start_on(host, ["-m", "torch.distributed.run", "--nnodes=2", "--node-rank=%d" % n,
                              "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:%d" % port,
                              "--local-addr=127.0.0.1", job], logdir, EARLYLOG_STALL=2, OMP_NUM_THREADS=1,
                       GLOO_SOCKET_IFNAME="lo")
              for n, host in enumerate(hosts)]
    try:
        wait_for(lambda: straggler_dumped(logdir), timeout=TIMEOUT * 2)
        rep = json_on(None, logdir)
        text = report_on(None, logdir).stdout
    finally:
        for f in log_files(logdir):  # torchrun starts each rank in a session of its own
            if "-rank" in f:
                kill_pid(int(os.path.basename(f).rsplit("-", 3)[1]))
        for agent in agents:
            kill_tree(agent)
    (rank0,), (rank1,) = by_tag(rep, "rank0"), by_tag(rep, "rank1")
    assert rank0["state"] == rank1["state"] == "stalled"
    assert (rank0["local_rank"], rank1["local_rank"]) == (0, 0) and {rank0["node_rank"], rank1["node_rank"]} == {0, 1}
    agents = sorted(by_tag(rep, "torchrun"), key=lambda p: p["node_rank"])
    assert [a["node_rank"] for a in agents] == [0, 1] and {a["state"] for a in agents} == {"idle"}
    straggler = "rank 1 on host %s" % rank1["host"] if hosts[0] else "rank 1"
    assert "%s is the straggler: it is in read_index at job.py:5, outside any collective (waiting on a lock, " \
           "condition or event); rank 0 waits in barrier #1 on group 0 for it" % straggler in rep["verdict"], \
        rep["verdict"]
    assert rep["verdict"][0] == "2 of 4 processes in trouble: 2 stuck"
    assert "%d rank1 (rank 1, local 0, node %d) stalled" % (rank1["pid"], rank1["node_rank"]) in text
    if hosts[0]:
        assert sorted(rep["hosts"]) == list(hosts) and rank0["host"] != rank1["host"]


def test_slurm_and_srun_torchrun_tasks_carry_rank_local_rank_node_and_job(tmp_path, logdir):
    task = script(tmp_path, "print('step done')\n", "train.py")
    slurm = {"SLURM_JOB_ID": "4711", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
             "SLURM_NTASKS": "8"}
    run_python([task], logdir=logdir, env=slurm)  # `srun python train.py`: Slurm's names
    # `srun torchrun ...`: SLURM_PROCID is the agent's task; torchrun's own names win in its ranks
    run_python([task], logdir=logdir, env=dict(slurm, RANK="11", LOCAL_RANK="3", GROUP_RANK="1", WORLD_SIZE="16"))
    rep = report_json(logdir)
    places = sorted((p["rank"], p["local_rank"], p["node_rank"], p["world_size"], p["job"]) for p in rep["processes"])
    assert places == [(5, 1, 2, 8, "4711"), (11, 3, 1, 16, "4711")]
    text = earlylog("report", logdir).stdout
    assert "train.r5 (rank 5, local 1, node 2, job 4711) exited 0" in text
