"""Shared fixtures: a log folder per test, and fresh virtualenvs made with the real venv module."""
import os
import subprocess
import sys

import pytest

from support import ROOT, clean_env


@pytest.fixture
def logdir(tmp_path):
    path = tmp_path / "logs"
    path.mkdir()
    return path


def make_venv(path, python=sys.executable):
    subprocess.run([python, "-m", "venv", str(path)], check=True, env=clean_env())
    return os.path.join(str(path), "bin", "python")


def pip_install(venv_python, *args):
    subprocess.run([venv_python, "-m", "pip", "install", "-q", *args],
                   check=True, env=clean_env(), cwd=ROOT)


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory):
    """A virtualenv with nothing of earlylog in it."""
    return make_venv(tmp_path_factory.mktemp("bare") / "venv")


# A test that needed its rerun (pytest-rerunfailures, `.ci/run`'s --reruns 1) is a flaky test: the
# summary names it, and here is why its first try failed, so the cause is seen at every run rather
# than hidden by the pass that followed.
_first_tries = []


def pytest_runtest_logreport(report):
    if report.outcome == "rerun" and report.longrepr is not None:
        _first_tries.append((report.nodeid, report.when, str(report.longrepr)))


def pytest_terminal_summary(terminalreporter):
    if not _first_tries:
        return
    terminalreporter.section("why each rerun test failed its first try")
    for nodeid, when, text in _first_tries:
        lines = text.splitlines()
        terminalreporter.write_line("%s (%s), the last %d lines:" % (nodeid, when, min(len(lines), 30)))
        for line in lines[-30:]:
            terminalreporter.write_line("    " + line)
