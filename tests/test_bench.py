"""The benchmark's smoke run: `scripts/bench.py --smoke` runs every row and writes its JSON.
It checks that the bench works, never its timings (those belong to the bench's own table)."""
import json
import os
import subprocess
import sys

import pytest

from support import ROOT, clean_env

ROWS = {"startup-installed", "startup-on", "alt-importtime", "alt-faulthandler", "alt-hunter-installed",
        "alt-hunter-on", "torch-import", "torch-loop", "ddp-all-reduce", "ddp-p2p", "ddp-step", "ddp-import",
        "p2p-wrap", "log-line", "heartbeat", "print-live", "print-bounded", "console-lines", "idle-cpu", "memory",
        "idle-cpu-threads",
        "stall-latency", "stall-pause", "reach-pause", "fork", "retry-beat", "alt-audit-event", "alt-audit-deepcopy", "exit",
        "report"}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_smoke_run_prints_the_table_and_writes_every_row(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench.py"), "--smoke", "--json", str(out)],
                          env=clean_env(), capture_output=True, text=True, timeout=170, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    rows = {r["id"]: r for r in results["rows"]}
    assert set(rows) == ROWS
    broken = {rid: r["result"] for rid, r in rows.items() if r["verdict"] == "error"}
    assert not broken
    assert all(r["verdict"] in ("ok", "OVER", "n/a", "-") for r in rows.values())
    assert results["machine"]["nproc"] >= 1
    for r in rows.values():
        assert "| %s |" % r["row"] in proc.stdout
