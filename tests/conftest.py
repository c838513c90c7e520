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
