"""Issue 34, the healthy side: a job with a slow rank is slowed, not stuck, and a launcher waiting
for healthy ranks (torchrun, accelerate, torch.multiprocessing with fork, spawn and forkserver)
supervises and never stalls. The jobs are tests/test_distributed.py's."""
import pytest

from support import report_json, wait_for
from test_distributed import _launcher_process, _start

pytest.importorskip("torch")


def test_a_healthy_job_with_a_slow_rank_is_slowed_not_stuck(tmp_path, logdir):
    """Rank 1 takes 2.4 s to read each batch; rank 0 waits for it in each step's all_reduce, longer
    than EARLYLOG_STALL. No stall line on the console, nothing stuck, no cause; slowing told once."""
    proc = _start(tmp_path, logdir, "fork", "slow", stall="1.5", SLOW="2.4", STEPS="5")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert b"stall:" not in err, err.decode()
    rep = report_json(str(logdir))
    assert rep["verdict"][0] == "3 processes, none in trouble: 3 exited", rep["verdict"]
    assert rep["causes"] == []
    slowed = [line for line in rep["verdict"] if "slowed" in line]
    assert len(slowed) == 1 and slowed[0].startswith("rank 0 was slowed, not stuck: it waited for its peer ranks up "
                                                     "to "), rep["verdict"]
    assert "rank 1, which never waited, is the slower" in slowed[0]
    assert not any("stuck" in line for line in rep["verdict"] if line not in slowed)


HEALTHY_LAUNCHERS = ["torchrun", "accelerate", "fork", "spawn", "forkserver"]


@pytest.mark.parametrize("launcher", HEALTHY_LAUNCHERS)
def test_a_launcher_waiting_for_healthy_ranks_supervises_and_never_stalls(tmp_path, logdir, launcher):
    """A healthy job whose launcher is silent far longer than EARLYLOG_STALL while its ranks train:
    the launcher's lines stay off the console and the report calls it supervising, never stalled."""
    proc = _start(tmp_path, logdir, launcher, "healthy", STEPS="40", PAUSE="0.1")
    try:
        wait_for(lambda: proc.poll() is not None or "supervising" in " ".join(
            p["summary"] for p in _launcher_process(report_json(str(logdir)))), timeout=90)
        live = report_json(str(logdir))
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    boss = _launcher_process(live)
    assert boss and boss[0]["state"] == "idle" and "supervising" in boss[0]["summary"], live["verdict"]
    assert not [p for p in live["processes"] if p["state"] == "stalled"], live["verdict"]
    assert b"stall:" not in err, err.decode()[-3000:]
    rep = report_json(str(logdir))
    assert "none in trouble" in rep["verdict"][0] and rep["causes"] == [], rep["verdict"]
