"""Interactive sessions with EARLYLOG=1: an exception the prompt handled is logged as handled, not
printed by earlylog and not the process's end; consoles built on `code` take the branch they take
without earlylog; what earlylog prints honours sys.tracebacklimit."""
import json
import os
import shlex
import shutil
import subprocess
import time

import pytest

from support import (PYTHON, clean_env, log_files, python_3, read, report_json, run_both, run_python, script,
                     user_text, wait_for)


def exceptions(result):
    """The exception lines' texts (each a traceback's head) in the log file."""
    return [r["msg"] for r in result.records() if r["kind"] == "exception"]


def exit_text(result):
    return [r["msg"] for r in result.records() if r["kind"] == "exit"]


def typed(tmp_path, text):
    """A file to feed the prompt as stdin."""
    path = tmp_path / "typed.txt"
    path.write_text(text)
    return path


def run_with_stdin(args, logdir, stdin_path, enabled=True):
    with open(str(stdin_path)) as stdin:
        return run_python(args, logdir=logdir if enabled else None, stdin=stdin, enabled=enabled)


def test_python_i_handled_error_is_logged_as_handled_not_as_the_end(tmp_path, logdir):
    feed = typed(tmp_path, '1/0\nprint("after")\n')
    off = run_with_stdin(["-i"], None, feed, enabled=False)
    on = run_with_stdin(["-i"], logdir, feed)
    assert (on.returncode, on.out) == (off.returncode, off.out) == (0, "after\n")
    assert "ZeroDivisionError" in on.err and "exception:" not in on.err, on.err
    assert exceptions(on) == ["handled at the interactive prompt: ZeroDivisionError: division by zero"]
    assert exit_text(on)[0].startswith("status 0 ")
    process = report_json(str(logdir))["processes"][0]
    assert process["state"] == "exited" and process["exception"] is None, process
    assert "ZeroDivisionError" not in process["summary"]


def test_script_that_fails_under_python_i_hands_over_to_the_prompt(tmp_path, logdir):
    # With -i the prompt follows the script's uncaught exception: Python exits with the prompt's status.
    feed = typed(tmp_path, 'print("still here")\n')
    path = script(tmp_path, "raise KeyError('cfg')\n")
    on = run_with_stdin(["-i", path], logdir, feed)
    assert on.returncode == 0 and "still here" in on.out
    assert "exception:" not in on.err
    assert exceptions(on) == ["handled at the interactive prompt: KeyError: 'cfg'"]
    assert exit_text(on)[0].startswith("status 0 ")


CONSOLES = """
    import code, sys

    class Collect(code.InteractiveInterpreter):
        def __init__(self):
            super().__init__()
            self.text = []

        def write(self, data):
            self.text.append(data)

    i = Collect()
    i.runsource("1/0")
    print("WRITE:", "".join(i.text))
    print("SAME:", sys.excepthook is sys.__excepthook__)
    code.interact(banner="", exitmsg="", local={})
"""


def test_code_consoles_take_the_branch_they_take_without_earlylog(tmp_path, logdir):
    feed = typed(tmp_path, "def f(): 1/0\n\nf()\n")
    path = script(tmp_path, CONSOLES)
    off = run_with_stdin([path], None, feed, enabled=False)
    on = run_with_stdin([path], logdir, feed)
    assert (on.returncode, on.out, user_text(on.err)) == (off.returncode, off.out, off.err)
    # The subclass's write() gets the traceback; code.interact shows no frame of code.py's runcode.
    assert "WRITE: Traceback (most recent call last):" in on.out and "ZeroDivisionError" in on.out
    assert "SAME: True" in on.out
    assert "code.py" not in on.err and 'File "<console>", line 1, in f' in on.err
    assert "exception:" not in on.err
    assert exceptions(on) == ["handled at the interactive prompt: ZeroDivisionError: division by zero"]
    assert exit_text(on)[0].startswith("status 0 ")


def test_console_block_honours_tracebacklimit_and_the_end_is_still_the_exception(tmp_path, logdir):
    path = script(tmp_path, """
        import sys
        sys.tracebacklimit = 1
        def inner():
            raise ValueError("deep")
        def outer():
            inner()
        outer()
    """)
    on = run_both([path], logdir)
    assert on.returncode == 1
    ours = [line for line in on.err.splitlines() if line.startswith("[earlylog]") and "| " in line]
    assert any("in inner" in line for line in ours) and not any("in outer" in line for line in ours), on.err
    assert exceptions(on) == ["ValueError: deep"]
    assert "in outer" in on.text(), "the log file keeps every frame"
    assert exit_text(on)[0].startswith("status 1 ") and "uncaught ValueError" in exit_text(on)[0]
    process = report_json(str(logdir))["processes"][0]
    assert process["state"] == "failed" and "ValueError: deep" in process["summary"]


def test_program_calling_the_hook_itself_goes_on(logdir):
    on = run_both("""
        import sys
        try:
            {}["missing"]
        except KeyError:
            sys.excepthook(*sys.exc_info())
        print("went on")
    """, logdir)
    assert on.returncode == 0 and on.out == "went on\n"
    assert "exception:" not in on.err
    assert exceptions(on) == ["handled by the program (it called sys.excepthook): KeyError: 'missing'"]
    assert exit_text(on)[0].startswith("status 0 ")


def test_own_hook_chaining_to_the_default_still_ends_with_the_exception(logdir):
    on = run_both("""
        import sys
        def hook(*args):
            print("own hook", file=sys.stderr)
            sys.__excepthook__(*args)
        sys.excepthook = hook
        raise OSError("disk")
    """, logdir)
    assert on.returncode == 1 and "own hook" in on.err
    assert exceptions(on) == ["OSError: disk"]
    assert "uncaught OSError" in exit_text(on)[0]


def logs(logdir):
    return "".join(read(path) for path in log_files(str(logdir)))


def tmux_repl(python, logdir, env, keys):
    """Type keys into python's prompt in a real terminal (tmux); returns what the screen showed."""
    session = "earlylog-test-%d-%d" % (os.getpid(), int(time.time() * 1000) % 100000)
    full = clean_env(EARLYLOG="1", EARLYLOG_DIR=str(logdir), **env)
    starter = os.path.join(str(logdir), "..", "start.sh")
    with open(starter, "w") as f:  # the environment as a file: tmux's server has its own
        f.write("".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in full.items() if k.isidentifier()))
        f.write("exec %s -q\n" % shlex.quote(python))
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", "sh " + starter],
                   check=True)
    try:
        def screen():
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                  text=True).stdout
        wait_for(lambda: ">>>" in screen())
        for line in keys:
            subprocess.run(["tmux", "send-keys", "-t", session, line, "Enter"], check=True)
            time.sleep(0.3)
        wait_for(lambda: "after" in screen().split("print(")[-1])
        shown = screen()
        subprocess.run(["tmux", "send-keys", "-t", session, "C-d"], check=True)
        wait_for(lambda: "exit:" in logs(logdir))
        return shown
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def interpreters():
    found = [pytest.param(PYTHON, {}, id="own")]
    newer = python_3(13)
    if newer:
        found.append(pytest.param(newer, "activate", id="3.13-pyrepl"))
    return found


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux")
@pytest.mark.parametrize("python,env", interpreters())
def test_terminal_prompt_shows_only_pythons_traceback(python, env, logdir):
    if env == "activate":  # earlylog's documented PYTHONPATH activation for an interpreter without it
        proc = subprocess.run([PYTHON, "-m", "earlylog", "env", "--json"], capture_output=True, text=True,
                              env=clean_env(), check=True)
        env = {"PYTHONPATH": json.loads(proc.stdout)["PYTHONPATH"]}
    shown = tmux_repl(python, logdir, env, ["import sys; sys.tracebacklimit = 1", "def f(): 1/0", "",
                                            "f()", 'print("after")'])
    assert shown.count("Traceback (most recent call last):") == 1, shown
    assert "exception:" not in shown and "| " not in shown, shown
    assert "in f" in shown and "in <module>" not in shown, "Python's own tracebacklimit 1: the innermost frame"
    text = logs(logdir)
    assert "exception: handled at the interactive prompt: ZeroDivisionError" in text
    assert "exit: status 0 " in text
