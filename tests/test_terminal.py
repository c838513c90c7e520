"""A person at a terminal: a script that asks with input(), stops at breakpoint() or asks for a
password with getpass, pages through less, or the interactive prompt, run on a real
pseudo-terminal (its controlling one) with EARLYLOG on. The terminal shows the prompt and no
stall line while it waits; its log and `earlylog report` say it waits for input at the terminal,
at the prompt's line, idle and in no trouble; the answer goes through as without earlylog. A
prompt on a pipe, or on a terminal that is not the process's own, stays a stall."""
import fcntl
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import termios
import time

import pytest

from support import PYTHON, TIMEOUT, clean_env, earlylog, log_files, python_3, read, report_json, script, wait_for

SCRIPTS = {
    "input": ("""
        def confirm():
            answer = input("Overwrite checkpoint? [y/N] ")
            print("answer:", answer)

        confirm()
        """, "Overwrite checkpoint? [y/N] ", b"y\n", "answer: y", "input()", "confirm", 3),
    "breakpoint": ("""
        def train():
            step = 3
            breakpoint()
            print("done", step)

        train()
        """, "(Pdb) ", b"c\n", "done 3", "the pdb prompt", "train", 5),
    "getpass": ("""
        import getpass

        def login():
            secret = getpass.getpass("Password: ")
            print("got", len(secret), "characters")

        login()
        """, "Password: ", b"hunter2\n", "got 7 characters", "getpass", "login", 5),
}


def _controlling():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A program on a new pseudo-terminal (stdin, stdout, stderr): what it shows, and typing."""

    def __init__(self, args, env):
        self.master, slave = pty.openpty()
        # Its own session, with the terminal as its controlling one, as a shell gives it.
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                                     start_new_session=True, preexec_fn=_controlling)
        os.close(slave)
        self.shown = b""

    def read(self, wait=0.2):
        while select.select([self.master], [], [], wait)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the program has ended
                break
            if not data:
                break
            self.shown += data
            wait = 0.05
        return self.shown.decode("utf-8", "replace")

    def type(self, data):
        os.write(self.master, data)

    def end(self):
        try:
            status = self.proc.wait(TIMEOUT)
            self.read()
            return status
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


@pytest.mark.parametrize("case", sorted(SCRIPTS))
@pytest.mark.parametrize("minor", [None, 9, 13], ids=["this", "3.9", "3.13"])
def test_a_prompt_at_the_terminal_gets_no_stall_line_and_reads_as_waiting_for_its_person(tmp_path, logdir, case,
                                                                                         minor):
    code, prompt, answer, answered, what, func, line = SCRIPTS[case]
    exe = PYTHON if minor is None else python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    if case == "breakpoint" and (minor or sys.version_info[1]) >= 13:
        line -= 1  # 3.13's pdb stops at the breakpoint() line itself, earlier ones at the next
    from earlylog.cli import launch
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_PROBES=0, TERM="dumb",
                    PYTHONPATH=launch.variables({})["PYTHONPATH"])
    term = Terminal([exe, script(tmp_path, code, "ask.py")], env)
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 2 and prompt in term.read())
        rep = report_json(str(logdir))
        text = earlylog("report", logdir).stdout
        shown = term.read()
        term.type(answer)
        wait_for(lambda: answered in term.read())
    finally:
        status = term.end()
    assert status == 0
    assert prompt in shown and " stall: " not in shown and "dump:" not in shown, shown
    log = read(log_files(logdir)[0])
    stall = [x for x in log.splitlines() if " stall: silent for 1 s" in x]
    assert stall and "; waiting for input at the terminal (%s) in %s at ask.py:%d; stacks in " % (what, func, line) \
        in stall[0], stall
    assert "  terminal: waiting for input at the terminal (%s)" % what in log
    [proc] = rep["processes"]
    assert proc["state"] == "idle" and proc["idle"] == "waiting for input at the terminal (%s)" % what, proc
    assert proc["summary"].endswith("in %s at ask.py:%d" % (func, line)), proc["summary"]
    assert rep["causes"] == [] and "none in trouble" in rep["verdict"][0], rep["verdict"]
    assert "waiting for input at the terminal (%s)" % what in text
    if case == "getpass":
        assert "hunter2" not in log + shown


@pytest.mark.skipif(not shutil.which("less"), reason="less is not on this machine")
def test_a_pager_at_the_terminal_is_its_persons(tmp_path, logdir):
    # help() and pydoc page through less, a child (of sh) that reads the terminal: the script
    # waits for it, and for the person reading.
    code = """
        import pydoc

        def show_help():
            pydoc.pager("\\n".join("line %d" % i for i in range(500)))
            print("paged")

        show_help()
        """
    term = Terminal([PYTHON, script(tmp_path, code, "helpme.py")],
                    clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_PROBES=0, TERM="xterm",
                              PAGER="less"))
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 2 and "line 3" in term.read())
        rep = report_json(str(logdir))
        shown = term.read()
        term.type(b"q")
        wait_for(lambda: "paged" in term.read())
    finally:
        status = term.end()
    assert status == 0 and " stall: " not in shown, shown
    [proc] = rep["processes"]
    assert proc["state"] == "idle" and re.match(r"waiting for input at the terminal \(less, pid \d+\)$", proc["idle"]), proc
    assert proc["summary"].endswith("in show_help at helpme.py:5") and rep["causes"] == [], rep


@pytest.mark.parametrize("minor", [None, 13], ids=["this", "3.13"])
def test_the_interactive_prompt_gets_no_stall_line_and_is_idle(logdir, minor):
    # 3.13's new REPL (_pyrepl, with TERM=xterm) runs in Python; earlier ones wait in C, no frame.
    exe = PYTHON if minor is None else python_3(minor)
    if exe is None:
        pytest.skip("python3.%d is not on this machine" % minor)
    from earlylog.cli import launch
    term = Terminal([exe], clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_PROBES=0,
                                     TERM="xterm", PYTHONPATH=launch.variables({})["PYTHONPATH"]))
    try:
        wait_for(lambda: sum(read(f).count(" stall: silent") for f in log_files(logdir)) >= 2 and ">>> " in term.read())
        [proc] = report_json(str(logdir))["processes"]
        shown = term.read()
        term.type(b"print(6 * 7)\n")
        wait_for(lambda: "42" in term.read())
        term.type(b"exit()\n")
    finally:
        status = term.end()
    assert status == 0 and " stall: " not in shown, shown
    assert proc["state"] == "idle" and proc["idle"] == "waiting for input at the terminal (the interactive prompt)", proc
    assert "; waiting for input at the terminal (the interactive prompt); stacks in " in read(log_files(logdir)[0])


def _unanswered(tmp_path, logdir, stdin):
    """input() with this stdin and stdout/stderr pipes, read once stalled: (the report, stderr)."""
    proc = subprocess.Popen([PYTHON, script(tmp_path, SCRIPTS["input"][0], "ask.py")], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env=clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1))
    try:
        wait_for(lambda: sum(read(f).count("dump: stall") for f in log_files(logdir)) >= 2)
        rep = report_json(str(logdir))
    finally:
        proc.kill()
        _out, err = proc.communicate(timeout=TIMEOUT)
    assert " stall: silent for 1 s" in err.decode() and "at the terminal" not in read(log_files(logdir)[0])
    return rep


def test_a_prompt_on_a_launchers_pipe_stays_a_cause_with_its_stall_line(tmp_path, logdir):
    # No terminal: stdin is a pipe its parent holds and never writes. The answer may never come.
    rep = _unanswered(tmp_path, logdir, subprocess.PIPE)
    assert rep["processes"][0]["state"] == "stalled"
    assert [c["kind"] for c in rep["causes"]] == ["stdin"], rep["causes"]


def test_a_read_from_a_terminal_that_is_not_its_own_is_no_person(tmp_path, logdir):
    # A terminal device that is not the process's controlling terminal (a serial port, a pty it
    # was handed): nobody sits there for it, so its silence stays a stall, told on its stderr.
    master, slave = pty.openpty()
    try:
        rep = _unanswered(tmp_path, logdir, slave)
    finally:
        os.close(slave)
        os.close(master)
    assert rep["processes"][0]["state"] == "stalled", rep["processes"][0]
