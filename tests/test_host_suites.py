"""CPython's own regression tests judge earlylog's promise that a program behaves the same with
EARLYLOG=1.

Each group runs `python -m test` (regrtest, from the `test` package of the interpreter under test)
twice in the same conditions: earlylog off, then on with its default console, as a user runs it.
It compares how every test case ended (passed, failure, error, or skipped and why; from regrtest's
--junit-xml) and how every test file ended (regrtest's progress lines: a file that crashes or times
out leaves no cases). Each difference is run once more, off and on, with just its cases; one that
does not come back, or comes back with the run without earlylog ending otherwise than the first
time, is printed as a warning, not failed on, because a loaded 2-core machine makes a few of
CPython's timing tests flaky either way. The only lasting differences allowed are INHERENT,
each explained in docs/host-differences.md. An interpreter without the `test` package skips.
The `newer` group runs under a newer CPython (pyenv's 3.13 or 3.12) that has no earlylog installed:
both its runs get `earlylog env`'s PYTHONPATH, and only the second EARLYLOG=1.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
import warnings
import xml.etree.ElementTree as ET

import pytest

from support import PYTHON, clean_env

FILE_TIMEOUT = 300  # regrtest --timeout: one test file's seconds before regrtest kills it
RUN_LIMIT = 1200     # one regrtest run's seconds before this module kills its whole tree
JOBS = max(2, min(4, os.cpu_count() or 2))
# Every resource except the slow, networked or machine-dependent ones, so both runs test the same.
RESOURCES = "all,-cpu,-network,-urlfetch,-largefile,-gui,-audio,-tzdata,-decimal,-curses"
FORKSERVER = "test_multiprocessing_forkserver"

# Longest file first in each group, so the parallel workers finish together.
GROUPS = {
    "processes": ["test_signal", "test_subprocess", "test_faulthandler", "test_pty", "test_os"],
    "interpreter": ["test_threading", "test_importlib", "test_sys", "test_cmd_line", "test_traceback",
                    "test_warnings", "test_import", "test_site", "test_atexit", "test_code_module"],
    "io": ["test_io", "test_logging"],
    "asyncio": ["test_asyncio.test_events", "test_asyncio.test_subprocess"],
    "multiprocessing": [FORKSERVER],
    # Run by a newer CPython (pyenv's 3.13, else 3.12), not the test's own interpreter: its REPL
    # (pyrepl on 3.13), code.py and threading differ (see NEWER_PYTHONS).
    "newer": ["test_threading", "test_pyrepl", "test_sys", "test_repl", "test_pty", "test_code_module",
              "test_atexit"],
}
NEWER = "newer"
# Where the newer group's interpreter is looked for, first found wins; EARLYLOG_HOST_PYTHON names
# another. earlylog is not installed there: both runs put `earlylog env`'s runtime copy on
# PYTHONPATH (its documented activation), and only the second sets EARLYLOG=1.
NEWER_PYTHONS = ["~/.pyenv/versions/3.13*/bin/python3", "~/.pyenv/versions/3.12*/bin/python3"]
JOBS_NEWER = 2
NEWER_RESOURCES = RESOURCES.replace(",-curses", "")  # test_pyrepl runs only with the curses resource
# In the newer group, files that only some versions have (test_pyrepl: 3.13+) are left out where missing.
OPTIONAL = {"test_pyrepl"}

# The differences earlylog cannot avoid while it is in the process (docs/host-differences.md says
# why for each): reason -> the test ids it explains.
INHERENT = {
    "a Python child has earlylog's log file open (and its console's own descriptor when the "
    "console is on)": [
        "test.test_subprocess.POSIXProcessTestCase.test_pass_fds_redirected",
    ],
    "a child of fork() gets earlylog's watchdog thread at once: sys._current_frames() in the child "
    "lists it as soon as it has run (on a loaded machine, before the child's first lines)": [
        "test.test_threading.ThreadJoinOnShutdown.test_clear_threads_states_after_fork",
    ],
    "stdout and stderr are live (write-through on a pipe, EARLYLOG_LIVE=0 keeps Python's "
    "buffering), so a program that prints their buffering flags sees True": [
        "test.test_cmd_line.CmdLineTest.test_non_interactive_output_buffering",
    ],
    "faulthandler's dump of all threads, which the program asks for, lists earlylog's watchdog "
    "thread too": ["test.test_faulthandler.FaultHandlerTests." + name for name in (
        "test_dump_traceback_later", "test_dump_traceback_later_fd", "test_dump_traceback_later_file",
        "test_dump_traceback_later_repeat", "test_dump_traceback_later_twice",
        "test_dump_traceback_threads", "test_dump_traceback_threads_file", "test_register_threads",
        "test_enable_fd", "test_enable_file", "test_fatal_error", "test_fatal_error_c_thread",
        "test_fatal_error_without_gil", "test_gc", "test_gil_released", "test_read_null",
        "test_sigabrt", "test_sigbus", "test_sigfpe", "test_sigill", "test_sigsegv",
        "test_stack_overflow")],
}
INHERENT_IDS = {test_id for ids in INHERENT.values() for test_id in ids}

# Left out of both runs: tests whose own race makes them take minutes either way (pattern: why).
IGNORED = {
    "*.WithThreadsTestPool.test_terminate": "a thread pool cannot stop a running time.sleep(300): "
    "whenever a worker takes a task before terminate(), join() waits 5 minutes (about 1 pool in 4 "
    "on a loaded machine, with earlylog or without)",
}

# Some builds (this project's CPython 3.11.7 among them) install test/_test_multiprocessing.py but
# not the package that runs it with each start method; these are that package's files as CPython
# 3.12 ships them, written next to the run and found through regrtest's --testdir.
FORKSERVER_PACKAGE = {
    "__init__.py": "import os\nfrom test import support\n\n\ndef load_tests(*args):\n"
                   "    return support.load_package_tests(os.path.dirname(__file__), *args)\n",
    "test_processes.py": "only_type='processes'",
    "test_threads.py": "only_type='threads'",
    "test_manager.py": "only_type='manager'",
    "test_misc.py": "exclude_types=True",
}
PROGRESS = re.compile(r"^\d+:\d\d:\d\d (?:load avg: [\d.]+ )?\[ *\d+/\d+(?:/\d+)?\] (\S+) (.*)$")
DURATION = re.compile(r" \((?:[\d.]+ (?:hour|min|sec|ms) ?)+\)")


def newer_python():
    """The newer group's interpreter, or None."""
    named = os.environ.get("EARLYLOG_HOST_PYTHON")
    if named:
        return named
    for pattern in NEWER_PYTHONS:
        found = sorted(glob.glob(os.path.expanduser(pattern)), key=_version_key, reverse=True)
        if found:
            return found[0]
    return None


def _version_key(path):
    return [int(n) if n.isdigit() else 0 for n in re.split(r"[./]", path.split("versions/")[-1].split("/")[0])]


def activation(workdir):
    """{PYTHONPATH: ...}: `earlylog env`'s runtime copy (written under workdir), for both runs of
    the newer group; EARLYLOG itself is left to the run that has earlylog on."""
    proc = subprocess.run([PYTHON, "-m", "earlylog", "env", "--json"], capture_output=True, timeout=60,
                          check=True, env=clean_env(XDG_CACHE_HOME=os.path.join(workdir, "cache")))
    return {"PYTHONPATH": json.loads(proc.stdout)["PYTHONPATH"]}


def interpreter_has(modules, python=PYTHON):
    """{module: True/False}: what the interpreter under test can import, asked with earlylog off."""
    code = ("import importlib.util, json, sys\n"
            "def has(name):\n"
            "    try:\n        return importlib.util.find_spec(name) is not None\n"
            "    except ImportError:\n        return False\n"
            "print(json.dumps({name: has(name) for name in sys.argv[1:]}))")
    proc = subprocess.run([python, "-c", code] + list(modules), env=clean_env(), capture_output=True,
                          timeout=60, check=True)
    return json.loads(proc.stdout)


class Host:
    """The interpreter a group runs under, its -j, and the variables both its runs get."""

    def __init__(self, python=PYTHON, jobs=JOBS, extra=None, resources=RESOURCES):
        self.python, self.jobs, self.extra, self.resources = python, jobs, extra or {}, resources


def selection(group, workdir, python=PYTHON):
    """(regrtest options, test file names) for the group, or a sentence saying why it cannot run."""
    names = GROUPS[group]
    has = interpreter_has(["test.libregrtest", "test._test_multiprocessing"] + ["test." + n for n in names],
                          python)
    if not has["test.libregrtest"]:
        return "%s has no `test` package (CPython's regression tests): nothing to compare" % python
    if group == NEWER:
        names = [n for n in names if has["test." + n] or n not in OPTIONAL]
    if FORKSERVER in names and not has["test." + FORKSERVER]:
        if not has["test._test_multiprocessing"]:
            return "%s has neither test.%s nor test._test_multiprocessing" % (python, FORKSERVER)
        return (["--testdir", write_forkserver_package(workdir)],
                ["%s.%s" % (FORKSERVER, n[:-3]) for n in sorted(FORKSERVER_PACKAGE) if n != "__init__.py"])
    missing = [n for n in names if not has["test." + n]]
    if missing:
        return "%s lacks %s in its `test` package" % (python, ", ".join(missing))
    return [], names


def write_forkserver_package(workdir):
    root = os.path.join(workdir, "testdir")
    package = os.path.join(root, FORKSERVER)
    os.makedirs(package)
    for name, body in FORKSERVER_PACKAGE.items():
        if name != "__init__.py":
            body = ("from test._test_multiprocessing import install_tests_in_module_dict\n\n"
                    "install_tests_in_module_dict(globals(), 'forkserver', %s)\n" % body)
        with open(os.path.join(package, name), "w") as f:
            f.write(body)
    return root


class Run:
    """What one regrtest run left: each test case's ending, each test file's, and its output."""

    def __init__(self, cases, files, output, logdir):
        self.cases = cases
        self.files = files
        self.output = output
        self.logdir = logdir


def regrtest(host, options, names, folder, enabled, match=None):
    """Run regrtest on names in folder (its cwd and TMPDIR), earlylog on or off; return a Run."""
    tmp = os.path.join(folder, "tmp")
    os.makedirs(tmp)
    xml_path, logdir = os.path.join(folder, "junit.xml"), os.path.join(folder, "logs")
    command = [host.python, "-m", "test", "-j%d" % host.jobs, "--timeout", str(FILE_TIMEOUT), "-u", host.resources,
               "--junit-xml", xml_path] + options
    if match:  # before --ignore: a test that no pattern names is left out only when a match comes first
        with open(os.path.join(folder, "match.txt"), "w") as f:
            f.write("".join(pattern + "\n" for pattern in sorted(match)))
        command += ["--matchfile", os.path.join(folder, "match.txt")]
    for pattern in IGNORED:
        command += ["--ignore", pattern]
    marker = uuid.uuid4().hex
    extra = dict(host.extra, TMPDIR=tmp, HOST_SUITE_RUN=marker)
    if enabled:
        extra.update(EARLYLOG="1", EARLYLOG_DIR=logdir)
    # A shell's background job ignores SIGINT and exec keeps that, so CPython's KeyboardInterrupt
    # tests would fail in both runs alike and drop out of the comparison; a handler is reset instead.
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.run(command + list(names), cwd=folder, env=clean_env(**extra),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail("regrtest ran past %d s and was killed: %s" % (RUN_LIMIT, " ".join(command)))
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if sigint is None else sigint)
        kill_marked(marker)
    output = proc.stdout.decode("utf-8", "replace")
    return Run(read_cases(xml_path), read_files(output), output, logdir)


def kill_marked(marker):
    """SIGKILL every process that still carries this run's marker in its environment: regrtest's
    workers start their own sessions, and a hung grandchild is reparented away from us."""
    needle = ("HOST_SUITE_RUN=%s" % marker).encode()
    for pid in [int(n) for n in os.listdir("/proc") if n.isdigit()]:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def read_cases(xml_path):
    """{test id: ending} from regrtest's JUnit XML; a test id seen twice keeps its worse ending."""
    cases = {}
    if not os.path.exists(xml_path):
        return cases
    for case in ET.parse(xml_path).iter("testcase"):
        ending = "passed"
        for child in case:
            if child.tag == "skipped":
                ending = "skipped: %s" % (child.text or child.get("message") or "").strip()
            elif child.tag in ("failure", "error"):
                ending = child.tag
                break
        name = case.get("name")
        if cases.get(name) not in ("failure", "error"):
            cases[name] = ending
    return cases


def read_files(output):
    """{test file: how it ended} from regrtest's progress lines, less durations and counts."""
    files = {}
    for line in output.splitlines():
        found = PROGRESS.match(line)
        if found:
            state = DURATION.sub("", found.group(2).split(" -- running")[0]).strip()
            if state.startswith("failed (") and state != "failed (env changed)":
                state = "failed"  # its failing cases say which and how
            files[found.group(1)] = state
    return files


def differences(off, on, names):
    """[(test file or id, off, on)]: files that ended differently beyond passed/failed (crashed,
    timed out, env changed), then cases, less the inherent ones and those a crash or timeout lost."""
    plain = {"passed", "failed"}
    files = [(name, off.files.get(name, "absent"), on.files.get(name, "absent"))
             for name in sorted(set(off.files) | set(on.files))
             if off.files.get(name) != on.files.get(name)
             and not {off.files.get(name), on.files.get(name)} <= plain]
    lost = {name for name, _, _ in files}
    cases = [(name, off.cases.get(name, "absent"), on.cases.get(name, "absent"))
             for name in sorted(set(off.cases) | set(on.cases))
             if off.cases.get(name) != on.cases.get(name) and name not in INHERENT_IDS
             and not (file_of(name, names) in lost and not (name in off.cases and name in on.cases))]
    return files + cases


def file_of(test_id, names):
    """The test file a case id belongs to (ids are "test.FILE.Class.method", or "FILE.Class.method"
    under --testdir)."""
    return next((n for n in names if test_id.startswith(("test.%s." % n, "%s." % n))), None)


def confirmed(host, options, names, workdir, found):
    """The differences that come back when their files run again, off and on, with just the
    differing cases (all of a file that crashed, timed out or changed its environment)."""
    whole = {name for name, _, _ in found if name in names}
    whole |= {file_of(name, names) for name, _, _ in found if " " in name} - {None}
    patterns = {"*%s.*" % n for n in whole} | {
        name for name, _, _ in found if name not in names and file_of(name, names) not in whole}
    rerun = sorted(whole | {file_of(name, names) for name, _, _ in found} - {None})
    off = regrtest(host, options, rerun, os.path.join(workdir, "off-again"), enabled=False, match=patterns)
    on = regrtest(host, options, rerun, os.path.join(workdir, "on-again"), enabled=True, match=patterns)
    # Confirmed: it differs again, and the run without earlylog ended as it did the first time (a
    # case that passes in one run off and skips in the next is the case's own race).
    again = {name: off_again for name, off_again, _ in differences(off, on, rerun)}
    kept = [row for row in found if row[0] in again and again[row[0]] == row[1]]
    flaky = [row for row in found if row not in kept]
    if flaky:
        warnings.warn("differences with EARLYLOG=1 that did not come back the same way on a second run:\n"
                      + table(flaky))
    return kept


def table(rows):
    shown = ["  %s: off %s, on %s" % row for row in rows[:80]]
    return "\n".join(shown + (["  ... and %d more" % (len(rows) - 80)] if len(rows) > 80 else []))


@pytest.mark.slow
@pytest.mark.timeout(4 * RUN_LIMIT + 120)
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_cpython_suite_same_results(group):
    workdir = tempfile.mkdtemp(prefix="earlylog-cpython-")  # short: AF_UNIX paths live under it
    host = Host()
    if group == NEWER:
        python = newer_python()
        if python is None:
            shutil.rmtree(workdir)
            pytest.skip("no newer CPython found (%s); EARLYLOG_HOST_PYTHON names one" % ", ".join(NEWER_PYTHONS))
        host = Host(python, JOBS_NEWER, activation(workdir), NEWER_RESOURCES)
    chosen = selection(group, workdir, host.python)
    if isinstance(chosen, str):
        shutil.rmtree(workdir)
        pytest.skip(chosen)
    options, names = chosen
    off = regrtest(host, options, names, os.path.join(workdir, "off"), enabled=False)
    on = regrtest(host, options, names, os.path.join(workdir, "on"), enabled=True)
    assert off.cases, "regrtest reported no test cases:\n" + off.output[-3000:]
    logs = os.listdir(on.logdir) if os.path.isdir(on.logdir) else []
    assert [n for n in logs if n.endswith("-test.log")], "earlylog did not start in regrtest"
    assert not [n for n in os.listdir(os.path.join(workdir, "off", "tmp")) if n.startswith("earlylog")]
    found = differences(off, on, names)
    if found:
        found = confirmed(host, options, names, workdir, found)
    if found:
        pytest.fail("CPython's %s tests (%s) end differently with EARLYLOG=1 (runs kept in %s):\n%s"
                    % (group, host.python, workdir, table(found)), pytrace=False)
    shutil.rmtree(workdir)
