"""The start pack (docs/design.md#the-start-pack): `earlylog install` builds it, a start loads the
start path's modules from it as real modules, and a stale, corrupt, foreign or unwritable pack
changes nothing the program can see: normal imports, no alarming line, and a rebuilt pack. Each
CPython on the machine loads its own pack from a folder they share. Real processes throughout;
copies of the runtime are edited, never this checkout's own source."""
import ast
import glob
import json
import os
import shutil
import sys

import pytest

from conftest import make_venv
from support import ROOT, earlylog, python_3, run_both, run_python

from earlylog.cli import bundle
from earlylog import runtime as reader  # the pack's reader: the runtime package's own module

RUNTIME = os.path.join(ROOT, "injector", "earlylog", "runtime")
PACKED = sorted(reader.MODULES + reader.LATER)  # what a started process has from the pack

# What a started process says about its earlylog modules: where each came from, and that they
# behave as modules: source, pickling, a lazy import after start-up.
PROBE = r"""
import sys
util = "importlib.util" in sys.modules  # before anything below imports it
import inspect, json, pickle
import earlylog.runtime as reader
from earlylog.runtime import boot, config, startpack  # the writer: not on the start path
from earlylog.runtime import probes  # not on the start path: the normal import, after start-up
from earlylog.runtime import libc, phases, raised  # the pack's second stage (LATER), made at first import
from earlylog.grammar import places
# Where each came from: "pack" (its spec says so), else its loader's class.
loaders = {n[9:]: "pack" if m.__spec__.loader_state == reader.PACKED else type(m.__loader__).__name__
           for n, m in sys.modules.items() if n.startswith(("earlylog.runtime.", "earlylog.grammar"))}
print(json.dumps({"outcome": reader.outcome, "util": util, "loaders": loaders, "pack": reader.path(),
                  "reader": type(reader.__loader__).__name__,
                  "source": "def start(origin" in inspect.getsource(boot),
                  "file": boot.start.__code__.co_filename == boot.__file__ == boot.__spec__.origin and
                          boot.__cached__ == boot.__spec__.cached and boot.__package__ == "earlylog.runtime",
                  "pickle": type(pickle.loads(pickle.dumps(config.Config()))).__name__}))
print("the program's own line")
"""


def _probe(python, logdir, env=None):
    res = run_python(PROBE, python=python, logdir=logdir, env=dict({"EARLYLOG_CONSOLE": "off"}, **(env or {})))
    assert res.returncode == 0 and res.err == "", res.err
    facts = json.loads(res.out.splitlines()[0])
    assert facts["source"] and facts["file"] and facts["pickle"] == "Config", facts
    assert facts["loaders"]["runtime.probes"] == "SourceFileLoader"
    return facts


def _packed(facts):
    return sorted(n for n, loader in facts["loaders"].items() if loader == "pack")


@pytest.fixture
def installed(tmp_path):
    """A fresh venv with `earlylog install`ed into it: (its python, its runtime copy's folder)."""
    python = make_venv(tmp_path / "venv")
    done = earlylog("install", "--python", python)
    assert done.returncode == 0 and "note:" not in done.stdout, done.stdout + done.stderr
    runtime = glob.glob(str(tmp_path / "venv" / "lib" / "python3.*" / "site-packages" / "earlylog_hook" / "*" /
                            "earlylog" / "runtime"))
    assert len(runtime) == 1
    return python, runtime[0]


def test_install_builds_the_pack_and_a_start_loads_the_start_path_from_it(installed, logdir):
    python, runtime = installed
    pack = os.path.join(runtime, "__pycache__", "startpack.%s.pack" % sys.implementation.cache_tag)
    assert os.path.isfile(pack)
    assert os.stat(pack).st_mtime_ns == reader.WRITTEN_NS  # its writer's mark: read without hashing
    facts = _probe(python, logdir)
    assert facts["outcome"] == "used" and facts["pack"] == pack
    assert _packed(facts) == PACKED
    assert facts["reader"] == "SourceFileLoader"  # it loads normally, ahead of the pack
    assert facts["loaders"]["runtime.startpack"] == "SourceFileLoader"  # the writer too, when imported
    assert not facts["util"]  # the private copy loads by location without importlib.util's 16 modules
    log = "".join(open(os.path.join(logdir, n)).read() for n in os.listdir(logdir))
    assert " start: " in log and "failed" not in log


def test_a_stale_pack_falls_back_for_the_edited_module_and_is_rebuilt(installed, logdir):
    python, runtime = installed
    with open(os.path.join(runtime, "sinks.py"), "a") as f:
        f.write("\n# edited after the pack was built\n")
    stale = _probe(python, logdir)
    assert stale["outcome"] == "stale"
    assert stale["loaders"]["runtime.sinks"] == "SourceFileLoader" and stale["loaders"]["runtime.boot"] == "pack"
    assert _probe(python, logdir)["outcome"] == "used"  # rebuilt by the stale start, edit included
    assert _packed(_probe(python, logdir)) == PACKED
    # A second-stage module edited: it imports from its file, and the pack is built again.
    with open(os.path.join(runtime, "phases.py"), "a") as f:
        f.write("\n# edited after the pack was built\n")
    assert _probe(python, logdir)["loaders"]["runtime.phases"] == "SourceFileLoader"
    assert _probe(python, logdir)["outcome"] == "missing"
    assert _packed(_probe(python, logdir)) == PACKED


def _damage(pack, how):
    with open(pack, "rb") as f:
        data = bytearray(f.read())
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "flipped":  # one byte inside a module's code: the hash catches it
        data[len(data) // 2] ^= 0x55
    elif how == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:  # another interpreter's magic number (a pack copied from another Python)
        data[0] ^= 0xFF
    with open(pack, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "foreign"])
def test_a_damaged_or_foreign_pack_changes_nothing_the_program_sees(installed, logdir, tmp_path, how):
    python, runtime = installed
    pack = os.path.join(runtime, "__pycache__", "startpack.%s.pack" % sys.implementation.cache_tag)
    program = os.path.join(str(tmp_path), "program.py")
    with open(program, "w") as f:
        f.write("import sys\nprint('out', sys.argv[1:])\nsys.stderr.write('err\\n')\nsys.exit(3)\n")
    _damage(pack, how)
    on = run_both([program, "a b"], logdir, python=python)  # same status, output and stderr
    assert on.returncode == 3 and "earlylog: " not in on.err and "failed" not in on.text()
    _damage(pack, how)
    facts = _probe(python, logdir)
    assert facts["outcome"] == "bad"
    # The hash covers the whole pack: any damage, or another interpreter's head, and every module
    # comes from its own file.
    assert _packed(facts) == []
    assert _probe(python, logdir)["outcome"] == "used"  # rebuilt from the .pyc files of the bad start


def test_an_unwritable_folder_imports_as_usual_and_says_nothing(installed, logdir):
    python, runtime = installed
    cache = os.path.join(runtime, "__pycache__")
    shutil.rmtree(cache)
    with open(cache, "w") as f:  # no folder can be made there, even by root
        f.write("not a folder\n")
    os.chmod(runtime, 0o555)
    try:
        for _ in range(2):
            facts = _probe(python, logdir)
            assert facts["outcome"] == "bad" and _packed(facts) == []
        dont = _probe(python, logdir, env={"PYTHONDONTWRITEBYTECODE": "1"})
        assert _packed(dont) == []
    finally:
        os.chmod(runtime, 0o755)


def test_pythondontwritebytecode_builds_no_pack(tmp_path, logdir):
    folder = str(tmp_path / "copy")
    bundle.copy_runtime(folder)
    shutil.copyfile(bundle.template_path(), os.path.join(folder, "sitecustomize.py"))
    for _ in range(2):
        res = run_python("pass", logdir=logdir, env={"PYTHONPATH": folder, "PYTHONDONTWRITEBYTECODE": "1",
                                                     "EARLYLOG_CONSOLE": "off"})
        assert res.returncode == 0 and res.err == ""
    assert glob.glob(os.path.join(folder, "earlylog", "runtime", "__pycache__", "*")) == []


def test_each_python_loads_its_own_pack_from_a_shared_folder(tmp_path, logdir):
    """One runtime folder on PYTHONPATH (`earlylog run`, `earlylog env`), used by every CPython
    here: each builds and loads a pack named by its own cache tag, never another's."""
    folder = str(tmp_path / "shared")
    bundle.copy_runtime(folder)
    shutil.copyfile(bundle.template_path(), os.path.join(folder, "sitecustomize.py"))
    tags = []
    for minor in (9, 10, 11, 12, 13):
        python = sys.executable if sys.version_info[:2] == (3, minor) else python_3(minor)
        if python is None:
            continue
        tag = "cpython-3%d" % minor
        tags.append(tag)
        env = {"PYTHONPATH": folder}
        first = _probe(python, logdir, env)
        assert first["outcome"] in ("missing", "bad") and first["pack"].endswith("startpack.%s.pack" % tag)
        second = _probe(python, logdir, env)
        assert second["outcome"] == "used" and _packed(second) == PACKED, (minor, second)
    assert len(tags) >= 2, "fewer than two CPythons on this machine"
    packs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "earlylog", "runtime", "__pycache__",
                                                                          "*.pack")))
    assert packs == sorted("startpack.%s.pack" % t for t in tags)
    # And after them all, each one still loads its own.
    for tag in tags:
        minor = int(tag[len("cpython-3"):])
        python = sys.executable if sys.version_info[:2] == (3, minor) else python_3(minor)
        assert _probe(python, logdir, {"PYTHONPATH": folder})["outcome"] == "used"


def _top_imports(name):
    """The MODULES names a start module imports at its top ("runtime.state", "grammar.records")."""
    with open(reader.source(name), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in ("earlylog.runtime", "earlylog.grammar"):
            yield from (node.module[9:] + "." + a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("earlylog.runtime.", "earlylog.grammar.")):
            yield node.module[9:]


def test_the_pack_holds_what_a_start_loads_each_after_what_it_imports(logdir):
    for i, name in enumerate(reader.MODULES):
        for imported in _top_imports(name):
            assert imported in reader.MODULES[:i], (name, imported)
    # What loaded before the program's first line, in a process whose watchdog has not loaded yet.
    res = run_python("import sys; print(' '.join(sorted(m[9:] for m in sys.modules "
                     "if m.startswith(('earlylog.runtime.', 'earlylog.grammar')))))", logdir=logdir,
                     env={"EARLYLOG_CONSOLE": "off", "PYTHONDONTWRITEBYTECODE": "1"})
    assert res.returncode == 0, res.err
    loaded = set(res.out.split()) - {"runtime.watchdog", "runtime.startpack"}
    assert loaded == set(reader.MODULES)
