"""Device passthrough (`ipybox.sandbox.devices`): the GPU discovery against a made-up NVIDIA
driver layout, a real character device passed into a real sandbox, and the refusals."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import SandboxError, check_sandbox, load_config
from ipybox.sandbox.devices import DeviceError, device_grant, parse_gpus

from .conftest import probe, sandbox_config, write_config


def fake_driver(root: Path, gpus: int = 2) -> list[str]:
    """NVIDIA's nodes, /proc entries and libraries below `root` (plain files: only their names
    matter to the discovery), GPU minors in reverse bus order; the libraries the loader knows."""
    (root / "dev/nvidia-caps").mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1"):
        (root / "dev" / name).touch()
    for i in range(gpus):
        minor = gpus - 1 - i
        (root / f"dev/nvidia{minor}").touch()
        info = root / f"proc/driver/nvidia/gpus/0000:{0x17 + i:02x}:00.0/information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-{i}aaa\nDevice Minor: \t {minor}\n")
    libs = root / "usr/local/nvidia/lib64"
    libs.mkdir(parents=True)
    (libs / "libcuda.so.550.54").touch()
    (libs / "libcuda.so.1").symlink_to("libcuda.so.550.54")
    (libs / "libnvidia-ml.so.1").touch()
    (root / "usr/local/cuda-12.4").mkdir()
    (root / "usr/local/cuda").symlink_to("cuda-12.4")
    (root / "lib").mkdir()
    (root / "lib/libcuda.so.1").symlink_to(libs / "libcuda.so.1")
    (root / "lib/libz.so.1").touch()
    return [str(root / "lib/libcuda.so.1"), str(libs / "libnvidia-ml.so.1"), str(root / "lib/libz.so.1")]


def binds(flags: tuple[str, ...]) -> dict[str, str]:
    """`--dev-bind SRC DEST` flags as {DEST: SRC}."""
    assert all(flags[i] == "--dev-bind" for i in range(0, len(flags), 3)), flags
    return {flags[i + 2]: flags[i + 1] for i in range(0, len(flags), 3)}


def test_all_gpus_of_a_fake_driver(tmp_path: Path) -> None:
    loader = fake_driver(tmp_path)
    grant = device_grant({"gpus": "all"}, tmp_path, loader)
    control = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps"]
    expected = {f"/dev/{n}": str(tmp_path / "dev" / n) for n in ["nvidia1", "nvidia0", *control]}
    assert binds(grant.flags) == expected
    libs = str(tmp_path / "usr/local/nvidia/lib64")
    assert grant.env == {"NVIDIA_VISIBLE_DEVICES": "all", "LD_LIBRARY_PATH": libs}
    assert set(grant.readable) == {
        str(tmp_path / "lib"),  # where the loader finds libcuda, and where the link leads
        libs,
        str(tmp_path / "usr/local/nvidia"),
        str(tmp_path / "usr/local/cuda"),
        str(tmp_path / "usr/local/cuda-12.4"),
    }


@pytest.mark.parametrize("spelling", ["device=1", "1,", '"device=1"', [1]])
def test_a_subset_by_index_in_bus_order(tmp_path: Path, spelling: object) -> None:
    """Index 1 is the second GPU by PCI bus (minor 1 here, as the fake numbers them backwards)."""
    fake_driver(tmp_path, gpus=3)
    grant = device_grant({"gpus": spelling}, tmp_path, [])
    gpu_nodes = {dest for dest in binds(grant.flags) if dest[-1].isdigit()}
    assert gpu_nodes == {"/dev/nvidia1"} and "/dev/nvidiactl" in binds(grant.flags)
    assert grant.env["NVIDIA_VISIBLE_DEVICES"] == "1" and grant.env["CUDA_VISIBLE_DEVICES"] == "GPU-1aaa"


def test_without_driver_proc_entries_gpus_are_counted_from_the_nodes(tmp_path: Path) -> None:
    fake_driver(tmp_path, gpus=3)
    (tmp_path / "dev/nvidia0").rename(tmp_path / "dev/nvidia10")
    for info in (tmp_path / "proc/driver/nvidia/gpus").glob("*/information"):
        info.unlink()
    grant = device_grant({"gpus": "0,2"}, tmp_path, [])
    assert {d for d in binds(grant.flags) if d[-1].isdigit()} == {"/dev/nvidia1", "/dev/nvidia10"}
    assert "CUDA_VISIBLE_DEVICES" not in grant.env  # no UUIDs known: the nodes alone select them


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("all", ()), ("ALL", ()), ("0,1", (0, 1)), ("device=0, 2", (0, 2)), ([3, 3], (3,))]
    + [("none", None), (None, None), ([], None)],
)
def test_gpu_spellings(value: object, parsed: object) -> None:
    assert parse_gpus(value) == parsed


@pytest.mark.parametrize("value", ["1", 1, "2", "gpu0", "0,x", [-1], [True], ["0"], {"all": True}, "device="])
def test_bad_gpu_spellings_say_how_to_write_them(value: object) -> None:
    with pytest.raises(DeviceError, match="gpus: .*(device=|'all')"):
        parse_gpus(value)


def test_gpus_on_a_machine_without_them_say_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match=r"no NVIDIA GPU \(looked for .*nvidiactl.*remove \"gpus\""):
        device_grant({"gpus": "all"}, tmp_path, [])
    fake_driver(tmp_path)
    with pytest.raises(DeviceError, match="asks for GPU 2, but this machine has 2"):
        device_grant({"gpus": "device=0,2"}, tmp_path, [])


def test_devices_must_be_character_devices_in_dev(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/file").touch()
    (tmp_path / "dev/out").symlink_to("/etc/passwd")
    for device, problem in [
        ("/dev/missing", "does not exist"),
        ("/dev/file", "is not a character device"),
        ("/dev/out", "leads outside /dev"),
    ]:
        with pytest.raises(DeviceError, match=f"devices: {device} {problem}"):
            device_grant({"devices": [device]}, tmp_path, [])
    for devices in ("/dev/fuse", ["/etc/passwd"], [1]):
        with pytest.raises(DeviceError, match="not a list of device paths"):
            device_grant({"devices": devices}, tmp_path, [])


def test_a_policy_file_with_a_bad_device_setting_names_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "policy.json", sandbox_config() | {"gpus": "2"})
    with pytest.raises(SandboxError, match=f"{path}: gpus: '2' is ambiguous"):
        load_config(path)


# --- a real sandbox -------------------------------------------------------------------------------

#: A character device this machine has and srt's fresh /dev lacks.
REAL_DEVICE = next((d for d in ("/dev/fuse", "/dev/net/tun") if os.path.exists(d)), None)

STAT_DEVICE = """
def kind(path):
    mode = os.stat(path).st_mode
    return "char" if stat.S_ISCHR(mode) else oct(mode)
import stat
print(_json.dumps([attempt(lambda: kind({device!r})), attempt(lambda: kind("/dev/nvidiactl"))]))
"""


@pytest.mark.skipif(REAL_DEVICE is None, reason="no /dev/fuse or /dev/net/tun on this machine")
async def test_a_real_device_reaches_the_kernel_only_when_the_policy_names_it(
    srt_available: None, workspace: Path, tmp_path: Path
) -> None:
    assert REAL_DEVICE is not None and stat.S_ISCHR(os.stat(REAL_DEVICE).st_mode)
    code = STAT_DEVICE.format(device=REAL_DEVICE)
    config = write_config(tmp_path / "policy.json", sandbox_config() | {"devices": [REAL_DEVICE]})
    options = {"working_dir": workspace, "spare_kernel": False}
    async with CodeExecutor(sandbox=True, sandbox_config=config, **options) as ex:  # type: ignore[arg-type]
        given, other = await probe(ex, code)
    assert given == "ok: 'char'" and other.startswith("FileNotFoundError")
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as ex:
        assert (await probe(ex, code))[0].startswith("FileNotFoundError")


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA GPU")
async def test_gpus_on_a_machine_without_them_fail_at_start(srt_available: None, workspace: Path) -> None:
    executor = CodeExecutor(sandbox=True, sandbox_gpus="all", working_dir=workspace, spare_kernel=False)
    with pytest.raises(SandboxError, match="no NVIDIA GPU .*sandbox_gpus"):
        await executor.start()
    with pytest.raises(SandboxError, match="no NVIDIA GPU"):
        check_sandbox(write_config(workspace.parent / "p.json", sandbox_config() | {"gpus": [0]}))
    with pytest.raises(ValueError, match="sandbox_gpus applies only to sandboxed kernels"):
        CodeExecutor(sandbox_gpus="all", working_dir=workspace)


GPU_CHECK = Path(__file__).parents[2] / "scripts" / "gpu-check"


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA GPU")
@pytest.mark.skipif(not GPU_CHECK.exists(), reason="not run from a checkout (no scripts/gpu-check)")
def test_gpu_check_says_there_is_no_gpu_here() -> None:
    """scripts/gpu-check (run by hand on GPU machines) exits with its own status where there is none."""
    for flags in ([], ["--json"]):
        done = subprocess.run([sys.executable, GPU_CHECK, *flags], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        said = json.loads(done.stdout)["message"] if flags else done.stdout
        assert "no NVIDIA GPU on this machine" in said
