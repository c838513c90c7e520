"""Run pytest's own test suite (from its sdist) with earlylog off and on, and compare test by test.

    .ci-venv/bin/python scripts/pytest_suite.py [--jobs N] [--keep] [-- PYTEST ARGS]

Steps: download the sdist of the pytest version this interpreter has; make a throwaway venv with
this interpreter; install that sdist with its `dev` extras (what pytest's own tox runs with) and
earlylog editable from this checkout; run `python -m pytest` in the unpacked sdist twice, the
same way (PYTHONWARNDEFAULTENCODING=1 as in pytest's tox.ini, own basetemp and cache per run),
first without EARLYLOG and then with EARLYLOG=1 and its default console; read both JUnit XML
files; print the counts, times and every test whose outcome differs (with the first line of its
failure), and exit 1 if any does. Too long for every CI run; docs/host-differences.md keeps the
latest result.
"""
import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    args = parse_args()
    # A shell's background job ignores SIGINT and exec keeps that, which would fail pytest's
    # KeyboardInterrupt tests in both runs alike; a Python handler is reset to default on exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    version = args.pytest_version or pytest_version()
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="earlylog-pytest-suite-"))
    os.makedirs(workdir, exist_ok=True)
    print("pytest %s's own suite; work folder %s" % (version, workdir), flush=True)
    source = unpacked_sdist(version, workdir)
    python = throwaway_venv(workdir, source)
    runs = [run_suite(python, source, os.path.join(workdir, mode), args) for mode in ("off", "on")]
    differing = report(runs)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if differing else 0


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pytest-version", help="default: the pytest this interpreter imports")
    parser.add_argument("--workdir", help="default: a new temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (venv, logs, XML)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="pytest-xdist workers (pytest's tox 'xdist' env); 0 runs in one process")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments, e.g. a file")
    return parser.parse_args()


def clean_env(**extra):
    """This process's environment less earlylog's and Python's switches (both runs start equal)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EARLYLOG", "PYTHON", "PYTEST_")) and k not in ("CI", "PY_COLORS")}
    env.update(extra)
    return env


def pytest_version():
    import pytest
    return pytest.__version__


def step(what, command):
    print("== " + what, flush=True)
    subprocess.run(command, check=True, env=clean_env())


def unpacked_sdist(version, workdir):
    step("download pytest %s's sdist" % version,
         [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
          "-d", workdir, "pytest==%s" % version])
    with tarfile.open(os.path.join(workdir, "pytest-%s.tar.gz" % version)) as tar:
        tar.extractall(workdir, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return os.path.join(workdir, "pytest-%s" % version)


def throwaway_venv(workdir, source):
    venv = os.path.join(workdir, "venv")
    step("venv with %s" % sys.executable, [sys.executable, "-m", "venv", venv])
    python = os.path.join(venv, "bin", "python")
    step("install pytest[dev] from the sdist", [python, "-m", "pip", "install", "-q", source + "[dev]"])
    step("install earlylog editable from %s" % ROOT, [python, "-m", "pip", "install", "-q", "-e", ROOT])
    return python


class Run:
    """One run of the suite: {test id: outcome}, {test id: first failure line}, seconds, status."""

    def __init__(self, outcomes, reasons, seconds, status):
        self.outcomes = outcomes
        self.reasons = reasons
        self.seconds = seconds
        self.status = status


def run_suite(python, source, folder, args):
    """Run the suite in the sdist folder, earlylog off or on (the folder's name), into folder."""
    mode = os.path.basename(folder)
    os.makedirs(os.path.join(folder, "tmp"))
    xml_path = os.path.join(folder, "junit.xml")
    command = [python, "-m", "pytest", "-q", "-o", "junit_family=xunit1", "--junit-xml", xml_path,
               "--basetemp", os.path.join(folder, "basetemp"), "-o", "cache_dir=" + os.path.join(folder, "cache")]
    command += (["-n", str(args.jobs)] if args.jobs else []) + list(args.pytest_args)
    env = clean_env(PYTHONWARNDEFAULTENCODING="1", TMPDIR=os.path.join(folder, "tmp"))
    if mode == "on":
        env.update(EARLYLOG="1", EARLYLOG_DIR=os.path.join(folder, "logs"))
    print("== run the suite, earlylog %s: %s" % (mode, " ".join(command)), flush=True)
    started = time.monotonic()
    with open(os.path.join(folder, "output.txt"), "wb") as out:
        proc = subprocess.Popen(command, cwd=source, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            status = "killed after %d s" % args.timeout
            proc.wait()
    outcomes, reasons = read_junit(xml_path, folder)
    return Run(outcomes, reasons, time.monotonic() - started, status)


def read_junit(xml_path, folder):
    """({test id: outcome}, {test id: first line of its failure}); ids as pytest's node ids, and
    the run's own folder written as RUN (a skip reason may name a path under it)."""
    outcomes, reasons = {}, {}
    if not os.path.exists(xml_path):
        return outcomes, reasons
    for case in ET.parse(xml_path).iter("testcase"):
        test_id = node_id(case)
        outcome, reason = "passed", ""
        for child in case:
            if child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome = "xfailed" if xfail else "skipped: %s" % child.get("message", "").replace(folder, "RUN")
            elif child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                lines = (child.get("message") or child.text or "").strip().splitlines()
                reason = lines[0][:300] if lines else ""
                break
        if outcomes.get(test_id) not in ("failed", "error"):
            outcomes[test_id], reasons[test_id] = outcome, reason
    return outcomes, reasons


def node_id(case):
    """file::Class::name from xunit1's file, classname (module path, then classes) and name."""
    path = case.get("file") or ""
    module = path[:-3].replace("/", ".") if path.endswith(".py") else ""
    classname = case.get("classname") or ""
    classes = classname[len(module) + 1:] if module and classname.startswith(module + ".") else ""
    return "::".join(part for part in (path or classname, classes.replace(".", "::"), case.get("name")) if part)


def kind(outcome):
    return outcome.split(":")[0]


def report(runs):
    off, on = runs
    print("\n%-10s %10s %10s" % ("", "off", "on"))
    counts = [collections.Counter(kind(o) for o in run.outcomes.values()) for run in runs]
    for name in sorted(set(counts[0]) | set(counts[1])):
        print("%-10s %10d %10d" % (name, counts[0][name], counts[1][name]))
    print("%-10s %10d %10d" % ("tests", len(off.outcomes), len(on.outcomes)))
    print("%-10s %9.0fs %9.0fs" % ("time", off.seconds, on.seconds))
    print("%-10s %10s %10s" % ("status", off.status, on.status))
    differing = sorted(t for t in set(off.outcomes) | set(on.outcomes)
                       if off.outcomes.get(t) != on.outcomes.get(t))
    print("\n%d test(s) end differently with EARLYLOG=1%s" % (len(differing), ":" if differing else "."))
    for test_id in differing:
        endings = (off.outcomes.get(test_id, "absent"), on.outcomes.get(test_id, "absent"))
        print("  %s: off %s, on %s" % ((test_id,) + endings))
        why = on.reasons.get(test_id) or off.reasons.get(test_id)
        if why:
            print("      " + why)
    return differing


if __name__ == "__main__":
    sys.exit(main())
