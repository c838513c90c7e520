"""Runs demo_hang.py with EARLYLOG=1 and shows what earlylog's log says about the silent hang.
Needs earlylog installed in this interpreter (`pip install .`); stops the demo after the dump."""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    logdir = tempfile.mkdtemp(prefix="earlylog-demo-")
    env = dict(os.environ, EARLYLOG="1", EARLYLOG_DIR=logdir, EARLYLOG_STALL="2", EARLYLOG_CONSOLE="off")
    print("$ EARLYLOG=1 EARLYLOG_STALL=2 python scripts/demo_hang.py   (logs in %s)" % logdir)
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "demo_hang.py")], env=env)
    deadline = time.monotonic() + 30
    text = ""
    try:
        while time.monotonic() < deadline and "dump:" not in text:
            time.sleep(0.5)
            text = "".join(open(os.path.join(logdir, n), encoding="utf-8").read()
                           for n in sorted(os.listdir(logdir)) if n.endswith(".log"))
        print("\nThe script printed 'starting job...' and went silent. Its earlylog log says:\n")
        sys.stdout.write(text or "(no log was written: is earlylog installed in %s?)\n" % sys.executable)
        if "dump:" not in text:
            print("\n(no stack dump within 30 s)")
            return 1
        print("\n$ earlylog report %s   (while it is still stuck)\n" % logdir)
        sys.stdout.flush()
        report = subprocess.run([sys.executable, "-m", "earlylog", "report", logdir])
        return 0 if report.returncode in (0, 1) else report.returncode
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()

if __name__ == "__main__":
    sys.exit(main())
