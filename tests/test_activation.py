"""Issue 2: after one install, EARLYLOG=1 turns earlylog on in every Python process, and
nothing changes when it is unset. Each test spawns real interpreters and reads their logs."""
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import make_venv, pip_install
from support import PYTHON, ROOT, TIMEOUT, clean_env, log_files, read, run_python, script

from earlylog.cli import pthline

USER_SCRIPT = """
import sys
print("out line", 1)
print("err line", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def starts(result):
    return [r for r in result.records() if r["kind"] == "start"]


def test_committed_pth_and_start_match_the_generator():
    with open(os.path.join(ROOT, "_build", "earlylog.pth"), encoding="utf-8") as f:
        assert f.read() == pthline.render()
    with open(os.path.join(ROOT, "_build", "earlylog.start"), encoding="utf-8") as f:
        assert f.read() == pthline.render_start()
    assert pthline.render().count("\n") == 1


@pytest.fixture(scope="module", params=["regular", "editable"])
def installed_venv(request, tmp_path_factory):
    venv = make_venv(tmp_path_factory.mktemp(request.param) / "venv")
    pip_install(venv, *(["-e", "."] if request.param == "editable" else ["."]))
    return venv


def site_packages(python):
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, env=clean_env(), check=True)
    return out.stdout.strip()


def test_pip_install_puts_the_hook_at_the_site_packages_root(installed_venv, logdir):
    site = site_packages(installed_venv)
    assert os.path.isfile(os.path.join(site, "earlylog.pth"))
    assert os.path.isfile(os.path.join(site, "earlylog.start"))
    on = run_python("pass", logdir=logdir, python=installed_venv)
    assert on.returncode == 0
    assert len(on.files()) == 1
    first = starts(on)
    # A venv runs .pth lines twice; exactly one start per pid.
    assert len(first) == 1 and on.files()[0] in first[0]["msg"]
    assert "[earlylog]" in on.err and on.files()[0] in on.err


def test_unset_writes_nothing_and_changes_nothing(installed_venv, tmp_path, logdir):
    user = script(tmp_path, USER_SCRIPT)
    bare = run_python([user, "3"], python=installed_venv, enabled=False, env={"EARLYLOG_DIR": logdir})
    for off in ("0", "", "false", "off", "no", "OFF"):
        again = run_python([user, "3"], python=installed_venv, enabled=False,
                           env={"EARLYLOG": off, "EARLYLOG_DIR": logdir})
        assert (again.returncode, again.stdout, again.stderr) == (bare.returncode, bare.stdout, bare.stderr)
    assert bare.returncode == 3 and bare.out == "out line 1\n" and bare.err == "err line\n"
    assert log_files(logdir) == []


def test_program_output_and_status_are_identical_with_earlylog(tmp_path, logdir):
    user = script(tmp_path, USER_SCRIPT)
    for status in ("0", "5"):
        without = run_python([user, status], enabled=False)
        with_it = run_python([user, status], logdir=logdir, env={"EARLYLOG_CONSOLE": "off"})
        assert (with_it.returncode, with_it.stdout, with_it.stderr) == \
               (without.returncode, without.stdout, without.stderr)
    assert len(log_files(logdir)) == 2


def test_children_and_interpreter_flags(tmp_path, logdir):
    code = script(tmp_path, """
        import multiprocessing, os, subprocess, sys
        def child():
            pass
        if __name__ == "__main__":
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            subprocess.run([sys.executable, "-E", "-s", "-c", "pass"], check=True)
            subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
            p = multiprocessing.get_context("spawn").Process(target=child)
            p.start(); p.join()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
    """)
    result = run_python([code], logdir=logdir, env={"EARLYLOG_CONSOLE": "off"})
    assert result.returncode == 0, result.err
    pids = {r["pid"] for r in starts(result)}
    tags = sorted(r["tag"] for r in starts(result))
    # main, plain child, -E -s child, spawn child, its resource tracker (3.9+), fork child; -S has none
    assert len(pids) == len(starts(result)) == len(log_files(logdir))
    assert "mp-child" in tags and any(t.startswith("fork") for t in tags), tags
    assert sum(t == "cmd" for t in tags) == 2, tags


def test_bad_enable_value_is_one_sentence_and_stays_off(logdir):
    result = run_python("print('ok')", logdir=logdir, env={"EARLYLOG": "maybe"})
    assert result.returncode == 0 and result.out == "ok\n"
    assert result.err.count("\n") == 1 and "EARLYLOG='maybe'" in result.err
    assert log_files(logdir) == []


def test_unusable_log_dir_falls_back_with_one_sentence(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    fallback = tmp_path / "tmp"
    fallback.mkdir()
    result = run_python("print('ok')", env={"EARLYLOG_DIR": blocker / "logs", "TMPDIR": fallback,
                                            "EARLYLOG_PROBES": "0"})
    assert result.returncode == 0 and result.out == "ok\n"
    assert "cannot use EARLYLOG_DIR=" in result.err and "trying the default folder" in result.err
    logs = [os.path.join(d, f) for d, _, fs in os.walk(fallback) for f in fs if f.endswith(".log")]
    assert len(logs) == 1 and "start:" in read(logs[0])


def test_log_file_that_is_a_directory_or_symlink_is_refused(tmp_path, logdir):
    target = tmp_path / "elsewhere.log"
    link = tmp_path / "link.log"
    link.symlink_to(target)
    for bad in (tmp_path, link):
        result = run_python("print('ok')", logdir=logdir, env={"EARLYLOG_FILE": bad, "EARLYLOG_PROBES": "0"})
        assert result.returncode == 0 and result.out == "ok\n"
        assert "cannot write EARLYLOG_FILE=" in result.err
    assert not target.exists()
    assert len(log_files(logdir)) == 2


def test_the_earlylog_command_never_logs(logdir):
    result = run_python(["-m", "earlylog", "--version"], logdir=logdir)
    assert result.returncode == 0 and "earlylog" in result.out
    assert log_files(logdir) == [] and "[earlylog]" not in result.err


def earlylog_cli(*args, env=None):
    return subprocess.run([PYTHON, "-m", "earlylog", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=clean_env(**(env or {})))


def listing(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs
                  if "__pycache__" not in d)


# The hook of the .pth line earlylog 0.3.2 and older wrote: a venv may keep it while a newer
# earlylog is found first (a runtime copy on PYTHONPATH).
OLD_HOOK = """import sys
try:
    from earlylog.runtime import startpack
except ImportError:
    sys.stderr.write("earlylog: EARLYLOG is set but the earlylog package cannot be imported;"
                     " a stale earlylog .pth file is left in site-packages\\n")
else:
    startpack.start(ORIGIN)
"""


def test_a_stale_pth_line_says_one_sentence_and_an_older_one_still_starts_it(tmp_path, logdir):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=clean_env())
    python = str(venv / "bin" / "python")
    with open(os.path.join(site_packages(python), "earlylog.pth"), "w") as f:
        f.write(pthline.render())  # the package itself is not there: an uninstall left the line
    stale = run_python("print('ran')", python=python, logdir=logdir)
    assert (stale.returncode, stale.out) == (0, "ran\n") and log_files(logdir) == []
    # One sentence (a venv's site runs its .pth lines twice: it may come twice).
    assert set(stale.err.splitlines()) == {"earlylog: EARLYLOG is set but the earlylog package cannot be "
                                           "imported; a stale earlylog .pth file is left in site-packages"}
    with open(os.path.join(site_packages(python), "earlylog.pth"), "w") as f:
        f.write("import os;os.environ.get('EARLYLOG', '').strip().lower() in ('', '0', 'false', 'off', 'no') "
                "or exec(%r, {'ORIGIN': 'pth'})\n" % OLD_HOOK)
    older = run_python("print('ran')", python=python, logdir=logdir,
                       env={"PYTHONPATH": os.path.join(ROOT, "injector"), "EARLYLOG_CONSOLE": "off"})
    assert (older.returncode, older.out, older.err) == (0, "ran\n", "")
    assert len(starts(older)) == 1 and "via pth" in starts(older)[0]["msg"]


def test_install_into_a_venv_without_earlylog_and_uninstall_cleanly(bare_venv, logdir):
    site = site_packages(bare_venv)
    before = listing(site)
    off = run_python("import sys; print(sorted(sys.modules).count('earlylog'))", python=bare_venv, logdir=logdir)
    assert off.out == "0\n" and log_files(logdir) == []

    done = earlylog_cli("install", "--python", bare_venv)
    assert done.returncode == 0, done.stderr
    on = run_python("import sys; print(sys.path == [p for p in sys.path])", python=bare_venv, logdir=logdir)
    assert on.returncode == 0 and len(starts(on)) == 1 and "earlylog install" in starts(on)[0]["msg"]
    # The private copy loads by location: the user's sys.path does not gain our folder.
    path = subprocess.run([bare_venv, "-c", "import sys; print(sys.path)"], capture_output=True, text=True,
                          env=clean_env(EARLYLOG="1", EARLYLOG_CONSOLE="off", EARLYLOG_DIR=logdir)).stdout
    assert "earlylog_hook" not in path
    again = earlylog_cli("install", "--venv", os.path.dirname(os.path.dirname(bare_venv)))
    assert again.returncode == 0, again.stderr

    status = earlylog_cli("status", "--python", bare_venv)
    assert status.returncode == 0 and "earlylog_hook.pth" in status.stdout and "will it run: yes" in status.stdout

    gone = earlylog_cli("uninstall", "--python", bare_venv)
    assert gone.returncode == 0, gone.stderr
    assert listing(site) == before


def test_cli_bad_input_exits_2_with_one_sentence(tmp_path):
    missing = earlylog_cli("install", "--python", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "does not exist" in missing.stderr
    nothing = earlylog_cli("run")
    assert nothing.returncode == 2 and "nothing to run" in nothing.stderr
    py2 = "/root/.pyenv/versions/2.7.18/bin/python2.7"  # pyenv's shim would not run it directly
    if os.path.exists(py2):
        old = earlylog_cli("install", "--python", py2)
        assert old.returncode == 2 and "needs Python 3.9 or newer" in old.stderr


def test_cli_says_what_to_pass_instead(tmp_path, bare_venv):
    venv = os.path.dirname(os.path.dirname(bare_venv))
    folder = earlylog_cli("install", "--python", venv)
    assert folder.returncode == 2 and "is a folder, not an interpreter; pass --venv %s" % venv in folder.stderr
    exe = earlylog_cli("install", "--venv", bare_venv)
    assert exe.returncode == 2 and "pass --python %s" % bare_venv in exe.stderr
    # earlylog installed by pip (this test's own environment) is removed by pip, and it says so
    pip_installed = earlylog_cli("uninstall")
    assert pip_installed.returncode == 2 and "-m pip uninstall earlylog" in pip_installed.stderr
    env_help = earlylog_cli("env", "--help")
    for option in ("--sh", "--json", "--cmd", "--powershell"):
        line = next(line for line in env_help.stdout.splitlines() if line.strip().startswith(option))
        assert len(line.split()) > 1, line  # every option has its own description


def test_install_into_read_only_site_packages_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write to a read-only folder; chmod cannot simulate it here")
    venv = make_venv(tmp_path / "ro")
    site = site_packages(venv)
    os.chmod(site, 0o555)
    try:
        result = earlylog_cli("install", "--python", venv)
        assert result.returncode == 2 and "read-only site-packages" in result.stderr
    finally:
        os.chmod(site, 0o755)


def test_template_chain_loads_the_sitecustomize_it_hides(tmp_path, logdir):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS_RAN = True\n")
    env = earlylog_cli("env", "--json")
    assert env.returncode == 0, env.stderr
    import json
    values = json.loads(env.stdout)
    folder = values["PYTHONPATH"].split(os.pathsep)[0]
    code = ("import builtins, sys, sitecustomize; print(getattr(builtins, 'THEIRS_RAN', False), "
            "sitecustomize.__file__ == %r, sys.path.count(%r))" % (str(theirs / "sitecustomize.py"), folder))
    for enabled in ("1", "0"):
        result = run_python(code, logdir=logdir, enabled=False, env={
            "EARLYLOG": enabled, "PYTHONPATH": folder + os.pathsep + str(theirs)})
        assert result.out == "True True 1\n", result.err
    assert len(log_files(logdir)) == 1


def test_run_starts_earlylog_in_python_under_a_node_launcher(tmp_path):
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed")
    launcher = tmp_path / "gui.js"
    launcher.write_text(
        "const {spawnSync} = require('child_process');\n"
        "const r = spawnSync(process.argv[2], ['-c', 'import sys; print(\"py ok\"); sys.exit(7)'],"
        " {stdio: 'inherit'});\n"
        "process.exit(r.status);\n")
    bare = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True).stdout.strip()
    # An interpreter with no earlylog installed: the template on PYTHONPATH brings it.
    other = os.path.join(bare, "bin", "python3")
    logs = tmp_path / "logs"
    result = subprocess.run([PYTHON, "-m", "earlylog", "run", "--", node, str(launcher), other],
                            capture_output=True, text=True, timeout=TIMEOUT,
                            env=clean_env(EARLYLOG_DIR=logs))
    assert result.returncode == 7 and "py ok" in result.stdout, result.stderr
    files = log_files(str(logs))
    assert len(files) == 1 and "via sitecustomize" in read(files[0])


@pytest.mark.parametrize("version", ["3.9", "3.13"])
def test_runtime_runs_on_other_pythons(version, tmp_path, logdir):
    found = [os.path.join(d, "bin", "python" + version) for d in
             sorted(__import__("glob").glob("/root/.pyenv/versions/%s.*" % version))]
    if not found:
        pytest.skip("no Python %s on this machine" % version)
    venv = make_venv(tmp_path / "venv", python=found[0])
    assert earlylog_cli("install", "--python", venv).returncode == 0
    code = "import os, sys; pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0); sys.exit(4)"
    result = run_python(code, python=venv, logdir=logdir)
    assert result.returncode == 4
    assert len(starts(result)) == 2 and "Python %s" % version in starts(result)[0]["msg"]
    assert "earlylog:" not in result.err, result.err


def test_readme_demo_shows_the_hang_and_prints_exactly_what_it_runs():
    demo = subprocess.run([PYTHON, os.path.join("scripts", "demo.py")], capture_output=True, text=True,
                          timeout=TIMEOUT, env=clean_env(), cwd=ROOT)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo_hang.py:15 in load_dataset" in demo.stdout
    assert "stalled for" in demo.stdout and "waiting on a lock" in demo.stdout
    hang_line, report_line = [line[2:] for line in demo.stdout.splitlines() if line.startswith("$ ")]
    words = shlex.split(hang_line)
    settings = dict(w.split("=", 1) for w in words if "=" in w)
    assert set(settings) == {"EARLYLOG", "EARLYLOG_STALL", "EARLYLOG_DIR"}
    logdir = settings["EARLYLOG_DIR"]
    [first] = log_files(logdir)
    # The printed line, pasted into a shell in the same folder, runs the same program the same way.
    again = subprocess.Popen(["bash", "-c", hang_line], cwd=ROOT, env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not any(
                "dump: stall after 2 s" in read(p) for p in log_files(logdir) if p != first):
            time.sleep(0.2)
        first_text, [second_text] = read(first), [read(p) for p in log_files(logdir) if p != first]
        report = subprocess.run(shlex.split(report_line.split("   (")[0]), capture_output=True, text=True,
                                timeout=TIMEOUT, cwd=ROOT, env=clean_env())
    finally:
        os.killpg(again.pid, signal.SIGKILL)
        again.communicate()
        shutil.rmtree(logdir, ignore_errors=True)

    def argv(text):
        start = text.splitlines()[0]
        return start[start.index(" argv "):start.index("; log ")]
    assert argv(second_text) == argv(first_text) and "demo_hang.py:15 in load_dataset" in second_text
    assert report.returncode == 1 and "in load_dataset at demo_hang.py:15" in report.stdout, report.stdout
