"""scripts/gpu-check's pieces that need no GPU: reading nvidia-smi, comparing it with the NVML probe,
reading a job's output and the node records; and its one line on a host without a GPU."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher.core.model import GpuInfo

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"


def _load():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


gc = _load()

SMI = """0, NVIDIA H200, 143771, 561, 0
1, NVIDIA H200, 143771, 20480, 97
2, NVIDIA A100-SXM4-40GB, 40960, [N/A], [N/A]
"""

SMI_L = """GPU 0: NVIDIA H200 (UUID: GPU-8e1f6c2a-1b2c-3d4e-5f60-718293a4b5c6)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-1111-2222-3333-444444444444)
  MIG 3g.20gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)
"""


def test_nvidia_smi_csv_is_read_row_by_row_with_missing_figures_as_none():
    rows = gc.parse_smi_gpus(SMI)
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[1] == {"index": 1, "name": "NVIDIA H200", "mem_total_mib": 143771.0, "mem_used_mib": 20480.0,
                       "util_pct": 97.0}
    assert rows[2]["name"] == "NVIDIA A100-SXM4-40GB" and rows[2]["mem_used_mib"] is None
    assert gc.parse_smi_gpus("\n") == []


def test_nvidia_smi_list_gives_each_gpu_its_uuid_and_leaves_mig_devices_out():
    assert gc.parse_smi_uuids(SMI_L) == {0: "GPU-8e1f6c2a-1b2c-3d4e-5f60-718293a4b5c6",
                                         1: "GPU-00000000-1111-2222-3333-444444444444"}


def _h200(index: int, **kw) -> GpuInfo:
    fields = dict(name="NVIDIA H200", mem_total_gb=150.8, mem_used_gb=0.59, util_pct=0.0) | kw
    return GpuInfo(index=index, **fields)


def test_the_nvml_probe_agrees_with_nvidia_smi_within_two_percent():
    smi = gc.parse_smi_gpus(SMI)[:2]
    ok, detail = gc.compare_gpus([_h200(0), _h200(1, mem_used_gb=21.5, util_pct=90.0)], smi)
    assert ok, detail
    assert detail.startswith("2 GPU(s) (NVIDIA H200, 150.8 GB)")


def test_a_mismatch_names_the_gpu_and_the_figures():
    smi = gc.parse_smi_gpus(SMI)[:2]
    ok, detail = gc.compare_gpus([_h200(0, name="NVIDIA H100"), _h200(1, mem_total_gb=80.0, util_pct=97.0)], smi)
    assert not ok
    assert "GPU 0 name 'NVIDIA H100' != 'NVIDIA H200'" in detail and "GPU 1 memory 80 GB != 150.8 GB" in detail
    ok, detail = gc.compare_gpus([_h200(0)], smi)
    assert not ok and detail == "NVML sees GPUs [0], nvidia-smi [0, 1]"
    ok, detail = gc.compare_gpus([_h200(0), _h200(1, mem_used_gb=0.5, util_pct=97.0)], smi)
    assert not ok and "GPU 1 used 0.5 GB != 21.47 GB" in detail


def test_the_cuda_programs_output_and_the_node_records_are_read():
    out = gc.key_values("noise\nCUDA_VISIBLE_DEVICES=3\nDEVICE_COUNT=1\nDEVICE_UUID=GPU-ab\nALLOCATED=1 GiB through x\n")
    assert out == {"CUDA_VISIBLE_DEVICES": "3", "DEVICE_COUNT": "1", "DEVICE_UUID": "GPU-ab",
                   "ALLOCATED": "1 GiB through x"}
    nodes = [{"name": "other", "alive": True, "gpus": [{"index": 0, "blocked": "zombie: x"}]},
             {"name": "gpucheck", "alive": True, "gpus": [{"index": 0, "blocked": "zombie: pid 7 (python) holds it"},
                                                          {"index": 1, "blocked": None}]}]
    assert gc.blocked(nodes, "gpucheck") == {0: "zombie: pid 7 (python) holds it"}
    assert [g["index"] for g in gc.node_gpus(nodes, "gpucheck")] == [0, 1]
    assert gc.node_gpus([dict(nodes[1], alive=False)], "gpucheck") == [] == gc.node_gpus(nodes, "absent")


def test_the_cuda_program_compiles():
    compile(gc.CUDA_PROGRAM, "job.py", "exec")


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi"):
        return True
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_has_gpu(), reason="this host has an NVIDIA GPU: gpu-check would run its checks")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("\n") == 1 and p.stdout.startswith("gpu-check: no NVIDIA GPU on this host"), p.stdout
    assert p.stderr == ""
