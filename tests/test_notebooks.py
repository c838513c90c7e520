"""Jupyter: a deadlock in a notebook cell is named as the notebook names it (`cell In[2], line 8`,
from IPython's own map of cell files to execution counts), with the lock and the thread holding
it; a kernel waiting for its next cell is idle. Real kernels, started with EARLYLOG=1 through
jupyter_client as a notebook server starts them, read back with `earlylog report`."""

import pytest

from support import TIMEOUT, clean_env, earlylog, log_files, read, report_json, wait_for

pytest.importorskip("ipykernel")
manager = pytest.importorskip("jupyter_client.manager")

# The cell a user runs second (In[2]): a thread holds the lock across a long sleep, and the
# cell's own `with lock:` at its line 8 waits for it.
DEADLOCK = """\
import threading, time
lock = threading.Lock()
def hold():
    with lock:
        time.sleep(600)
threading.Thread(target=hold, daemon=True).start()
time.sleep(0.2)
with lock:
    pass
"""

def _kernel(tmp_path, name):
    logs = tmp_path / name
    logs.mkdir()
    env = clean_env(EARLYLOG=1, EARLYLOG_DIR=logs, EARLYLOG_STALL=1, EARLYLOG_CONSOLE="off",
                    IPYTHONDIR=tmp_path / "ipython", JUPYTER_RUNTIME_DIR=tmp_path / "runtime")
    km = manager.KernelManager(kernel_name="python3")
    km.start_kernel(env=env)
    return km, str(logs)


def test_a_cell_deadlock_is_named_by_its_cell_and_an_idle_kernel_is_idle(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    kernels = [_kernel(tmp_path, name) for name in ("stuck", "idle")]
    try:
        clients = []
        for km, _ in kernels:
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=TIMEOUT)
            clients.append(kc)
        for kc in clients:
            assert kc.execute_interactive("x = 1", timeout=TIMEOUT)["content"]["status"] == "ok"  # In[1]
        clients[0].execute(DEADLOCK)  # In[2], which never finishes
        (_, stuck), (_, idle) = kernels

        def dumped(folder, needle):
            return lambda: any(needle in read(f) for f in log_files(folder))
        wait_for(dumped(stuck, "  cell: In[2] is "))
        wait_for(dumped(idle, "dump: stall"))
        text = earlylog("report", stuck).stdout
        rep = report_json(stuck)
        idle_rep = report_json(idle)
    finally:
        for km, _ in kernels:
            km.shutdown_kernel(now=True)
    (kernel,) = rep["processes"]
    assert kernel["state"] == "stalled", rep["verdict"]
    assert "stalled for" in kernel["summary"] and " in cell In[2], line 8;" in kernel["summary"]
    assert kernel["where"]["file"] == "<cell In[2]>" and kernel["where"]["line"] == 8
    assert any(c["kind"] == "lock" and "thread MainThread waits for lock `lock` in cell In[2], line 8; thread "
               "Thread-" in c["text"] and "(hold) holds it (with block at cell In[2], line 4 in hold)" in c["text"]
               for c in rep["causes"]), rep["causes"]
    assert "in cell In[2], line 8" in text and ".py:8" not in text
    (quiet,) = idle_rep["processes"]
    assert quiet["state"] == "idle", idle_rep["verdict"]
    assert quiet["idle"] == "waiting for its next cell (a Jupyter kernel)"
