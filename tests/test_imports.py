"""The import timeline: slow and stuck imports are named, and imports behave exactly as without it."""
import glob
import subprocess
import zipfile

import pytest

from support import PYTHON, clean_env, log_files, read, run_python, script, wait_log

# One script that leans on every corner of the import system the timeline must leave alone.
SEMANTICS = r'''
import importlib, importlib.util, sys, traceback
sys.path[:0] = [HERE + "/one", HERE + "/two", HERE + "/zipped.zip"]
import ns.a, ns.b                                    # a namespace package split over two folders
print("namespace", [p[len(HERE):] for p in ns.__path__], ns.__spec__.origin, ns.a.NAME, ns.b.NAME)
spec = importlib.util.find_spec("plain")
print("find_spec", spec.name, type(spec.loader).__name__, spec.origin[len(HERE):], "plain" in sys.modules)
import plain
print("loaded", plain.__spec__ is spec or plain.__spec__.name, type(plain.__loader__).__name__)
import zipmod                                        # a zip import
print("zip", type(zipmod.__loader__).__name__, zipmod.VALUE)
importlib.reload(plain)
print("reload", plain.RUNS)
spec = importlib.util.find_spec("lazy")              # a lazy loader defers the module's code
spec.loader = importlib.util.LazyLoader(spec.loader)
lazy = importlib.util.module_from_spec(spec)
sys.modules["lazy"] = lazy
spec.loader.exec_module(lazy)
print("lazy before use", getattr(sys, "lazy_ran", False))
print("lazy after use", lazy.VALUE, sys.lazy_ran)
try:
    import missing_module_xyz
except ImportError as exc:
    print("missing", type(exc).__name__, exc.name)
try:
    import broken
except ValueError:
    traceback.print_exc(file=sys.stdout)
from plain import nothing_here                       # uncaught: the traceback the user sees
'''


def _semantics_tree(tmp_path):
    files = {
        "one/ns/a.py": "NAME = 'a'\n",
        "two/ns/b.py": "NAME = 'b'\n",
        "one/plain.py": "import sys\nsys.plain_runs = getattr(sys, 'plain_runs', 0) + 1\nRUNS = sys.plain_runs\n",
        "one/lazy.py": "import sys\nsys.lazy_ran = True\nVALUE = 42\n",
        "one/broken.py": "import json\n\ndef fail():\n    raise ValueError('boom at import')\n\nfail()\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with zipfile.ZipFile(str(tmp_path / "zipped.zip"), "w") as z:
        z.writestr("zipmod.py", "VALUE = 'from the zip'\n")
    return script(tmp_path, "HERE = %r\n" % str(tmp_path) + SEMANTICS, "semantics.py")


def _other_pythons():
    found = []
    for version in ("3.9", "3.13"):
        found += sorted(glob.glob("/root/.pyenv/versions/%s.*/bin/python%s" % (version, version)))[-1:]
    return found


@pytest.mark.parametrize("python", [PYTHON] + _other_pythons())
def test_imports_behave_exactly_as_without_earlylog(tmp_path, logdir, python):
    path = _semantics_tree(tmp_path)
    env = {"EARLYLOG_CONSOLE": "off", "EARLYLOG_IMPORTS": "0.000001"}
    if python != PYTHON:  # not installed there: the way `earlylog run` reaches any Python
        from earlylog.cli import launch
        env.update(launch.variables({}))
    bare = run_python([path], python=python, enabled=False, cwd=str(tmp_path))
    logged = run_python([path], logdir=logdir, python=python, env=env, cwd=str(tmp_path))
    assert bare.returncode == 1 and "boom at import" in bare.out and "nothing_here" in bare.err
    assert (logged.returncode, logged.out, logged.err) == (bare.returncode, bare.out, bare.err)
    text = logged.text()
    assert "phase: begin import broken" in text
    assert "phase: error import broken after" in text and "ValueError: boom at import" in text
    assert "phase: slow import ns.a after" in text  # a submodule over the (tiny) threshold
    assert "begin import json" not in text          # the standard library gets no begin lines


def test_slow_import_names_module_and_time(tmp_path, logdir):
    (tmp_path / "slowpkg").mkdir()
    (tmp_path / "slowpkg" / "__init__.py").write_text("from slowpkg import heavy\n")
    (tmp_path / "slowpkg" / "heavy.py").write_text("import time\ntime.sleep(0.6)\n")
    result = run_python("import slowpkg; print('imported')", logdir=logdir, cwd=str(tmp_path),
                        env={"EARLYLOG_IMPORTS": "0.3", "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0 and result.out == "imported\n"
    lines = [r["msg"] for r in result.records() if r["kind"] == "phase"]
    assert lines[0] == "begin import slowpkg"
    assert lines[1].startswith("slow import slowpkg.heavy after 0.")
    assert lines[2].startswith("end import slowpkg after 0.")
    # A healthy run's work stays in the file (issue 38); EARLYLOG_CONSOLE=all shows it as it comes.
    assert "phase: slow import slowpkg.heavy after" not in result.err
    loud = run_python("import slowpkg", logdir=logdir, cwd=str(tmp_path),
                      env={"EARLYLOG_IMPORTS": "0.3", "PYTHONPATH": str(tmp_path), "EARLYLOG_CONSOLE": "all"})
    assert "phase: slow import slowpkg.heavy after" in loud.err


def test_stuck_import_is_named_with_how_long(tmp_path, logdir):
    (tmp_path / "stuck_ext.py").write_text("import time\ntime.sleep(120)\n")
    env = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir), EARLYLOG_STALL="1", PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen([PYTHON, "-c", "import stuck_ext"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        text = wait_log(logdir, "phase: begin import stuck_ext", timeout=30)
        try:  # the stall dump (the watchdog's) says how long it has been importing, once it exists
            text = wait_log(logdir, "dump:", timeout=4)
        except AssertionError:
            pass
        else:
            assert "import stuck_ext (" in text and "s so far)" in text
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert "end import stuck_ext" not in "".join(read(p) for p in log_files(logdir))


def test_import_timeline_off_and_marks_off(tmp_path, logdir):
    (tmp_path / "mypkg.py").write_text("VALUE = 1\n")
    result = run_python("import mypkg", logdir=logdir, cwd=str(tmp_path),
                        env={"EARLYLOG_IMPORTS": "0", "EARLYLOG_MARKS": "0", "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0
    assert "phase:" not in result.text()
