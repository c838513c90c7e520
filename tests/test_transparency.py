"""Issue 7, transparency: real third-party test suites (six, toolz, from their PyPI sdists) and a
torch CPU training script give the same results and output with and without EARLYLOG=1."""
import os
import re
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from support import PYTHON, clean_env, run_both, script, user_text

# Pure-Python projects whose own suites run in seconds straight from the unpacked sdist.
SUITES = {
    "six": ("1.17.0", ["test_six.py"]),
    "toolz": ("1.2.0", ["toolz"]),
}
CACHE = os.path.join(tempfile.gettempdir(), "earlylog-test-sdists")


def unpacked_sdist(name, version):
    """The project's source folder, downloaded once per machine (CI: a fresh download)."""
    folder = os.path.join(CACHE, "%s-%s" % (name, version))
    if not os.path.isdir(folder):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run([PYTHON, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                        "-d", CACHE, "%s==%s" % (name, version)], check=True, env=clean_env(), timeout=300)
        scratch = CACHE + ".tmp%d" % os.getpid()
        with tarfile.open(os.path.join(CACHE, "%s-%s.tar.gz" % (name, version))) as tar:
            tar.extractall(scratch, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        try:
            os.rename(os.path.join(scratch, "%s-%s" % (name, version)), folder)
        except OSError:  # another test run unpacked it first
            assert os.path.isdir(folder)
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def without_timings(text):
    return re.sub(r" in \d+\.\d+s", " in Xs", text)


@pytest.mark.slow
@pytest.mark.parametrize("project", sorted(SUITES))
def test_third_party_suite_same_results(logdir, project):
    version, targets = SUITES[project]
    source = unpacked_sdist(project, version)
    command = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + targets
    runs = []
    for extra in ({}, {"EARLYLOG": "1", "EARLYLOG_DIR": logdir}):
        proc = subprocess.run(command, cwd=source, env=clean_env(**extra), capture_output=True, timeout=120)
        runs.append((proc.returncode, without_timings(proc.stdout.decode()), user_text(proc.stderr)))
    assert runs[0] == runs[1]
    assert runs[0][0] == 0 and re.search(r"\d+ passed", runs[0][1])
    assert [n for n in os.listdir(str(logdir)) if n.endswith("-pytest.log")]


@pytest.mark.slow
def test_torch_training_script_same_output(tmp_path, logdir):
    train = script(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(0)
        x = torch.randn(256, 8)
        y = x @ torch.arange(8.0) + 0.5
        loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=2)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(3):
            for xb, yb in loader:
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
                loss.backward()
                opt.step()
            print("epoch %d loss %.6f" % (epoch, loss.item()))
    """, name="train.py")
    on = run_both([train], logdir, timeout=120)
    assert on.returncode == 0 and on.out.count("loss") == 3
    tags = {r["tag"] for r in on.records() if r["kind"] == "start"}
    assert "train" in tags and "fork<train" in tags, "the DataLoader workers log too"
