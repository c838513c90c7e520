"""Issue 6, `earlylog report`: real runs (a clean pool, a stuck child, a SIGKILL, a segfault, a
torchrun rendezvous hang) are read back and the verdict lines and the JSON checked (the HTML page
has its own tests in test_html.py)."""
import json
import os
import shutil
import signal
import time

import pytest

from earlylog import __version__
from earlylog.read import logread, verdict
from earlylog.grammar import records
from support import (STRAGGLER_JOB, TIMEOUT, by_tag, earlylog, free_port, kill_pid, kill_tree, log_files,
                     read, report_json, run_python, script, start, straggler_dumped, wait_for, wait_log)


def test_clean_multiprocessing_run_is_all_well_and_the_report_writes_nothing(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import multiprocessing as mp
        def square(x):
            return x * x
        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                print(pool.map(square, [1, 2, 3]))
        """, "pool.py")], logdir=logdir)
    assert res.returncode == 0 and "[1, 4, 9]" in res.out
    files_before = sorted(os.listdir(logdir))
    rep = report_json(logdir)
    assert sorted(os.listdir(logdir)) == files_before  # the command itself never logged here
    # a worker the pool stops while it starts may not have opened its log yet: 3 at least
    assert rep["schema"] == 1 and rep["counts"]["processes"] == len(files_before) >= 3
    main = by_tag(rep, "pool")[0]
    assert main["state"] == "exited" and main["status"] == 0
    assert {p["state"] for p in rep["processes"]} <= {"exited", "terminated"}  # Pool.__exit__ SIGTERMs workers
    assert sorted(main["children"]) == sorted(p["pid"] for p in rep["processes"] if p is not main)
    text = earlylog("report", logdir)
    assert text.returncode == 0 and text.stderr == ""
    lines = text.stdout.splitlines()
    assert lines[0].startswith("%d processes, none in trouble: " % rep["counts"]["processes"])
    assert max(len(line) for line in lines if str(logdir) not in line) <= 80
    assert "\033[" not in text.stdout  # colour only on a tty


@pytest.mark.parametrize("lost, said", [
    ("""
     import threading
     def parse():
         return [int(row) for row in ["1", "x2"]]
     worker = threading.Thread(target=parse, name="parser")
     worker.start()
     worker.join()
     """, ", but in thread parser: ValueError: invalid literal for int() with base 10: 'x2' in <listcomp> at lost.py:4"),
    ("""
     import atexit
     def save_checkpoint():
         open("/nonexistent/folder/ckpt.json", "w")
     atexit.register(save_checkpoint)
     """, "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/folder/ckpt.json' in "
          "save_checkpoint at lost.py:4")])
def test_work_lost_in_a_process_that_exits_0_is_said(tmp_path, logdir, lost, said):
    # A worker thread that died, or a failed atexit save, leaves exit status 0: no trouble by the
    # status, but the work is lost, and the report says where.
    res = run_python([script(tmp_path, lost, "lost.py")], logdir=logdir)
    assert res.returncode == 0
    rep = report_json(logdir)
    (main,) = rep["processes"]
    assert main["state"] == "exited" and rep["verdict"][0] == "1 process, none in trouble: 1 exited"
    assert rep["verdict"][1].startswith("pid %d (lost) exited with status 0 after " % main["pid"])
    assert rep["verdict"][1].endswith(said), rep["verdict"]


@pytest.mark.parametrize("code, said", [
    ("import sys\ndef load_config():\n    sys.exit(3)\nload_config()\n",
     "exited with status 3 after {}: sys.exit(3) in load_config at cfg.py:3"),
    ("def check():\n    raise SystemExit('no GPU found, refusing to train on CPU')\ncheck()\n",
     "exited with status 1 after {}: raise SystemExit('no GPU found, refusing to train on CPU')"),
    ("import argparse\nargparse.ArgumentParser().parse_args(['--epochs'])\n",
     "exited with status 2 after {}: sys.exit(2) in exit at argparse.py:"),
])
def test_a_deliberate_exit_says_where_and_with_what(tmp_path, logdir, code, said):
    res = run_python([script(tmp_path, code, "cfg.py")], logdir=logdir)
    (main,) = report_json(logdir)["processes"]
    head, _, tail = said.partition("{}")
    assert main["status"] == res.returncode and main["summary"].startswith(head), main["summary"]
    assert tail in main["summary"]
    if "argparse" in code:
        assert main["summary"].endswith(", from <module> at cfg.py:2")


def test_a_known_error_gets_its_known_next_step(tmp_path, logdir):
    # The spawn start method without the __main__ guard: Python's own advice is cut from the line.
    run_python([script(tmp_path, """
        import multiprocessing as mp
        mp.get_context("spawn").Process(target=print).start()
        """, "train.py")], logdir=logdir)
    rep = report_json(logdir)
    (line,) = [v for v in rep["verdict"] if "An attempt has been made to start a new process" in v]
    assert line.endswith("; next: with the spawn or forkserver start method every child imports the main script "
                         "again: put the code that starts processes (and Pools) under `if __name__ == \"__main__\":`")
    from earlylog.read import known
    assert known.next_step("AssertionError: Torch not compiled with CUDA enabled").startswith("this torch is a CPU-only")
    assert known.next_step("RuntimeError: The server socket has failed to listen on any local network address. "
                           "port: 29500, useIPv6: 0, code: -98, name: EADDRINUSE").startswith("another process")
    assert known.next_step("ValueError: bad row") is None


def test_a_syntax_error_is_placed_at_its_line(tmp_path, logdir):
    res = run_python([script(tmp_path, "x = 1\ny = (\n", "bad.py")], logdir=logdir)
    assert res.returncode == 1
    (main,) = report_json(logdir)["processes"]
    assert main["summary"].endswith("SyntaxError: '(' was never closed in <source> at bad.py:2"), main["summary"]


def test_a_script_python_cannot_open_is_a_failure_that_names_it(tmp_path, logdir):
    # A launcher's wrong path: Python prints "can't open file" and exits 2, with no exception.
    res = run_python([str(tmp_path / "trian.py")], logdir=logdir)
    assert res.returncode == 2 and "can't open file" in res.err
    (main,) = report_json(logdir)["processes"]
    assert main["state"] == "failed" and main["status"] == 2
    assert main["summary"].endswith(": python could not open the script %r (no such file)" % str(tmp_path / "trian.py"))


def test_a_process_whose_earlylog_failed_is_not_called_killed(tmp_path, logdir):
    # A copy of earlylog whose hooks step breaks, ahead of the installed one on PYTHONPATH: the
    # program runs on (one line on stderr) and leaves no exit record; that is no SIGKILL.
    import earlylog
    copy = tmp_path / "src"
    shutil.copytree(os.path.dirname(earlylog.__file__), str(copy / "earlylog"))
    hooks = copy / "earlylog" / "runtime" / "hooks.py"
    hooks.write_text(hooks.read_text().replace('def start(logger):\n', 'def start(logger):\n    raise RuntimeError("on purpose")\n'))
    res = run_python("print('done')", logdir=logdir, env={"PYTHONPATH": str(copy)})
    assert res.returncode == 0 and res.out == "done\n"
    assert "earlylog: hooks failed (RuntimeError('on purpose'))" in res.err
    rep = report_json(logdir)
    (main,) = rep["processes"]
    assert main["state"] == "unknown" and rep["verdict"][0].startswith("1 process, none in trouble")
    assert main["summary"] == ("no longer running; how it ended was not recorded: earlylog's own hooks failed: "
                               "RuntimeError('on purpose') (its output says how it ended)")
    assert "SIGKILL" not in " ".join(rep["verdict"])


def test_parent_waiting_on_a_stalled_child_is_explained(tmp_path, logdir):
    path = script(tmp_path, """
        import subprocess, sys, threading
        def fetch_config():
            threading.Event().wait()
        if sys.argv[1:] == ["child"]:
            fetch_config()
        else:
            subprocess.run([sys.executable, __file__, "child"])
        """, "prep.py")
    proc = start([path], logdir)
    try:
        wait_for(lambda: sum("dump: stall" in read(f) for f in log_files(logdir)) == 2)
        rep = report_json(logdir)
        res = earlylog("report", logdir)
    finally:
        kill_tree(proc)
    parent, child = sorted(by_tag(rep, "prep"), key=lambda p: p["start"])
    assert parent["state"] == child["state"] == "stalled"
    assert child["where"]["function"] == "fetch_config" and child["ppid"] == parent["pid"]
    assert "waiting on a lock" in child["stall"]["main"]["state"]
    assert rep["verdict"][0] == "2 of 2 processes in trouble: 2 stuck"
    (cause,) = [c for c in rep["causes"] if c["kind"] == "child"]
    assert cause["pids"] == [parent["pid"], child["pid"]]
    assert cause["text"].startswith("pid %d (prep) waits in subprocess.run (<module> at prep.py:8) for child pid %d "
                                    "(python prep.py child), which is waiting on a lock" % (parent["pid"], child["pid"]))
    assert cause["text"].endswith("; the child is stalled in fetch_config at prep.py:4")
    assert res.returncode == 1 and "waits in subprocess.run (<module> at prep.py:8) for child" in " ".join(res.stdout.split())


def test_sigkilled_process_vanished_and_the_report_says_how_to_confirm(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import earlylog, time
        earlylog.log("loading shards")
        time.sleep(60)
        """, "load.py")], logdir)
    try:
        wait_log(logdir, "loading shards")
    finally:
        kill_tree(proc)
    rep = report_json(logdir)
    (p,) = rep["processes"]
    assert p["state"] == "vanished" and p["end"] is not None and p["status"] is None
    assert "vanished: no exit record and no longer running" in rep["verdict"][1]
    assert "killed by SIGKILL" in rep["verdict"][2] and "dmesg" in rep["verdict"][2]
    # The OOM killer cannot be called up safely here: its trace is the watchdog's last `mem:`
    # breadcrumb, so the same log gets the line a process in a full cgroup writes before it dies.
    oom = tmp_path / "oom"
    oom.mkdir()
    (path,) = log_files(logdir)
    shutil.copy(path, oom)
    with open(oom / os.path.basename(path), "a") as f:
        f.write(records.format_lines("text", p["last_seen"] + 1, p["pid"], p["tag"], "vm", "mem",
                                     "rss 1900 MiB; cgroup 1990 MiB of 2048 MiB (97%); oom_kill 1 (up from 0: the "
                                     "kernel's OOM killer killed a process in this cgroup)"))
    rep = report_json(oom)
    assert rep["processes"][0]["memory"]["oom_kill_rose"] is True
    assert "likely cause for pid %d (load): the kernel's OOM killer" % p["pid"] in rep["verdict"][2]


@pytest.mark.slow
def test_segfault_names_the_crashing_function(tmp_path, logdir):
    res = run_python([script(tmp_path, """
        import faulthandler, subprocess, sys
        def crash_here():
            faulthandler._sigsegv()
        if sys.argv[1:] == ["child"]:
            crash_here()
        sys.exit(subprocess.run([sys.executable, __file__, "child"]).returncode and 3)
        """, "crash.py")], logdir=logdir)
    assert res.returncode == 3
    rep = report_json(logdir)
    parent, child = sorted(rep["processes"], key=lambda p: p["start"])
    assert child["state"] == "crashed" and child["crash"]["signal"] == "SIGSEGV"
    assert child["where"]["function"] == "crash_here" and child["where"]["line"] == 4
    assert parent["state"] == "failed" and parent["status"] == 3
    assert "crashed: Segmentation fault (SIGSEGV) in crash_here at crash.py:4" in " ".join(rep["verdict"])
    text = earlylog("report", "--stacks", logdir).stdout
    assert "crash.py:4 in crash_here" in text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_rendezvous_hang_names_the_straggler_rank(tmp_path, logdir):
    pytest.importorskip("torch")
    job = script(tmp_path, STRAGGLER_JOB, "job.py")
    proc = start(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                  "--master-port", str(free_port()), job], logdir, EARLYLOG_STALL=2, OMP_NUM_THREADS=1)
    try:
        wait_for(lambda: straggler_dumped(logdir), timeout=TIMEOUT * 2)
        rep = report_json(logdir)
    finally:
        for f in log_files(logdir):  # torchrun starts each rank in a session of its own
            if "-rank" in f:
                kill_pid(records.parse(read(f).partition("\n")[0])["pid"])
        kill_tree(proc)
    (rank0,), (rank1,) = by_tag(rep, "rank0"), by_tag(rep, "rank1")
    assert rank0["state"] == rank1["state"] == "stalled" and rank0["rank"] == 0
    assert rank1["where"]["function"] == "read_index"
    assert rank0["stall"]["main"]["call"] == "barrier"
    assert "rank 1 is the straggler: it is in read_index at job.py:5, outside any collective (waiting on a lock, " \
           "condition or event); rank 0 waits in barrier #1 on group 0 for it" in rep["verdict"]
    # After the kill, the story stays readable: the ranks vanished while stuck where they were.
    wait_for(lambda: all(p["state"] == "vanished" for p in report_json(logdir)["processes"]))
    after = report_json(logdir)
    assert any("it had stalled" in line and "read_index" in line for line in after["verdict"])


def test_bad_input_gives_clear_lines_and_partial_results(tmp_path, logdir):
    res = run_python("import earlylog; earlylog.log('hello')", logdir=logdir)
    (real,), pid = res.files(), res.records()[0]["pid"]
    json_run = tmp_path / "json"
    run_python("import earlylog; earlylog.log('json hello')", logdir=json_run, env={"EARLYLOG_FORMAT": "json"})
    (json_log,) = log_files(json_run)
    with open(json_log) as src, open(logdir / "20990101-000000-gpu7-4242-cmd.log", "w") as dest:
        for line in src:  # the same run's JSON lines, as another host would have written them
            dest.write(json.dumps(dict(json.loads(line), host="gpu7")) + "\n")
    host = os.path.basename(real).split("-")[2]
    newer = logdir / os.path.basename(real).replace("-%s-" % host, "-node9-")
    with open(real) as src, open(newer, "w") as dest:
        dest.write(src.read().replace("earlylog %s at" % __version__, "earlylog 9.0.0 at"))
        dest.write("[earlylog] 2099-01-01 00:00:00.000 %d cmd teleport: a kind from the future\n" % pid)
    with open(real, "rb") as src, open(logdir / os.path.basename(real).replace("-%s-" % host, "-half-"), "wb") as dest:
        dest.write(src.read()[:-10])  # killed in the middle of its last write
    (logdir / "notes.txt").write_text("not ours\n" * 30)
    (logdir / "core").write_bytes(os.urandom(200000))
    res = earlylog("report", logdir)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr + res.stdout
    assert "2 files are not earlylog logs, skipped: core, notes.txt" in res.stdout
    assert "half-written line" in res.stdout and "earlylog 9.0.0, newer than this" in res.stdout
    rep = report_json(logdir)
    assert rep["counts"]["processes"] == 4  # the same pid on four hosts: four processes
    assert {"gpu7", "node9", "half", host} == set(rep["hosts"])
    assert [p["state"] for p in rep["processes"] if p["host"] == "node9"] == ["exited"]
    assert [p["state"] for p in rep["processes"] if p["host"] == "gpu7"] == ["exited"]

    # EARLYLOG_FILE: parent and child interleave their lines in one file; each is its own process
    shared = tmp_path / "shared"
    shared.mkdir()
    run_python("import subprocess, sys; subprocess.run([sys.executable, '-c', 'import sys; sys.exit(4)'])",
               env={"EARLYLOG_FILE": shared / "all.log"})
    rep = report_json(shared)
    assert sorted((p["state"], p["status"]) for p in rep["processes"]) == [("exited", 0), ("failed", 4)]

    empty = tmp_path / "empty"
    empty.mkdir()
    res = earlylog("report", empty)  # a wrong folder is not "all well": exit 2 and say what to pass
    assert res.returncode == 2 and "holds no earlylog logs" in res.stderr and "first earlylog line" in res.stderr
    res = earlylog("report", tmp_path / "missing")
    assert res.returncode == 2 and res.stderr.strip() == "earlylog: %s does not exist" % (tmp_path / "missing")
    # no folder given: the newest run folder under $TMPDIR/earlylog-<uid>/, else one clear line
    res = earlylog("report", env={"TMPDIR": str(tmp_path / "nothing")})
    assert res.returncode == 2 and "no run folder under" in res.stderr and "Traceback" not in res.stderr
    run_python("import earlylog; earlylog.log('older run')", env={"TMPDIR": str(tmp_path)})
    run_python("import earlylog; earlylog.log('default folder')", env={"TMPDIR": str(tmp_path)})
    base = tmp_path / ("earlylog-%d" % os.getuid())
    runs = sorted(os.listdir(base), key=lambda n: os.path.getmtime(base / n))
    res = earlylog("report", env={"TMPDIR": str(tmp_path)})
    assert res.returncode == 0 and str(base / runs[-1]) in res.stdout
    # it names the run it picked, and the others, on stderr (stdout stays the report)
    assert "reading the newest run, %s" % (base / runs[-1]) in res.stderr
    assert "other recent runs: %s (" % runs[-2] in res.stderr
    res = earlylog("report", base)  # the base, not a run folder
    assert res.returncode == 2 and "it holds run folders: pass one, e.g. the newest, %s" % (base / runs[-1]) in res.stderr


def test_a_project_in_a_folder_named_earlylog_is_the_users_code(tmp_path, logdir):
    # A user's project (or a clone of this repository) in a folder named `earlylog` is not
    # earlylog: its frames are the user's, and the library call they are in is named.
    project = tmp_path / "earlylog" / "proj"
    project.mkdir(parents=True)
    path = script(project, """
        import subprocess, sys
        def prepare():
            subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"])
        prepare()
        """, "train.py")
    proc = start([path], logdir, EARLYLOG_NATIVE=0)
    try:
        wait_for(lambda: any("dump: stall" in read(f) and "train.py" in read(f) for f in log_files(logdir)))
        rep = report_json(logdir)
    finally:
        kill_tree(proc)
    main = [p for p in by_tag(rep, "train") if p["stall"]][0]
    assert main["where"]["function"] == "prepare" and main["where"]["file"] == path
    assert main["stall"]["main"]["call"] == "subprocess.run"


def test_a_clone_and_venv_under_a_folder_named_earlylog_keep_the_library_call(tmp_path):
    # A clone of this repository in /home/u/earlylog with its venv inside: torch's frames there are
    # library frames, the user's are the user's, and only the runtime's own folder (named on the
    # start line) is earlylog.
    from support import stalled, thread
    venv = "/home/u/earlylog/.venv/lib/python3.11/site-packages"
    frames = [(venv + "/torch/distributed/distributed_c10d.py", 4159, "barrier", "work = group.barrier(opts=opts)"),
              ("/home/u/earlylog/train.py", 12, "sync", "dist.barrier()"),
              ("/home/u/earlylog/train.py", 20, "<module>", "sync()")]
    own = [("/opt/earlylog/runtime/stdio.py", 40, "write", "return self._target.write(data)")]
    stalled(tmp_path / "run", 4242, thread("MainThread", "0x7f01", own + frames, main=True, daemon=False),
            tag="train")
    rep = verdict.judge(logread.read(str(tmp_path / "run")))
    main = rep["processes"][0]["stall"]["main"]
    assert main["frame"] == {"file": "/home/u/earlylog/train.py", "line": 12, "function": "sync"}
    assert main["call"] == "barrier"
    assert [f["file"] for f in main["frames"]][0] == venv + "/torch/distributed/distributed_c10d.py"


def test_a_program_that_execs_another_in_the_same_second_is_judged_by_the_newer(tmp_path):
    # Ray's setup_worker execs default_worker: one pid, two files of the same second, the newer
    # program's name sorting first. The newer program's stall is the story, whatever the names.
    from support import stalled, thread, write
    folder = tmp_path / "run"
    stalled(folder, 4242, thread("MainThread", "0x7f01", [("/srv/job.py", 11, "hang_forever", "time.sleep(10)")],
                                 main=True, daemon=False), tag="default_worker")
    write(folder, 4242, [(-0.5, "start", "pid 4242 (parent 1) argv python setup_worker.py; log x (via pth, "
                                         "earlylog 0.1.0 at /opt/earlylog, Python 3.11.7)", ())], tag="setup_worker")
    (proc,) = verdict.judge(logread.read(str(folder)))["processes"]
    assert proc["tag"] == "default_worker" and proc["where"]["function"] == "hang_forever"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tests_pass_in_a_clone_whose_folder_and_venv_are_under_a_directory_called_earlylog(tmp_path):
    # A developer clones this repository into a folder named `earlylog` with its venv inside: the
    # runtime, the test scripts' library (torch, through the venv) and the user's code all sit
    # under `/earlylog/`. Only the runtime's own folder is earlylog; the straggler test once failed
    # there because torch's `barrier` frame was taken for earlylog's.
    torch = pytest.importorskip("torch")
    from support import PYTHON, ROOT, clean_env
    import subprocess
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no clone to make")
    clone = tmp_path / "earlylog"
    for name in filter(None, listed.stdout.decode().split("\0")):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(clone / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), clone / name)
    venv = clone / ".venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, env=clean_env())
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, env=clean_env()).stdout.strip()
    # What an editable install of the clone writes (its source folder and its hook line), torch
    # inside the venv, and this environment's test tools after both.
    ours = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    with open(os.path.join(site, "clone.pth"), "w") as f:
        f.write(str(clone / "injector") + "\n" + ours + "\n")
    shutil.copy(clone / "_build" / "earlylog.pth", site)
    os.symlink(os.path.dirname(torch.__file__), os.path.join(site, "torch"))
    inner = tmp_path / "inner"
    res = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(inner),
                          "tests/test_report.py::test_torchrun_rendezvous_hang_names_the_straggler_rank",
                          "tests/test_report.py::test_a_project_in_a_folder_named_earlylog_is_the_users_code"],
                         cwd=str(clone), capture_output=True, text=True, timeout=540,
                         env=clean_env(PATH=str(venv / "bin") + os.pathsep + os.environ["PATH"]))
    assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    # The runs were what they claim: the clone's runtime wrote the logs, torch ran from the clone's venv.
    logs = "".join(read(os.path.join(d, n)) for d, _, names in os.walk(inner) for n in names if n.endswith(".log"))
    assert "earlylog %s at %s, Python" % (__version__, clone / "injector" / "earlylog") in logs
    assert str(venv) + "/lib/" in logs and "/torch/distributed/" in logs


def test_a_stopped_process_is_stuck_and_the_report_says_how_to_resume_it(tmp_path, logdir):
    proc = start([script(tmp_path, """
        import time
        for step in range(100000):
            print("step", step, flush=True)
            time.sleep(0.1)
        """, "loop.py")], logdir)
    try:
        wait_for(lambda: any("out: step 3" in read(f) for f in log_files(logdir)))
        os.kill(proc.pid, signal.SIGSTOP)  # as Ctrl-Z, or SIGTTIN to a background job reading the terminal
        time.sleep(0.5)
        (p,) = report_json(logdir)["processes"]
        assert p["state"] == "stalled"
        assert p["summary"].startswith("stopped by a signal (kernel state T: SIGSTOP, Ctrl-Z")
        assert "`kill -CONT %d` resumes it" % proc.pid in p["summary"]
        os.kill(proc.pid, signal.SIGCONT)
        wait_for(lambda: report_json(logdir)["processes"][0]["state"] == "running")
    finally:
        kill_tree(proc)
