"""Issue 6, `earlylog tail`: the lines of every process of a run, merged in time order with a process
tag, from text and JSON logs alike; -f follows new lines and processes that start later."""
import json
import os
import signal
import subprocess
import time

from support import PYTHON, TIMEOUT, clean_env, read, run_python, wait_for, wait_log


def start(code, logdir, **env):
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_CONSOLE="off", **env)
    return subprocess.Popen([PYTHON, "-c", code], env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_lines_of_all_processes_merge_in_time_order(tmp_path, logdir):
    go = tmp_path / "go"
    first = start("import earlylog, os, time\nearlylog.log('a1 first')\n"
                  "while not os.path.exists(%r): time.sleep(0.05)\nearlylog.log('a3 last')" % str(go), logdir)
    wait_log(logdir, "a1 first")
    second = run_python("import earlylog; earlylog.log('b2 between')", logdir=logdir, env={"EARLYLOG_FORMAT": "json"})
    go.write_text("")
    assert first.wait(timeout=TIMEOUT) == 0 and second.returncode == 0
    res = subprocess.run([PYTHON, "-m", "earlylog", "tail", "-n", "0", str(logdir)], env=clean_env(EARLYLOG=1),
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0 and res.stderr == "earlylog tail: all %d lines of 2 log files in %s\n" % (
        len(res.stdout.splitlines()), logdir)
    marks = [line for line in res.stdout.splitlines() if " mark: " in line]
    assert [m.split(" mark: ")[1] for m in marks] == ["a1 first", "b2 between", "a3 last"]
    assert marks[0].split()[1:3] == [str(first.pid), "cmd"]  # `HH:MM:SS.mmm pid tag mark: ...`
    assert marks[1].split()[1] != str(first.pid) and marks[1].split()[2] == "cmd"  # from the JSON log
    assert not any(line.startswith(("[earlylog]", "{")) for line in res.stdout.splitlines())
    assert sorted(res.stdout.splitlines(), key=lambda line: line[:12]) == res.stdout.splitlines()


def test_a_line_a_thread_wrote_late_is_shown_at_its_time(logdir):
    """Threads stamp a line before they write it, so a file can hold a line after a later-stamped
    one (seen: the probe thread's nvidia-smi line after the main thread's next lines)."""
    res = run_python("import earlylog, time\nfor m in ('m1', 'm2', 'm3'):\n    earlylog.log(m); time.sleep(0.01)",
                     logdir=logdir)
    path, = res.files()
    lines = read(path).splitlines(True)
    m1 = next(i for i, line in enumerate(lines) if line.endswith("mark: m1\n"))
    lines.insert(m1 + 1, lines.pop(m1))  # m1 written just after m2, as a slower thread would
    with open(path, "w") as f:
        f.writelines(lines)
    out = subprocess.run([PYTHON, "-m", "earlylog", "tail", "-n", "0", str(logdir)], env=clean_env(),
                         capture_output=True, text=True, timeout=TIMEOUT).stdout.splitlines()
    assert [line.split(" mark: ")[1] for line in out if " mark: " in line] == ["m1", "m2", "m3"]
    assert sorted(out, key=lambda line: line[:12]) == out


def test_json_lines_stamp_the_same_millisecond_their_time_shows(logdir):
    """`ts` and `time` of a JSON line are one moment: a tail that merges JSON and text logs, and any
    other reader, must not see a line a millisecond later than it says (ts was rounded, time cut)."""
    res = run_python("import earlylog\nfor i in range(200):\n    earlylog.log('m%d' % i)", logdir=logdir,
                     env={"EARLYLOG_FORMAT": "json"})
    lines = [json.loads(line) for line in res.text().splitlines()]
    assert len(lines) > 200
    for line in lines:
        assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(line["ts"]))) == line["time"][:19]
        assert "%03d" % (round(line["ts"] * 1000) % 1000) == line["time"][20:23], line


def test_follow_shows_processes_that_start_later(tmp_path, logdir):
    run_python("import earlylog; earlylog.log('before tail')", logdir=logdir)
    out = tmp_path / "tail.out"
    with open(out, "w") as sink:
        tail = subprocess.Popen([PYTHON, "-m", "earlylog", "tail", "-f", "-n", "1", str(logdir)],
                                env=clean_env(), stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: read(out).count("\n") >= 2)
        late = run_python("import earlylog, os; earlylog.log('late arrival %d' % os.getpid())", logdir=logdir)
        pid = int(late.text().split("mark: late arrival ")[1].split()[0])
        wait_for(lambda: "exit: status 0" in read(out).partition("mark: late arrival")[2])
    finally:
        tail.send_signal(signal.SIGINT)
        status = tail.wait(timeout=TIMEOUT)
    text = read(out)
    assert status == 0 and "Traceback" not in text
    assert text.splitlines()[0] == "earlylog tail: the last 1 line of 1 log file in %s; -n N shows more " \
                                   "(-n 0: all)" % logdir  # stderr, merged into this file by the test
    assert " exit: status 0 " in text.splitlines()[1]  # -n 1: the old process's last line first
    assert "before tail" not in text  # -n 1 started at the old process's last line (its exit)
    assert "%d cmd start: pid %d" % (pid, pid) in text and "%d cmd mark: late arrival %d" % (pid, pid) in text
    assert os.listdir(logdir) and all(n.endswith(".log") for n in os.listdir(logdir))


def test_a_large_file_that_is_not_a_log_is_skipped_quickly(tmp_path, logdir):
    run_python("print('hello')", logdir=logdir)
    with open(os.path.join(str(logdir), "model.log"), "wb") as f:
        f.write(os.urandom(1 << 16).replace(b"\n", b" ") * 64)  # 4 MiB with no newline
    proc = subprocess.run([PYTHON, "-m", "earlylog", "tail", str(logdir)], capture_output=True, text=True,
                          timeout=30, env=clean_env())
    assert proc.returncode == 0 and "start:" in proc.stdout
    # the default shows the last 20 lines and says how to see more
    assert proc.stderr.startswith("earlylog tail: ") and "-n N shows more (-n 0: all)" in proc.stderr or \
        proc.stderr.startswith("earlylog tail: all ")
