"""GPU probes: the fake spec, and NVML as the real library behaves without a driver."""

import pytest

from dispatcher.core.errors import InvalidRequestError, NoGpuError
from dispatcher.core.gpuspec import parse_fake_gpus
from workers.gpu import NvmlProbe


def test_fake_gpus_read_count_type_and_memory():
    gpus = parse_fake_gpus("2xA100-40GB,2xV100-16GB,T4:16")
    assert [(g.index, g.name, g.mem_total_gb) for g in gpus] == [
        (0, "NVIDIA A100-40GB", 40.0), (1, "NVIDIA A100-40GB", 40.0),
        (2, "NVIDIA V100-16GB", 16.0), (3, "NVIDIA V100-16GB", 16.0), (4, "NVIDIA T4", 16.0)]
    assert len({g.uuid for g in gpus}) == 5


@pytest.mark.parametrize("spec", ["2xA100", "", "0xA100-40GB", "2x", "2xA100:lots", "2xA100-40GB,,", "2xA100-0GB",
                                  "2x:40", "1xA100-99999999999999999999GB", "1xA 100-40GB", "2xA100-abcGB",
                                  "2xA100:0", "1xA100-\u0663GB", "99999999999999999999xA100-40GB"])
def test_a_bad_fake_gpu_spec_names_the_flag(spec):
    with pytest.raises(InvalidRequestError) as e:
        parse_fake_gpus(spec)
    assert e.value.field == "--fake-gpus"


def _nvml_works() -> bool:
    try:
        NvmlProbe().close()
        return True
    except NoGpuError:
        return False


@pytest.mark.skipif(_nvml_works(), reason="this machine has a working NVIDIA driver")
def test_without_a_driver_nvml_gives_a_clear_error_not_a_traceback():
    with pytest.raises(NoGpuError) as e:
        NvmlProbe()
    assert "NVML" in str(e.value) and "--fake-gpus" in str(e.value)


@pytest.mark.gpu
@pytest.mark.skipif(not _nvml_works(), reason="needs an NVIDIA driver")
def test_nvml_reports_every_gpu_with_name_uuid_and_memory():
    probe = NvmlProbe()
    gpus = probe.gpus()
    probe.close()
    assert gpus and all(g.name and g.uuid.startswith("GPU-") and g.mem_total_gb > 0 for g in gpus)
    assert [g.index for g in gpus] == list(range(len(gpus)))
