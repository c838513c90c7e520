"""The benchmark's virtualenvs (bare, earlylog installed, an alternative tool installed), cached.
It only builds under its own cache folder and never touches the interpreter that runs the bench."""
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What `pip install <repo>` copies into a venv: a change to any of it means a stale install.
_SOURCES = ("injector", "_build", "sitecustomize_template", "setup.cfg", "pyproject.toml")


def default_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "earlylog-bench")


def source_fingerprint():
    digest = hashlib.sha256()
    for top in _SOURCES:
        path = os.path.join(ROOT, top)
        files = [path] if os.path.isfile(path) else sorted(
            os.path.join(d, n) for d, _, names in os.walk(path) for n in names if not n.endswith(".pyc"))
        for name in files:
            digest.update(os.path.relpath(name, ROOT).encode())
            with open(name, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:16]


def _pip(python, *args):
    """The bench interpreter's own pip acting on another venv (`pip --python`), so the bench
    venvs need no pip of their own and build in a second instead of ensurepip's several."""
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                           "--disable-pip-version-check", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        lines = [l for l in (proc.stderr or proc.stdout).splitlines() if l.strip()
                 and not l.startswith("WARNING: Location")]
        raise RuntimeError("pip install %s failed: %s" % (" ".join(args), lines[-1] if lines else proc.returncode))


class Venvs:
    """bare(), earlylog(), alternative(name): the python of each venv, built on first use and
    then kept for the whole run, so a source edit made while the bench runs rebuilds nothing."""

    def __init__(self, cache):
        self.cache = cache
        self._ready = {}
        os.makedirs(cache, exist_ok=True)

    def _venv(self, name, stamp, install):
        if name not in self._ready:
            self._ready[name] = self._build(name, stamp(), install)
        return self._ready[name]

    def _build(self, name, stamp, install):
        """The venv `name`, rebuilt unless its stamp file says it holds `stamp` already."""
        folder = os.path.join(self.cache, name)
        python = os.path.join(folder, "bin", "python")
        stamp_path = os.path.join(folder, "bench-stamp")
        stamp = "%s %s %s" % (stamp, sys.base_prefix, sys.version.split()[0])
        # Two benches (a test and a person) may share the cache: one builds, the other waits.
        with open(os.path.join(self.cache, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(stamp_path) as f:
                    if f.read() == stamp:
                        return python
            except OSError:
                pass
            shutil.rmtree(folder, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True,
                           capture_output=True, timeout=120)
            install(python)
            with open(stamp_path, "w") as f:
                f.write(stamp)
        return python

    def bare(self):
        return self._venv("bare", lambda: "bare", lambda python: None)

    def earlylog(self):
        """earlylog installed the way a user installs it (not editable), from this checkout."""
        return self._venv("earlylog", source_fingerprint, lambda python: _pip(python, ROOT))

    def alternative(self, package):
        return self._venv("alt-" + package, lambda: package, lambda python: _pip(python, package))
