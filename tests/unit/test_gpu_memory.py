"""Per-process GPU memory from the probes (workers/gpu.py), as the agent's peak tracking reads it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

from workers.gpu import FAKE_MEM_VAR, FakeProbe, NvmlProbe


def test_a_fake_jobs_leader_reports_the_memory_its_environment_gives():
    env = dict(os.environ, DISPATCH_NODE="memnode", CUDA_VISIBLE_DEVICES="0,1", **{FAKE_MEM_VAR: "3.5"})
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"],
                              env=env, start_new_session=True)
    try:
        probe = FakeProbe("2xA100-40GB", "memnode")
        deadline = time.monotonic() + 10
        while len(probe.processes().get(0, [])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        mem = probe.memory()
        assert mem[0][leader.pid] == 3.5 and mem[1][leader.pid] == 3.5
        assert sorted(mem[0].values()) == [0.0, 3.5]  # its child is in the lists, counted once: by the leader
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def test_nvml_memory_counts_a_process_in_both_lists_once_and_skips_unknown_figures():
    class NVMLError(Exception):
        pass

    def proc(pid, used):
        return SimpleNamespace(pid=pid, usedGpuMemory=used)

    compute = {0: [proc(10, 2_000_000_000), proc(11, None)], 1: [proc(12, 500_000_000)]}
    graphics = {0: [proc(10, 2_000_000_000)]}

    def raise_on_1(h):
        if h == 1:
            raise NVMLError()
        return graphics.get(h, [])

    nv = SimpleNamespace(NVMLError=NVMLError, nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
                         nvmlDeviceGetComputeRunningProcesses=lambda h: compute[h],
                         nvmlDeviceGetGraphicsRunningProcesses=raise_on_1)
    probe = object.__new__(NvmlProbe)
    probe._nvml = nv
    assert probe.memory() == {0: {10: 2.0}, 1: {12: 0.5}}


def test_another_agents_fake_job_on_a_node_of_the_same_name_is_not_this_ones():
    # two `dispatch up`s on one machine: both nodes are named after the host, both namespaces "dispatch";
    # the jobs of one must not show on the other's fake GPUs as zombies. By hand (no mark): still ours.
    base = dict(os.environ, DISPATCH_NODE="samehost", DISPATCH_NAMESPACE="dispatch", CUDA_VISIBLE_DEVICES="0")
    theirs = dict(base, DISPATCH_JOB_SOCKET="/tmp/other-home/node/samehost/run/jobs.sock", CUDA_VISIBLE_DEVICES="1")
    mine = dict(base, DISPATCH_JOB_SOCKET="/tmp/my-home/node/samehost/run/jobs.sock", CUDA_VISIBLE_DEVICES="2")
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True)
             for env in (base, theirs, mine)]
    try:
        probe = FakeProbe("4xA100-40GB", "samehost", "dispatch", "/tmp/my-home/node/samehost/run/jobs.sock")
        deadline = time.monotonic() + 10
        while len(probe.processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        held = probe.processes()
        assert held.get(0) == [procs[0].pid] and held.get(2) == [procs[2].pid] and 1 not in held, held
    finally:
        for p in procs:
            os.killpg(p.pid, 9)
            p.wait()
