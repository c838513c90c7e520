"""earlylog's descriptors never sit at a number the program may reuse (docs/design.md#our-fds-sit-high):
a program that closes a stale number (a double close) never closes one of ours, and earlylog never
closes one of the program's. Real programs with EARLYLOG=1 and dumps every second."""
import ast
import json
import os
import re
import subprocess
import time

import pytest

from support import PYTHON, ROOT, clean_env, log_files, read, run_python, script, user_text

HIGH_FD = 512
RUNTIME = os.path.join(ROOT, "injector", "earlylog", "runtime")
DUMPS = {"EARLYLOG_STALL": "1", "EARLYLOG_DUMP_EVERY": "1", "EARLYLOG_CONSOLE": "off"}

# Frees a pipe, runs a long gc.collect() (the GIL held, our threads waiting for it), then closes
# the freed numbers again, and checks its own fresh pipe is still its own. Without earlylog no
# such close ever succeeds. It starts at the program's first line: earlylog's threads start up,
# import their modules and run the probes meanwhile (docs/design.md#our-fds-sit-high).
STRESS = """
import gc, os, sys, time
seconds, quiet = float(sys.argv[1]), float(sys.argv[2])
time.sleep(quiet)
junk = [[i] for i in range(300000)]
end = time.monotonic() + seconds
stale = lost = rounds = 0
while time.monotonic() < end:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    gc.collect()
    for fd in (r, w):
        try:
            what = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            what = "?"
        try:
            os.close(fd)
        except OSError:
            continue
        stale += 1
        sys.stderr.write("closed fd %d, not the program's: %s\\n" % (fd, what))
    mine = os.pipe()
    gc.collect(0)
    try:
        os.write(mine[1], b"x")
        lost += os.read(mine[0], 1) != b"x"
        os.close(mine[0])
        os.close(mine[1])
    except OSError as exc:
        lost += 1
        sys.stderr.write("own pipe lost: %r\\n" % (exc,))
    rounds += 1
print("stale closes %d, own pipes lost %d, %s" % (stale, lost, "rounds" if rounds > 10 else "too few rounds"))
"""
SECONDS, QUIET = 10, 0


def _stress(tmp_path, logdir, enabled):
    path = script(tmp_path, STRESS, "stress.py")
    return run_python([path, str(SECONDS), str(QUIET)], logdir=logdir, env=DUMPS, enabled=enabled,
                      timeout=SECONDS + QUIET + 60)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("load", ["alone", "beside a busy process"])
def test_double_close_never_closes_ours(tmp_path, logdir, load):
    busy = []
    if load != "alone":  # a second core's worth of work: our threads wait longer for the GIL
        busy = [subprocess.Popen([PYTHON, "-c", "while 1: pass"], env=clean_env()) for _ in range(2)]
    try:
        off = _stress(tmp_path, None, enabled=False)
        on = _stress(tmp_path, logdir, enabled=True)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    expected = "stale closes 0, own pipes lost 0, rounds\n"
    assert (off.returncode, off.out, user_text(off.err)) == (0, expected, "")
    assert (on.returncode, on.out, user_text(on.err)) == (0, expected, ""), on.err[-2000:]
    text = "".join(read(p) for p in log_files(str(logdir)))
    assert "the watchdog stopped" not in text
    # Dumps and memory lines went on all through the stress (every second, and at 1, 2, 4, 8 s of silence).
    assert text.count(" dump: ") >= SECONDS, text[-3000:]
    assert " mem: rss " in text


# From the program's first line: every call of a thread of ours that makes a descriptor at the
# lowest free number and lets the GIL go (the audit events of open, os.open, listdir, scandir,
# socket), and every descriptor below HIGH_FD that the main thread finds open (its own listing's
# aside), while probes, dumps (every 0.5 s, stalls at 1 s) and memory lines run.
AUDIT = """
import _thread, json, os, sys, time
main, pid = _thread.get_ident(), os.getpid()
MAKERS = {"open", "os.listdir", "os.scandir", "socket.__new__", "os.fork", "subprocess.Popen", "mmap.__new__"}
made = []
def hook(event, args):
    if event in MAKERS and _thread.get_ident() != main:
        made.append("%s %r" % (event, args[:2]))
sys.addaudithook(hook)
def low():
    found = {}
    for name in os.listdir("/proc/self/fd"):
        if 2 < int(name) < 512:
            try:
                found[int(name)] = os.readlink("/proc/self/fd/" + name)
            except OSError:  # the listing's own descriptor, closed by now
                pass
    return found
held = low()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    held.update(low())
    time.sleep(0.005)
print(json.dumps({"made": made, "held": held}))
"""


def test_start_up_descriptor_audit(tmp_path, logdir):
    """Nothing of earlylog's holds or opens a descriptor below HIGH_FD while the program can run,
    from its first line on: each new descriptor of our threads is made and moved up in one C call."""
    path = script(tmp_path, AUDIT, "audit.py")
    env = dict(DUMPS, EARLYLOG_DUMP_EVERY="0.5")
    result = run_python([path, "4"], logdir=logdir, env=env, timeout=60)
    assert result.returncode == 0, result.err[-2000:]
    audit = json.loads(result.out)
    assert audit == {"made": [], "held": {}}, audit
    text = "".join(read(p) for p in log_files(str(logdir)))
    assert text.count(" dump: ") >= 4 and " mem: rss " in text and " probe: " in text, text[-3000:]


LIVE = """
import os, sys, threading, time
def worker():
    while True:
        time.sleep(0.01)
threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_no_descriptor_of_ours_below_high_fd_during_dumps(tmp_path, logdir):
    """While dumps (every 0.5 s) and memory lines run, /proc/<pid>/fd of the process shows nothing
    at 3..511 that lasts (our log file and our kept /proc files sit at 512 and up)."""
    path = script(tmp_path, LIVE, "live.py")
    env = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir), EARLYLOG_DUMP_EVERY="0.5", EARLYLOG_CONSOLE="off")
    proc = subprocess.Popen([PYTHON, path, "8"], env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(2)  # past the first dump: the modules our threads read are imported
        seen, lasting, ours = {}, set(), {}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = {}
            for name in os.listdir("/proc/%d/fd" % proc.pid):
                fd = int(name)
                try:
                    now[fd] = os.readlink("/proc/%d/fd/%d" % (proc.pid, fd))
                except OSError:
                    continue
            low = {fd: link for fd, link in now.items() if 2 < fd < HIGH_FD}
            lasting |= {fd for fd, link in low.items() if seen.get(fd) == link}
            seen = low
            ours.update({fd: link for fd, link in now.items() if fd >= HIGH_FD})
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.wait()
    assert not lasting, {fd: seen.get(fd) for fd in lasting}
    text = "".join(read(p) for p in log_files(str(logdir)))
    assert text.count(" dump: ") >= 5
    # The kept files are there, high: the memory line's statm and the dumps' task files.
    kept = [link for link in ours.values() if link.startswith("/proc/%d/" % proc.pid)]
    assert any(link.endswith("/statm") for link in kept), ours
    assert any("/task/" in link for link in kept), ours


FORKED = """
import os, sys, time
time.sleep(1.5)  # the parent's memory line has opened (and kept) its /proc/self/statm
pid = os.fork()
if pid == 0:
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    time.sleep(7)  # its own memory lines: at 1 s and 6 s
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.timeout(60)
def test_fork_child_reads_its_own_proc_files(tmp_path, logdir):
    """A descriptor on /proc/self/... names the process that opened it: a fork child's memory line
    must be its own (300 MiB of ballast), not its parent's through an inherited descriptor."""
    path = script(tmp_path, FORKED, "forked.py")
    result = run_python([path], logdir=logdir, env={"EARLYLOG_CONSOLE": "off"}, timeout=40)
    assert result.returncode == 0, result.err[-2000:]
    child = [p for p in log_files(str(logdir)) if p.endswith("-fork.log")]
    assert child, os.listdir(str(logdir))
    sizes = [int(m) for m in re.findall(r" mem: rss (\d+) MiB", read(child[0]))]
    assert sizes and max(sizes) >= 300, read(child[0])[-2000:]


# Calls that make a descriptor (at the lowest free number) and where the runtime may make them
# outside runtime/fds.py and libc.py: start-up code only, which runs before the program's code (or in a fork
# child before it goes on), so no program code can close a stale number meanwhile.
MAKERS = re.compile(r"\b(?:os\.open|os\.dup|os\.pipe|os\.listdir|os\.scandir|os\.memfd_create|os\.fdopen|"
                    r"socket\.socket|socketpair|create_connection|linecache\.getlines?|open)\(")
START_UP = {
    ("sinks.py", "_open_new"): "the log file, moved high at once (_high_fd)",
    ("sinks.py", "earlylog_parent"): "the parent's /proc/<pid>/fd listing, at start-up",
    ("sinks.py", "__init__"): "the console's own descriptor, moved high at once (_high_fd)",
    ("identity.py", "argv"): "/proc/self/cmdline before Python 3.10, at start-up",
    ("identity.py", "parent_of"): "the grandparent's pid, at start-up",
    ("__init__.py", "read"): "the start pack, read and closed before the program's first line",
    ("startpack.py", "_from_pyc"): "a start path module's .pyc, when the pack is rebuilt at start-up",
    ("startpack.py", "_current"): "a second-stage module's source with no .pyc yet, when the pack is rebuilt at start-up",
    ("startpack.py", "write"): "the rebuilt start pack, written and closed at start-up",
    ("startpack.py", "build"): "`earlylog install`'s build of the pack, in the installer's own process",
}


def _makers():
    """{(file, innermost function): [lines]} of the calls that make a descriptor, outside fds.py."""
    found = {}
    for name in sorted(os.listdir(RUNTIME)):
        if not name.endswith(".py") or name in ("fds.py", "libc.py"):
            continue
        with open(os.path.join(RUNTIME, name), encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source)
        owner, text = {}, set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for n in range(node.lineno, node.end_lineno + 1):
                    if owner.get(n, (0,))[0] < node.lineno:  # a later start: an inner function
                        owner[n] = (node.lineno, node.name)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                text.update(range(node.lineno, node.end_lineno + 1))  # docstrings
        for n, line in enumerate(source.splitlines(), 1):
            code = re.sub(r"\"[^\"]*\"|'[^']*'", "''", line.split("#")[0])
            if n not in text and MAKERS.search(code) and not re.search(r"\bfds\.\w+\(", code):
                found.setdefault((name, owner.get(n, (0, "<module>"))[1]), []).append(line.strip())
    return found


def test_every_descriptor_of_the_runtime_goes_through_fds():
    """The audit as a test: outside runtime/fds.py, the runtime makes a descriptor only in start-up
    code (listed with why); everything its threads, dumps, probes and exit path open, list,
    duplicate, pipe or connect goes through fds."""
    found = _makers()
    unexpected = {key: lines for key, lines in found.items() if key not in START_UP}
    assert not unexpected, "make these through runtime/fds.py (or list them as start-up): %r" % unexpected
