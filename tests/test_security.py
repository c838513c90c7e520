"""Issue 7, security: the default folder in a shared temp dir is private and refuses planted
symlinks, files are 0600, nothing from the environment is evaluated or imported, and secrets in
argv, URLs and the environment never reach a log or the console."""
import os
import stat
import subprocess

import pytest

from support import PYTHON, TIMEOUT, clean_env, run_both, run_python

HELLO = "print('hello')"


def base(tmp):
    return tmp / ("earlylog-%d" % os.getuid())


def test_default_folder_is_private_even_with_umask_000(tmp_path):
    proc = subprocess.run(["bash", "-c", 'umask 000; exec "$0" -c "$1"', PYTHON, HELLO],
                          env=clean_env(EARLYLOG=1, TMPDIR=tmp_path), capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout == b"hello\n"
    [run] = base(tmp_path).iterdir()
    [log] = run.iterdir()
    assert stat.S_IMODE(base(tmp_path).stat().st_mode) == 0o700
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_planted_symlink_as_the_default_folder_is_refused(tmp_path):
    victim = tmp_path / "attacker-controlled"
    victim.mkdir()
    base(tmp_path).symlink_to(victim)
    on = run_both(HELLO, None, env={"TMPDIR": tmp_path})
    said = [line for line in on.err.splitlines() if line.startswith("earlylog: ")]
    assert len(said) == 1 and "symlink" in said[0] and "console only" in said[0], said
    assert list(victim.iterdir()) == [], "nothing was written through the symlink"


def test_default_folder_open_to_others_is_refused(tmp_path):
    base(tmp_path).mkdir()
    base(tmp_path).chmod(0o777)
    on = run_both(HELLO, None, env={"TMPDIR": tmp_path})
    assert "open to others" in on.err
    assert list(base(tmp_path).iterdir()) == []


def test_log_file_that_is_a_planted_symlink_is_not_followed(tmp_path, logdir):
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    link = tmp_path / "log"
    link.symlink_to(target)
    on = run_both(HELLO, logdir, env={"EARLYLOG_FILE": link})
    assert target.read_text() == "keep me\n"
    said = [line for line in on.err.splitlines() if line.startswith("earlylog: ")]
    assert len(said) == 1 and "EARLYLOG_FILE" in said[0] and "symlink" in said[0], said
    assert len(on.files()) == 1, "it logs into EARLYLOG_DIR instead"


@pytest.mark.parametrize("name", ["EARLYLOG", "EARLYLOG_DIR", "EARLYLOG_FORMAT", "EARLYLOG_STALL",
                                  "EARLYLOG_LOG_ARG", "EARLYLOG_REDACT", "EARLYLOG_CONSOLE"])
def test_no_environment_value_is_evaluated_or_imported(tmp_path, name):
    canary = tmp_path / "pwned"
    payload = "__import__('os').system('touch %s') or 1; $(touch %s) `touch %s`" % ((canary,) * 3)
    env = {"EARLYLOG": "1", "EARLYLOG_DIR": tmp_path / "logs", name: payload}
    run_python(["-c", HELLO, payload], env=env, cwd=tmp_path)
    assert not canary.exists()


@pytest.mark.parametrize("value", [None, "0", "off", ""])
def test_off_means_nothing_of_earlylog_runs(value):
    env = {} if value is None else {"EARLYLOG": value}
    result = run_python("import sys; print(sorted(m for m in sys.modules if m.startswith('earlylog')))",
                        env=env, enabled=False)
    assert (result.out, result.err) == ("[]\n", "")


SECRETS = ["tok-1111", "hunter2", "key-2222", "pw-3333", "hf_4444", "pg-5555", "sess-6666"]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_never_reach_logs_or_console(tmp_path, logdir, fmt):
    argv = ["--token", "tok-1111", "--password=hunter2", "--api-key", "key-2222",
            "--url", "https://alice:pw-3333@example.com/repo.git"]
    env = {"EARLYLOG_FORMAT": fmt, "HF_TOKEN": "hf_4444", "DATABASE_URL": "postgres://bob:pg-5555@db/x",
           "MY_SESSION": "sess-6666", "EARLYLOG_DUMP_EVERY": "0.2"}
    code = "import sys, time, earlylog; earlylog.log('argv seen'); time.sleep(0.5); sys.exit(len(sys.argv))"
    on = run_both(["-c", code] + argv, logdir, env=env)
    assert on.returncode == len(argv) + 1
    everything = on.text() + on.err
    assert "argv seen" in everything and "alice" in everything and "HF_TOKEN=***" in everything  # env probe ran
    for secret in SECRETS:
        assert secret not in everything


@pytest.mark.parametrize("command", [["env", "--json"], ["run", "--", "true"]])
def test_earlylog_env_and_run_refuse_a_planted_default_folder(tmp_path, command):
    # `earlylog env` puts a runtime copy on PYTHONPATH: from an attacker's folder it would run
    # their code in every Python. With no usable ~/.cache it must refuse, not fall back into it.
    victim = tmp_path / "attacker-controlled"
    victim.mkdir()
    base(tmp_path).symlink_to(victim)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    proc = subprocess.run([os.path.join(os.path.dirname(PYTHON), "earlylog")] + command,
                          env=clean_env(TMPDIR=tmp_path, XDG_CACHE_HOME=blocker), capture_output=True,
                          timeout=TIMEOUT)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.startswith("earlylog: ") and "symlink" in err and "Traceback" not in err
    assert list(victim.iterdir()) == []


def test_secrets_inside_a_parents_shell_command_line_are_masked(tmp_path):
    logdir = tmp_path / "logs"
    inner = ("%s -c pass --token tok-in-sh --api-key=key-in-sh https://u:pw-in-url@h/x?X-Amz-Signature=sig-in-url "
             "-H 'Authorization: Bearer bearer-in-sh'" % PYTHON)
    proc = subprocess.run(["sh", "-c", inner], env=clean_env(EARLYLOG="1", EARLYLOG_DIR=logdir), capture_output=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    text = "".join(open(os.path.join(logdir, n), encoding="utf-8").read() for n in os.listdir(logdir))
    assert "parent" in text  # the parent's sh -c line is logged, masked
    for secret in ("tok-in-sh", "key-in-sh", "pw-in-url", "sig-in-url", "bearer-in-sh"):
        assert secret not in text and secret.encode() not in proc.stderr, secret
