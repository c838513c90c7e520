"""The early probes as a user reads them: what the process is and where it runs, secrets hidden,
and WARNING findings for environments that make training hang (real torch CPU, no GPU here)."""
import os
import stat
import subprocess
import time

import pytest

from support import PYTHON, TIMEOUT, clean_env, log_files, read, run_python, script

# Long enough for the background probes (nvidia-smi, packages) to write their lines.
WAIT_FOR_BACKGROUND = "import time, sys\ntime.sleep(0.5)\nprint('torch imported:', 'torch' in sys.modules)\n"
# The probes come 0.1 s into a process: a program that runs a little, as any job does.
WORK = "import time\ntime.sleep(0.3)"


def probes(result):
    return {r["msg"].split(":", 1)[0]: r["msg"] for r in result.records() if r["kind"] == "probe"}


def warnings(result):
    return [r["msg"] for r in result.records() if r["kind"] == "WARNING"]


def test_the_probes_say_what_the_process_is_and_where_it_runs(tmp_path, logdir):
    result = run_python(WAIT_FOR_BACKGROUND, logdir=logdir, cwd=str(tmp_path),
                        env={"RANK": "0", "WORLD_SIZE": "1", "OMP_NUM_THREADS": "4"})
    assert result.returncode == 0 and result.out == "torch imported: False\n"  # read, never imported
    found = probes(result)
    assert set(found) >= {"process", "stdio", "env", "machine", "gpu", "nvidia-smi", "packages"}
    text = result.text()
    assert "cwd %s;" % tmp_path in found["process"] and "| ranks: RANK=0 WORLD_SIZE=1" in text
    assert "stdout pipe (capacity 64 KiB, 0 bytes unread)" in found["stdio"]
    assert "| OMP_NUM_THREADS=4" in text
    assert " CPUs (" in found["machine"] and "RAM " in found["machine"] and "/dev/shm " in found["machine"]
    assert "torch 2.13.0+cpu (CPU-only build)" in found["packages"] and "numpy " in found["packages"]
    # Probe lines stay in the file; the console is kept for what needs a person's eyes.
    assert "probe:" not in result.err


def test_secrets_never_reach_a_file_or_the_console(tmp_path, logdir):
    secrets = {"HF_TOKEN": "hf_ZZsecretZZ1", "AWS_SECRET_ACCESS_KEY": "awsZZsecretZZ2",
               "HF_ENDPOINT": "https://alice:pwZZsecretZZ3@hub.example.com/?token=qZZsecretZZ4"}
    path = script(tmp_path, "import time\ntime.sleep(0.3)\n")
    result = run_python([path, "--hf-token", "argZZsecretZZ5"], logdir=logdir, env=secrets)
    assert result.returncode == 0
    # The parent's command line is logged too: a shell that set a token for its child.
    shell = subprocess.run(["sh", "-c", "WANDB_API_KEY=shZZsecretZZ6 %s %s; true" % (PYTHON, path)],
                           env=clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir), capture_output=True,
                           timeout=TIMEOUT)
    logs = "".join(read(p) for p in log_files(logdir))
    assert ": sh -c WANDB_API_KEY=*** " in logs
    everything = logs + result.out + result.err
    everything += (shell.stdout + shell.stderr).decode("utf-8", "replace")
    assert "ZZsecretZZ" not in everything
    assert "| HF_TOKEN=***" in result.text()
    assert "| HF_ENDPOINT=https://alice:***@hub.example.com/?token=***" in result.text()


@pytest.mark.skipif(os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/version"),
                    reason="this machine has an NVIDIA GPU")
def test_cuda_visible_devices_on_a_machine_without_gpu_warns(tmp_path, logdir):
    result = run_python(WORK, logdir=logdir, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert result.returncode == 0
    [warning] = [w for w in warnings(result) if "CUDA_VISIBLE_DEVICES" in w]
    assert "CUDA_VISIBLE_DEVICES=0 but no NVIDIA device is visible" in warning
    assert "no NVIDIA device is visible" in result.err  # a finding is shown on the console too
    unset = run_python(WORK, logdir=tmp_path / "unset")
    assert not [w for w in warnings(unset) if "CUDA_VISIBLE_DEVICES" in w]


def test_live_off_on_a_pipe_warns_about_buffered_output(tmp_path, logdir):
    result = run_python(WORK, logdir=logdir, env={"EARLYLOG_LIVE": "0"})
    assert any(w.startswith("stdout is a pipe and EARLYLOG_LIVE=0") for w in warnings(result))
    assert not [w for w in warnings(run_python(WORK, logdir=tmp_path / "live")) if "stdout is a pipe" in w]


def _dist(site, name, version, *requires):
    folder = site / ("%s-%s.dist-info" % (name, version))
    folder.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    lines += ["Requires-Dist: " + r for r in requires]
    (folder / "METADATA").write_text("\n".join(lines) + "\n\nLong description, numpy<2 here is prose.\n")


def test_package_metadata_findings(tmp_path, logdir):
    # Distributions installed beside the real torch 2.13.0 and numpy 2 of this venv, metadata only.
    site = tmp_path / "site"
    _dist(site, "torchvision", "0.15.0", "torch (==2.0.0)", "numpy")
    _dist(site, "oldscience", "1.0", "numpy (<2.0,>=1.21)")
    _dist(site, "fine", "1.0", "numpy<3", 'numpy<2; extra == "legacy"')
    result = run_python(WAIT_FOR_BACKGROUND, logdir=logdir, env={"PYTHONPATH": str(site)})
    found = warnings(result)
    assert any(w.startswith("torchvision 0.15.0 needs torch 2.0.0, but torch 2.13.0+cpu is installed")
               for w in found), found
    [numpy] = [w for w in found if w.startswith("numpy ")]
    assert "oldscience 1.0" in numpy and "fine" not in numpy


def test_a_hung_nvidia_smi_is_killed_after_its_timeout(tmp_path, monkeypatch):
    from earlylog.runtime import gpu
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    started = time.monotonic()
    assert gpu.smi(timeout=0.5) == ([], "timeout")
    assert time.monotonic() - started < 5


def test_probes_off_and_fork_children_log_no_probes(logdir):
    assert not probes(run_python(WORK, logdir=logdir, env={"EARLYLOG_PROBES": "0"}))
    # The child fails at once, which would run a process's probes at its exit: not a fork child's.
    code = "import os, time\npid = os.fork()\nif pid == 0:\n    os._exit(1)\nos.waitpid(pid, 0)\ntime.sleep(0.3)\n"
    result = run_python(code, logdir=os.path.join(str(logdir), "fork"))
    tags = {r["tag"] for r in result.records() if r["kind"] == "probe"}
    assert tags == {"cmd"} and len(result.files()) == 2


def test_a_process_that_ends_at_once_logs_no_probes_unless_it_failed(logdir):
    """The probes come 0.1 s in: a helper that is done by then (a launcher's `python -c ...`)
    pays nothing for them, and one that fails sooner still gets them, before its exit line."""
    quick = run_python("print('done')", logdir=logdir / "quick")
    assert quick.returncode == 0 and quick.out == "done\n"
    assert not probes(quick) and " exit: status 0 " in quick.text()
    failed = run_python("import no_such_module_here", logdir=logdir / "failed")
    kinds = [r["kind"] for r in failed.records()]
    assert failed.returncode == 1 and {"process", "stdio", "env", "machine", "gpu"} <= set(probes(failed))
    assert kinds.index("exception") < kinds.index("probe") < kinds.index("exit") == len(kinds) - 1
