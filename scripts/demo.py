"""Runs demo_hang.py with earlylog on and shows what its log and `earlylog report` say about the
silent hang. Each command is printed exactly as it runs, so pasting it into a shell (from the same
folder) gives the same result. Needs earlylog installed in this interpreter (`pip install .`);
stops the demo after the dump."""
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def shown(path):
    """A path as a person would type it: relative to the current folder when it lies below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def report_command(logdir):
    """The `earlylog` command beside this interpreter (a venv's bin/), else `python -m earlylog`."""
    beside = os.path.join(os.path.dirname(sys.executable), "earlylog")
    if os.access(beside, os.X_OK):
        return [shown(beside), "report", logdir]
    return [shown(sys.executable), "-m", "earlylog", "report", logdir]


def say(command, settings=(), note=""):
    print("$ " + " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in settings] + [shlex.quote(a) for a in command])
          + note)
    sys.stdout.flush()  # before the child's own lines reach the same terminal


def main():
    logdir = tempfile.mkdtemp(prefix="earlylog-demo-")
    settings = (("EARLYLOG", "1"), ("EARLYLOG_STALL", "2"), ("EARLYLOG_DIR", logdir))
    # Knobs already set in this shell would change what the demo shows: it runs without them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EARLYLOG")}
    env.update(settings)
    command = [shown(sys.executable), shown(os.path.join(HERE, "demo_hang.py"))]
    say(command, settings)
    child = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 30
    text = ""
    try:
        while time.monotonic() < deadline and "dump:" not in text:
            time.sleep(0.5)
            text = "".join(open(os.path.join(logdir, n), encoding="utf-8").read()
                           for n in sorted(os.listdir(logdir)) if n.endswith(".log"))
        print("\nThe script printed 'starting job...' and went silent; earlylog's console lines (on stderr)"
              " name its log file. The log says:\n")
        sys.stdout.write(text or "(no log was written: is earlylog installed in %s?)\n" % sys.executable)
        if "dump:" not in text:
            print("\n(no stack dump within 30 s)")
            return 1
        print()
        report = report_command(logdir)
        say(report, note="   (while it is still stuck)")
        print()
        sys.stdout.flush()
        done = subprocess.run(report)
        return 0 if done.returncode in (0, 1) else done.returncode
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


if __name__ == "__main__":
    sys.exit(main())
