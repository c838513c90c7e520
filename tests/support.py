"""One helper for every test: run a real interpreter with an explicit env and return what it left.
Scenarios are a few lines on top of run_python(); timeouts come from EARLYLOG_TEST_TIMEOUT."""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

from earlylog.grammar import records  # the runtime's own parser (importing it starts nothing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = float(os.environ.get("EARLYLOG_TEST_TIMEOUT", "60"))
PYTHON = sys.executable


def clean_env(**extra):
    """The test process's env without any EARLYLOG* or PYTHON* switches, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EARLYLOG") and k not in ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONIOENCODING",
                                                           "PYTHONDONTWRITEBYTECODE", "PYTEST_ADDOPTS")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Result:
    """What a process left behind: exit status, output bytes, and its log folder."""

    def __init__(self, returncode, stdout, stderr, logdir):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.logdir = logdir

    @property
    def out(self):
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self):
        return self.stderr.decode("utf-8", "replace")

    def files(self):
        return log_files(self.logdir)

    def text(self):
        """All log files' text, joined (one process or many)."""
        return "".join(read(p) for p in self.files())

    def records(self):
        return [r for r in (records.parse(line) for line in self.text().splitlines()) if r]


def log_files(logdir):
    if not logdir or not os.path.isdir(logdir):
        return []
    return sorted(os.path.join(logdir, n) for n in os.listdir(logdir) if n.endswith(".log"))


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def script(tmp_path, code, name="script.py"):
    """Write dedented code to a file and return its path."""
    path = os.path.join(str(tmp_path), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(code))
    return path


def run_python(args, logdir=None, env=None, timeout=None, python=PYTHON, stdin=subprocess.DEVNULL,
               enabled=True, cwd=None):
    """Run python with args (a list; a str is `-c` code) and EARLYLOG=1 unless enabled=False."""
    if isinstance(args, str):
        args = ["-c", textwrap.dedent(args)]
    extra = {"EARLYLOG": "1"} if enabled else {}
    if logdir is not None:
        extra["EARLYLOG_DIR"] = str(logdir)
    full_env = clean_env(**extra)
    full_env.update({k: str(v) for k, v in (env or {}).items()})
    proc = subprocess.run([python] + list(args), env=full_env, capture_output=True, stdin=stdin,
                          timeout=timeout or TIMEOUT, cwd=cwd)
    return Result(proc.returncode, proc.stdout, proc.stderr, str(logdir) if logdir else None)


def wait_for(predicate, timeout=None, interval=0.1):
    """Poll until predicate() is truthy; returns its value or raises AssertionError."""
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out waiting for %r" % (predicate,))


def wait_log(logdir, needle, timeout=None):
    """Wait until some log file in logdir contains needle; returns all logs' text."""
    def found():
        text = "".join(read(p) for p in log_files(logdir))
        return text if needle in text else None
    return wait_for(found, timeout)


def user_text(data):
    """Output bytes as text less earlylog's own lines: what the program itself wrote."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    ours = ("[earlylog] ", "earlylog: ", '{"ts": ')
    return "".join(line for line in text.splitlines(True) if not line.startswith(ours))


def run_both(args, logdir, env=None, **kwargs):
    """Run args without and with earlylog and assert the program behaved the same (exit status,
    stdout, stderr less earlylog's lines); returns the run with earlylog."""
    off = run_python(args, env=env, enabled=False, **kwargs)
    on = run_python(args, logdir=logdir, env=env, **kwargs)
    assert (on.returncode, on.out, user_text(on.err)) == (off.returncode, off.out, user_text(off.err)), \
        "with earlylog:\n%s\nwithout:\n%s" % (on.err[-3000:], off.err[-1500:])
    return on


def python_3(minor):
    """A working python3.<minor> from pyenv or PATH (a pyenv shim may not run), or None."""
    pattern = os.path.expanduser("~/.pyenv/versions/3.%d.*/bin/python3.%d" % (minor, minor))
    for exe in sorted(glob.glob(pattern)) + [shutil.which("python3.%d" % minor)]:
        if exe and subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
            return exe
    return None


# Real runs read back with `earlylog report`: start a program in its own session, read its
# report, kill its whole tree at the end.
STALL = {"EARLYLOG_STALL": "1", "EARLYLOG_CONSOLE": "off"}


def earlylog(*args, env=None):
    """The `earlylog` command, run with EARLYLOG=1 on: it must still never log into the folder."""
    full = clean_env(EARLYLOG=1, **(env or {}))
    return subprocess.run([PYTHON, "-m", "earlylog"] + [str(a) for a in args], env=full,
                          capture_output=True, text=True, timeout=TIMEOUT)


def report_json(folder):
    res = earlylog("report", "--json", folder, env={"EARLYLOG_DIR": folder})
    assert res.stderr == "", res.stderr
    return json.loads(res.stdout)


def by_tag(rep, tag):
    return [p for p in rep["processes"] if p["tag"] == tag]


def start(args, logdir, program=PYTHON, cwd=None, **env):
    """A real process (python, or another program such as node) in its own session, so the whole
    tree can be killed at the end."""
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, **STALL)
    full.update({k: str(v) for k, v in env.items()})
    return subprocess.Popen([program] + args, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=cwd)


def reports_when(logdir, procs, ready):
    """(the JSON report, the text report) of logdir once ready() holds; then every process's tree is killed."""
    try:
        wait_for(ready)
        return report_json(logdir), earlylog("report", logdir).stdout
    finally:
        for proc in procs:
            kill_tree(proc)


def kill_tree(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=TIMEOUT)


def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# Small log folders written line by line in earlylog's own format, for the reader's pieces.
T0 = 1767225600.0  # a fixed moment; the processes run on another host, so no liveness check applies
FUTEX = "blocked: waiting on a lock, condition or event (futex) [kernel: futex_wait_queue]"


def thread(name, ident, frames, state=FUTEX, notes=(), main=False, daemon=True):
    flags = "daemon" if daemon else "not daemon"
    head = ["thread %s (tid %d, ident %s, %s%s)" % (name, int(ident, 16) % 100000, ident, flags,
                                                     ", main" if main else "")]
    return head + ["  " + state] + ["  " + n for n in notes] + ["  %s:%d in %s: %s" % f for f in frames]


def write(folder, pid, events, tag="app"):
    """A log file of events (seconds after T0, kind, text, continuation lines); kind None is a raw line."""
    folder.mkdir(exist_ok=True)
    with open(folder / ("20260101-000000-node9-%d-%s.log" % (pid, tag)), "w") as f:
        for at, kind, text, more in events:
            f.write(text + "\n" if kind is None else
                    records.format_lines("text", T0 + at, pid, tag, "node9", kind, text, more))


def stalled(folder, pid, *threads, tag="app", extra=(), parent=1):
    """A process that started, went silent and had one stall dump of these threads."""
    lines = [x for t in threads for x in t]
    write(folder, pid, [(0, "start", "pid %d (parent %d) argv python %s.py; log x (via pth, earlylog 0.1.0 at "
                                     "/opt/earlylog, Python 3.11.7)" % (pid, parent, tag), ()),
                        (0, "note", "watchdog: stacks after 1 s of silence; kill -USR1 %d dumps them now" % pid, ())]
          + list(extra) + [(2, "stall", "silent for 1 s; blocked: no CPU used; stacks in x", ()),
                           (2.2, "dump", "stall after 1 s of silence (%d threads)" % len(threads), lines)], tag)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A two-rank torch.distributed job whose rank 1 never reaches the barrier rank 0 waits in.
STRAGGLER_JOB = """
    import threading
    import torch.distributed as dist
    def read_index():
        threading.Event().wait()
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        read_index()
    dist.barrier()
    """


def straggler_dumped(logdir):
    """STRAGGLER_JOB's ranks have each dumped their stall: rank 1 in read_index, rank 0 in the barrier."""
    text = {f[-9:-4]: read(f) for f in log_files(logdir) if "-rank" in f}
    return "in read_index" in text.get("rank1", "") and \
        "dump: stall" in text.get("rank0", "").partition("phase: begin barrier")[2]
