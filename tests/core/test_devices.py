import pytest

from theanompi.core.devices import Device, check_local_devices, count_local_gpus, parse_devices
from theanompi.core.errors import ConfigError


def test_cpu_list():
    assert parse_devices("cpu0,cpu1") == [Device("cpu", 0), Device("cpu", 1)]
    assert parse_devices(["cpu0", "cpu3"]) == [Device("cpu", 0), Device("cpu", 3)]


def test_host_groups_inherit_host():
    devs = parse_devices("node1:cuda0,cuda1;node2:cuda0")
    assert [str(d) for d in devs] == ["node1:cuda0", "node1:cuda1", "node2:cuda0"]
    assert [d.host for d in devs] == ["node1", "node1", "node2"]
    assert not devs[0].is_local


def test_same_device_on_two_hosts_is_fine():
    assert len(parse_devices("a:cuda0;b:cuda0")) == 2


@pytest.mark.parametrize("spec, fragment", [
    ("cpu0,cpu0", "listed twice"),
    ("localhost:cpu1,cpu1;cpu1", "listed twice"),
    ("gpu0", "'gpu0' is not a device"),
    ("cpu0,,cpu1", "empty device"),
    ("cpu", "'cpu' is not a device"),
    ("", "empty entry"),
    ("bad host:cpu0", "host name"),
    (42, "must be a string"),
])
def test_bad_devices(spec, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_devices(spec)


def test_cuda_without_gpu_fails_clearly():
    if count_local_gpus() > 0:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="needs a CUDA GPU but no CUDA GPU is visible"):
        check_local_devices(parse_devices("cuda0"))


def test_remote_cuda_is_not_checked_locally():
    check_local_devices(parse_devices("othernode:cuda0"))
