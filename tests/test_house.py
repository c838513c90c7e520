"""The three sides of the package stay apart: a process with EARLYLOG=1 loads the runtime only,
the reader and the command use each other's public names only, and a runtime copy holds the
runtime only. Checked on real processes and on the source's import statements."""
import ast
import json
import os

from support import ROOT, run_python

PACKAGE = os.path.join(ROOT, "injector", "earlylog")


def _sources(side):
    folder = os.path.join(PACKAGE, side)
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]


def _imports(path):
    """(module, name) for every `from X import Y` and (module, None) for every `import X`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None


def test_a_process_with_earlylog_on_loads_only_the_runtime(tmp_path, logdir):
    code = ("import json, sys, threading, subprocess\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('earlylog'))))")
    res = run_python(code, logdir=logdir, env={"EARLYLOG_STALL": "1"})
    assert res.returncode == 0, res.err
    loaded = json.loads(res.out)
    assert "earlylog.runtime.boot" in loaded
    assert [m for m in loaded if not m.startswith("earlylog.runtime") and m != "earlylog"] == []


def test_the_runtime_never_imports_the_reader_or_the_command():
    for path in _sources("runtime"):
        for module, _name in _imports(path):
            assert not module.startswith(("earlylog.read", "earlylog.cli")), (path, module)


def test_reader_and_command_use_only_each_others_public_names():
    for side, other in (("read", "earlylog.cli"), ("cli", "earlylog.read"), ("cli", "earlylog.runtime"),
                        ("read", "earlylog.runtime")):
        for path in _sources(side):
            for module, name in _imports(path):
                if module.startswith(other):
                    assert not (name or module.rpartition(".")[2]).startswith("_"), (path, module, name)
    for path in _sources("read"):
        assert not any(m.startswith("earlylog.cli") for m, _ in _imports(path)), path


def test_a_runtime_copy_holds_the_runtime_only(tmp_path):
    from earlylog.cli import bundle
    written = bundle.copy_runtime(str(tmp_path))
    names = sorted(os.path.relpath(p, str(tmp_path / "earlylog")) for p in written)
    assert "__init__.py" in names and "phases.py" in names and os.path.join("runtime", "boot.py") in names
    assert [n for n in names if not n.startswith("runtime" + os.sep) and n not in ("__init__.py", "phases.py")] == []
