"""The chaos suite, small: agents, job processes, schedulers and Redis killed -9 at random under a
load of short jobs (scripts/chaos/run.py); every job must succeed exactly once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(400)


def chaos(tmp_path, *args) -> dict:
    out = tmp_path / "chaos.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos" / "run.py"), "--json", str(out), *args],
                       capture_output=True, text=True, timeout=380)
    assert out.exists(), f"chaos run wrote no result (exit {p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    result = json.loads(out.read_text())
    assert (result["losses"], result["doubles"]) == (0, 0), (p.stdout, p.stderr[-3000:], result)
    assert p.returncode == 0, p.stderr[-3000:]
    return result


def test_jobs_survive_killed_agents_jobs_schedulers_and_redis(tmp_path):
    result = chaos(tmp_path, "--jobs", "80", "--fault-every", "1.0", "--seed", "7")
    assert result["succeeded"] == 80
    assert result["faults_total"] >= 5, result["faults"]  # it did break things


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and iproute2")
def test_a_node_cut_off_by_a_network_partition_loses_nothing_and_runs_nothing_twice(tmp_path):
    result = chaos(tmp_path, "--jobs", "60", "--fault-every", "3.0", "--seed", "3", "--netns")
    assert result["faults"].get("network cut (far node)") == 1, result["faults"]
    assert result["succeeded"] == 60
