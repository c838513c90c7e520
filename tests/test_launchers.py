"""Issue 7, real launchers: Node.js (child_process.spawn, python-shell), torchrun, accelerate,
multiprocessing, subprocess chains and shell wrappers. Every Python they start logs, tagged, and
the program behaves as without earlylog."""
import json
import os
import re
import shutil
import subprocess

import pytest

from support import PYTHON, ROOT, TIMEOUT, clean_env, free_port, log_files, read, run_both, script, user_text

NODE_DIR = os.path.join(ROOT, "tests", "node")
BIN = os.path.dirname(PYTHON)
needs_node = pytest.mark.skipif(
    not shutil.which("node") or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "python-shell")),
    reason="needs node and `npm install` in tests/node (.ci/run does both)")


def starts(logdir):
    """{pid: start record} of every process that logged into logdir."""
    from earlylog.grammar import records
    found = {}
    for path in log_files(str(logdir)):
        lines = read(path).splitlines()
        if not lines:  # a pool worker terminated between creating its file and its first line
            continue
        first = records.parse(lines[0])
        found[first["pid"]] = dict(first, file=os.path.basename(path))
    return found


def node(args, env, timeout=60):
    proc = subprocess.run(["node"] + args, cwd=NODE_DIR, env=env, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().splitlines()[-1])


def node_env(**extra):
    env = clean_env(**extra)
    env["PATH"] = BIN + os.pathsep + env["PATH"]  # the `earlylog` command, as after pip install
    return env


PROGRAM = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"


@needs_node
@pytest.mark.slow
@pytest.mark.parametrize("stdio", ["pipe", "inherit", "ignore"])
def test_node_spawn(logdir, stdio):
    args = ["spawn.js", stdio, "inherit", "--", PYTHON, "-c", PROGRAM]
    off = node(args, node_env())
    on = node(args, node_env(EARLYLOG=1, EARLYLOG_DIR=logdir))
    assert (on["code"], on["stdout"], user_text(on["stderr"])) == (off["code"], off["stdout"], off["stderr"])
    assert off["code"] == 3 and len(starts(logdir)) == 1
    if stdio == "pipe":
        assert "start: " in on["stderr"]


@needs_node
@pytest.mark.slow
def test_node_pipes_nobody_reads_never_block_the_program(tmp_path, logdir):
    # Node gives its children socketpairs; 600 kB of our console lines fill them many times over.
    code = "import earlylog\nfor i in range(5000): earlylog.log('%d %s' % (i, '.' * 100))\nprint('done')"
    on = node(["spawn.js", "unread", "inherit", "--", PYTHON, "-c", code], node_env(EARLYLOG=1, EARLYLOG_DIR=logdir))
    assert (on["code"], on["signal"]) == (0, None) and on["seconds"] < 15
    [log] = log_files(str(logdir))
    assert read(log).count(" mark: ") == 5000, "the file has every line the console could not take"


@needs_node
@pytest.mark.slow
def test_node_closing_stderr_never_kills_the_program(logdir):
    # The GUI stops listening to stderr after our start line; the program (SIGPIPE at SIG_DFL,
    # as many tools set it) writes only stdout. Our later lines must not kill it with SIGPIPE.
    code = ("import signal, time, earlylog\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
            "time.sleep(0.5)\nearlylog.log('after the hangup')\nprint('finished')")
    on = node(["spawn.js", "hangup", "inherit", "--", PYTHON, "-c", code], node_env(EARLYLOG=1, EARLYLOG_DIR=logdir))
    assert (on["code"], on["signal"], on["stdout"]) == (0, None, "finished\n")
    assert "after the hangup" in read(log_files(str(logdir))[0])


@needs_node
@pytest.mark.slow
def test_node_recipe_env_reaches_a_python_without_earlylog(bare_venv, logdir):
    on = node(["spawn.js", "pipe", "earlylog", "--", bare_venv, "-c", PROGRAM], node_env(EARLYLOG_DIR=logdir))
    assert (on["code"], on["stdout"], user_text(on["stderr"])) == (3, "out\n", "err\n")
    [start] = starts(logdir).values()
    assert "via sitecustomize" in start["msg"]


@needs_node
@pytest.mark.slow
def test_node_env_without_process_env_drops_earlylog(logdir):
    # The pitfall the README warns about: env: {PATH} loses EARLYLOG, so nothing logs.
    on = node(["spawn.js", "pipe", "bare", "--", PYTHON, "-c", PROGRAM], node_env(EARLYLOG=1, EARLYLOG_DIR=logdir))
    assert on["code"] == 3 and on["stderr"] == "err\n" and log_files(str(logdir)) == []


@needs_node
@pytest.mark.slow
def test_python_shell_lines_arrive_live(tmp_path, logdir):
    train = script(tmp_path, """
        import time
        for epoch in range(5):
            time.sleep(0.4)
            print("epoch %d loss %.2f" % (epoch, 1.0 / (epoch + 1)))
    """)
    runs = {}
    for name, extra in (("off", {}), ("on", {"EARLYLOG": 1, "EARLYLOG_DIR": logdir})):
        runs[name] = node(["shell.js", PYTHON, train], node_env(**extra))
        assert runs[name]["code"] == 0 and len(runs[name]["lines"]) == 5
    spread = {name: r["lines"][-1]["at"] - r["lines"][0]["at"] for name, r in runs.items()}
    assert [l["text"] for l in runs["on"]["lines"]] == [l["text"] for l in runs["off"]["lines"]]
    assert spread["off"] < 0.3, "without earlylog a pipe holds the lines back until exit"
    assert spread["on"] > 1.2, "with earlylog each line arrives as it is printed"


TRAIN = """
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print("rank %d sum %d" % (dist.get_rank(), int(t.item())), flush=True)
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_distributed_launchers_every_rank_logs(tmp_path, logdir, launcher):
    port = str(free_port())
    if launcher == "torchrun":
        command = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                   "--master-addr", "127.0.0.1", "--master-port", port]
    else:
        pytest.importorskip("accelerate")
        command = [os.path.join(BIN, "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_ip", "127.0.0.1", "--main_process_port", port]
    proc = subprocess.run(command + [script(tmp_path, TRAIN)], env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir),
                          capture_output=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert sorted(re.findall(rb"rank \d sum 3", proc.stdout)) == [b"rank 0 sum 3", b"rank 1 sum 3"]
    found = starts(logdir)
    tags = sorted(r["tag"] for r in found.values())
    assert tags == sorted([launcher, "rank0", "rank1"])
    agent = [pid for pid, r in found.items() if r["tag"] == launcher][0]
    assert all("(parent %d)" % agent in r["msg"] for r in found.values() if r["tag"] != launcher)
    assert sorted(f["file"].split("-", 4)[-1] for f in found.values()) == sorted(
        ["%s.log" % launcher, "rank-rank0.log", "rank-rank1.log"])


MULTIPROCESSING = """
    import concurrent.futures as cf
    import multiprocessing as mp
    import os

    def square(x):
        return x * x

    if __name__ == "__main__":
        for method in ("fork", "spawn", "forkserver"):
            ctx = mp.get_context(method)
            with ctx.Pool(2) as pool:
                print(method, "pool", pool.map(square, range(4)))
            p = ctx.Process(target=square, args=(3,))
            p.start()
            p.join()
            print(method, "process exit", p.exitcode)
            with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
                print(method, "executor", list(ex.map(square, range(4))))
"""


@pytest.mark.slow
def test_multiprocessing_every_start_method(tmp_path, logdir):
    run_both([script(tmp_path, MULTIPROCESSING, name="mp_main.py")], logdir)
    tags = [r["tag"] for r in starts(logdir).values()]
    assert tags.count("mp_main") == 1
    # At least one child per construct (Pool, Process, executor): Pool.__exit__ terminates a
    # worker that had no task before it finished starting, and the executor starts workers on
    # demand, so the exact count varies from run to run.
    assert tags.count("fork<mp_main") >= 3, "fork: Pool(2), Process, executor"
    assert tags.count("mp-child") >= 3, "spawn: Pool(2), Process, executor"
    assert "forkserver" in tags and tags.count("fork<forkserver") >= 3
    assert "resource-tracker" in tags


def test_subprocess_chain_three_deep(tmp_path, logdir):
    chain = script(tmp_path, """
        import subprocess, sys
        depth = int(sys.argv[1])
        print("level", depth, flush=True)
        if depth < 3:
            sys.exit(subprocess.call([sys.executable, __file__, str(depth + 1)]) + 1)
        sys.exit(10)
    """, name="chain.py")
    on = run_both([chain, "1"], logdir)
    assert on.returncode == 12 and on.out == "level 1\nlevel 2\nlevel 3\n"
    found = starts(logdir)
    assert len(found) == 3
    pids = sorted(found, key=lambda pid: found[pid]["time"])
    for parent, child in zip(pids, pids[1:]):
        assert "(parent %d)" % parent in found[child]["msg"]


# flush=True: killed by `timeout`, an unflushed program loses 'out' where EARLYLOG_LIVE keeps it.
WRAPPED = "import sys, time; print('out', flush=True); print('err', file=sys.stderr); time.sleep(float(sys.argv[1])); sys.exit(4)"


@pytest.mark.parametrize("wrapper,sleep,status", [
    (["bash", "-c", '"$@"; exit $?', "bash"], "0", 4),
    (["nohup"], "0", 4),
    (["timeout", "1"], "30", 124),
    (["env", "-i", "PATH=/usr/bin:/bin"], "0", 4),
])
def test_shell_wrappers(tmp_path, logdir, wrapper, sleep, status):
    command = wrapper + [PYTHON, "-c", WRAPPED, sleep]
    runs = []
    for on in (False, True):
        env = clean_env(**({"EARLYLOG": 1, "EARLYLOG_DIR": logdir} if on else {}))
        if on and wrapper[0] == "env":  # env -i keeps only what it is given: EARLYLOG, PATH
            command = wrapper[:2] + ["EARLYLOG=1"] + wrapper[2:] + command[len(wrapper):]
        proc = subprocess.run(command, env=env, capture_output=True, timeout=TIMEOUT, cwd=str(tmp_path))
        runs.append((proc.returncode, proc.stdout, user_text(proc.stderr)))
    assert runs[0] == runs[1] and runs[0][0] == status
    said = re.search(r"; log (.+?) \(via ", proc.stderr.decode())
    assert said, proc.stderr
    path = said.group(1)
    try:
        assert "start: " in read(path)
    finally:
        if wrapper[0] == "env":  # no EARLYLOG_DIR got through: it used a fresh default folder
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def test_earlylog_run_wraps_a_shell_script(logdir):
    proc = subprocess.run([os.path.join(BIN, "earlylog"), "run", "--", "bash", "-c", '"$0" -c "$1"; exit 5',
                           PYTHON, PROGRAM], env=clean_env(EARLYLOG_DIR=logdir), capture_output=True,
                          timeout=TIMEOUT)
    assert (proc.returncode, proc.stdout, user_text(proc.stderr)) == (5, b"out\n", "err\n")
    assert [r["tag"] for r in starts(logdir).values()] == ["cmd"]
