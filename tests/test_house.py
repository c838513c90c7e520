"""The three sides of the package stay apart: a process with EARLYLOG=1 loads the runtime only,
the reader and the command use each other's public names only, and a runtime copy holds the
runtime only; and earlylog's own threads load modules only through the fork gate. Checked on real
processes and on the source's import statements."""
import ast
import json
import os

from support import ROOT, run_python, script

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
    assert [m for m in loaded if not m.startswith(("earlylog.runtime", "earlylog.grammar")) and m != "earlylog"] == []


def test_the_runtime_never_imports_the_reader_or_the_command():
    for path in _sources("runtime"):
        for module, _name in _imports(path):
            assert not module.startswith(("earlylog.read", "earlylog.cli")), (path, module)


def test_the_runtime_reaches_the_reader_only_through_the_judge_file():
    """No import and no code string of the runtime names the reader or the command: runtime/act.py
    starts cli/judge.py by its path (`python -I -S .../cli/judge.py LOG PID`), the documented entry."""
    for path in _sources("runtime"):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        code = [t for t in texts if any("%s earlylog.%s" % (word, side) in t
                                        for word in ("from", "import") for side in ("cli", "read"))]
        assert not code, (path, code)
    from earlylog.runtime import act
    argv = act.judge_argv("/tmp/x.log", 42)
    assert argv[1:3] == ["-I", "-S"] and argv[3] == act.JUDGE == os.path.join(PACKAGE, "cli", "judge.py")


def test_the_grammar_belongs_to_neither_room():
    for path in _sources("grammar"):
        for module, _name in _imports(path):
            assert not module.startswith(("earlylog.read", "earlylog.cli", "earlylog.runtime")), (path, module)


def test_the_reader_never_imports_the_runtime():
    """The log's grammar is a room of its own: the reader parses through it, never through the
    runtime's modules (which run inside other people's processes)."""
    for path in _sources("read"):
        for module, _name in _imports(path):
            assert not module.startswith("earlylog.runtime"), (path, module)


def test_reader_and_command_use_only_each_others_public_names():
    for side, other in (("read", "earlylog.cli"), ("cli", "earlylog.read"), ("cli", "earlylog.runtime")):
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
    assert os.path.join("grammar", "stalls.py") in names
    assert [n for n in names if not n.startswith(("runtime" + os.sep, "grammar" + os.sep))
            and n not in ("__init__.py", "phases.py")] == []


# Loaded by our threads outside the gate by design: they sleep or take seconds, and no fork child's
# start-up needs them (docs/design.md#imports-in-background-threads).
UNGATED = ("earlylog.runtime.native", "earlylog.runtime.spawn", "earlylog.runtime.packages")
GATE_SPY = """
import glob, json, os, signal, socket, subprocess, sys, threading, time

from earlylog.runtime import threads as ours

loads = []  # (module, gate held) for each module one of earlylog's threads loads


class Spy:
    # First on sys.meta_path: asked for every module not yet loaded, on the thread loading it.
    @staticmethod
    def find_spec(name, path=None, target=None):
        if ours.get_ident() in ours._ours:
            loads.append((name, ours._gate[0].locked()))
        return None


sys.meta_path.insert(0, Spy)
lock, stop = threading.Lock(), threading.Event()
signal.signal(signal.SIGUSR1, lambda *_: stop.set())


def hold():
    with lock:
        stop.wait()


def take():
    with lock:
        pass


child = subprocess.Popen(["sleep", "60"])
mine, theirs = socket.socketpair()
for target in (hold, take, child.wait, lambda: mine.recv(1)):
    threading.Thread(target=target, daemon=True).start()
deadline = time.monotonic() + 60
while time.monotonic() < deadline and "dump: stall" not in "".join(
        open(p).read() for p in glob.glob(os.path.join(os.environ["EARLYLOG_DIR"], "*.log"))):
    time.sleep(0.2)
stop.set()
child.kill()
theirs.send(b"x")
print(json.dumps(loads))
"""


def test_our_threads_load_modules_only_through_the_fork_gate(tmp_path, logdir):
    """Every module earlylog's own threads load is loaded inside threads.gated(), which holds
    os.fork() off (docs/design.md#imports-in-background-threads): a fork child would hang on a module
    another thread was loading. Checked at run time, where a static check of function-level imports
    could not tell which are reached on a thread of ours and which under the gate: a program puts a
    finder first on sys.meta_path (asked, on the loading thread, for each module not loaded yet) and
    records, for each load on one of our threads, whether the gate was held; then it waits while the
    watchdog's stall dump reads a lock and its holder, an Event a signal handler sets, a child and a
    socket (every module of the dump's notes: waits, holders, signals, peers, children...). Only
    the modules loaded outside the gate by design (UNGATED) may be loaded without it. It sees the
    paths this program reaches, not every path; and a gate held by another of our threads would
    pass, a gap the gate's single holder at a time makes rare."""
    res = run_python([script(tmp_path, GATE_SPY)], logdir=logdir,
                     env={"EARLYLOG_STALL": "1", "EARLYLOG_CONSOLE": "off", "EARLYLOG_NATIVE": "0"})
    assert res.returncode == 0, res.err
    text = res.text()
    assert "held by: thread" in text and "set by: the SIGUSR1 handler" in text and "child: pid" in text, text
    loads = json.loads(res.out)
    loaded = {name for name, _gated in loads}
    assert {"earlylog.runtime." + m for m in ("stacks", "waits", "holders", "syncs", "signals", "introspect",
                                              "peers", "children", "procs", "filelocks")} <= loaded, loads
    assert [name for name, gated in loads if not gated and name not in UNGATED] == []
