"""Device passthrough: what a policy's `gpus` and `devices` settings give a sandboxed kernel.

srt gives every sandbox a fresh `/dev` with only `null`, `zero`, `random` and the like. A policy
may add (ipybox's keys, removed before srt reads the policy):

- `"gpus"`: NVIDIA GPUs, `"all"` or some by index (`"0,1"`, `"device=0,1"` as Docker spells it,
  or `[0, 1]`): their device nodes and the driver's control nodes, the driver's libraries
  readable, and the variables CUDA reads;
- `"devices"`: other character devices by path (`["/dev/dri/renderD128", "/dev/fuse"]`).

`device_grant()` turns them into bubblewrap flags (`--dev-bind` after srt's `/dev`, see
`ipybox.sandbox.launcher`), paths to allow reading, and environment variables. The discovery
looks below `root` (default `/`), so tests can run it against a made-up driver layout.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipybox._programs import which
from ipybox.errors import IpyboxError

#: The policy keys this module reads; ipybox removes them before srt sees the policy.
KEYS = ("gpus", "devices")

#: The driver's control nodes, bound when they exist (`nvidia-caps`: MIG's capability nodes).
_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")

#: Libraries of the NVIDIA driver, by the names `ldconfig -p` lists them under.
_DRIVER_LIBRARY = re.compile(r"^lib(cuda|nvidia-[\w-]+|nvcuvid|nvoptix)\.so")

#: Where GPU containers and cloud images keep the driver and the toolkit.
_DRIVER_DIRS = ("/usr/local/nvidia", "/usr/local/cuda")
_LIBRARY_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")

_TURN_OFF = (
    'remove "gpus" from the sandbox policy (or leave out --sandbox-gpus / sandbox_gpus) to run the '
    "kernel without GPUs"
)


class DeviceError(IpyboxError, ValueError):
    """A policy's `gpus` or `devices` setting is malformed or names what this machine lacks."""


@dataclass(frozen=True)
class DeviceGrant:
    """What a sandbox needs for the devices a policy asks for; empty when it asks for none."""

    #: bubblewrap flags (`--dev-bind SRC DEST`), placed after srt's fresh `/dev`.
    flags: tuple[str, ...] = ()
    #: Paths the kernel must read (driver libraries where the host keeps them).
    readable: tuple[str, ...] = ()
    #: Variables for the kernel (a `LD_LIBRARY_PATH` value goes before the kernel's own).
    env: dict[str, str] = field(default_factory=dict)


def parse_gpus(value: Any) -> tuple[int, ...] | None:
    """The GPU indices `value` names, `()` for all, or None for none; `DeviceError` if malformed.

    `"all"`; `"0,1"` or `"device=0,1"`; `[0, 1]`; `None`, `"none"`, `""` or `[]`: no GPUs. A lone
    number is refused: Docker reads `--gpus 2` as a count, so name the GPUs instead."""
    if value is None or value == [] or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, str) and value.strip().lower() == "all":
        return ()
    if isinstance(value, str):
        text = value.strip().strip("\"'")
        named = text.lower().startswith("device=")
        body = text.split("=", 1)[1] if named else text
        if not named and body.isdigit():
            raise DeviceError(
                f"gpus: {value!r} is ambiguous (in Docker a lone number is a count of GPUs); name the "
                f"GPUs by index: 'device={body}' for GPU {body}, 'all' for every GPU."
            )
        items = [i.strip() for i in body.split(",") if i.strip()]
        if items and all(i.isdigit() for i in items):
            return tuple(dict.fromkeys(int(i) for i in items))
    elif isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        return tuple(dict.fromkeys(value))
    raise DeviceError(
        f"gpus: {value!r} is not a GPU setting; use 'all', indices like '0,1' or 'device=0,1', or a "
        "JSON list of indices like [0, 1]."
    )


def check_settings(config: dict[str, Any]) -> None:
    """Raise `DeviceError` if the policy's `gpus` or `devices` setting is malformed."""
    parse_gpus(config.get("gpus"))
    devices = config.get("devices", [])
    if not isinstance(devices, list) or not all(
        isinstance(d, str) and d.startswith("/dev/") for d in devices
    ):
        raise DeviceError(
            f'devices: {devices!r} is not a list of device paths; use e.g. ["/dev/dri/renderD128"].'
        )


def device_grant(
    config: dict[str, Any], root: Path = Path("/"), loader_paths: Sequence[str] | None = None
) -> DeviceGrant:
    """What the policy `config`'s `gpus` and `devices` settings need, found below `root`.

    `loader_paths`: the libraries the dynamic loader knows (default: `ldconfig -p`'s).
    Raises `DeviceError` naming what is missing: a device that does not exist or is no
    character device, or GPUs on a machine without NVIDIA's device nodes."""
    check_settings(config)
    flags: list[str] = []
    for device in dict.fromkeys(config.get("devices", [])):
        flags += ["--dev-bind", str(_character_device(device, root)), device]
    gpus = parse_gpus(config.get("gpus"))
    if gpus is None:
        return DeviceGrant(tuple(flags))
    nvidia = _nvidia(gpus, root, loader_paths)
    return DeviceGrant((*flags, *nvidia.flags), nvidia.readable, nvidia.env)


def _character_device(device: str, root: Path) -> Path:
    """The real path of `device` below `root`, checked: a character device in `/dev`."""
    source = root / device.lstrip("/")
    real = Path(os.path.realpath(source))
    try:
        mode = source.stat().st_mode
    except OSError as e:
        raise DeviceError(
            f"devices: {device} does not exist here ({e.strerror}); remove it from the policy."
        ) from None
    if not real.is_relative_to(os.path.realpath(root / "dev")):
        raise DeviceError(f"devices: {device} leads outside /dev (to {real}); name the device node itself.")
    if not stat.S_ISCHR(mode):
        raise DeviceError(
            f"devices: {device} is not a character device; only character devices can be passed to a "
            "sandboxed kernel (never disks or other block devices)."
        )
    return real


def _nvidia(gpus: tuple[int, ...], root: Path, loader_paths: Sequence[str] | None) -> DeviceGrant:
    """The nodes of the GPUs `gpus` names (`()`: all), the driver's control nodes and libraries."""
    dev = root / "dev"
    minors = _gpu_minors(root)
    if not minors or not (dev / "nvidiactl").exists():
        raise DeviceError(
            f"the sandbox policy asks for GPUs, but this machine has no NVIDIA GPU (looked for "
            f"{dev}/nvidiactl and {dev}/nvidia0, {dev}/nvidia1, ..., which the NVIDIA driver creates); "
            f"{_TURN_OFF}."
        )
    missing = [i for i in gpus if i >= len(minors)]
    if missing:
        raise DeviceError(
            f"the sandbox policy asks for GPU {', '.join(map(str, missing))}, but this machine has "
            f"{len(minors)} (indices 0 to {len(minors) - 1}); name existing ones, or {_TURN_OFF}."
        )
    chosen = list(gpus) or list(range(len(minors)))
    nodes = [f"nvidia{minors[i][0]}" for i in chosen] + [n for n in _CONTROL_NODES if (dev / n).exists()]
    flags = [w for n in nodes for w in ("--dev-bind", str(dev / n), f"/dev/{n}")]
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(map(str, chosen)) if gpus else "all"}
    uuids = [minors[i][1] for i in chosen]
    if gpus and all(uuids):  # CUDA numbers what it sees from 0: select by UUID, not by index
        env["CUDA_VISIBLE_DEVICES"] = ",".join(u for u in uuids if u)
    library_dirs = [str(root / d.lstrip("/")) for d in _LIBRARY_DIRS if (root / d.lstrip("/")).is_dir()]
    if library_dirs:
        env["LD_LIBRARY_PATH"] = ":".join(library_dirs)
    return DeviceGrant(tuple(flags), tuple(_driver_paths(root, loader_paths)), env)


def _gpu_minors(root: Path) -> list[tuple[int, str | None]]:
    """Each GPU's device minor number and UUID, by index (PCI bus order, as `nvidia-smi` counts):
    from the driver's `/proc/driver/nvidia/gpus/*/information`, else from the `/dev/nvidiaN` nodes."""
    gpus: list[tuple[int, str | None]] = []
    info_dir = root / "proc/driver/nvidia/gpus"
    for bus in sorted(info_dir.iterdir()) if info_dir.is_dir() else []:
        try:
            text = (bus / "information").read_text()
        except OSError:
            continue
        minor = re.search(r"^Device Minor:\s*(\d+)", text, re.M)
        uuid = re.search(r"^GPU UUID:\s*(\S+)", text, re.M)
        if minor and (root / f"dev/nvidia{minor[1]}").exists():
            gpus.append((int(minor[1]), uuid[1] if uuid else None))
    if gpus:
        return gpus
    nodes = [p.name for p in (root / "dev").glob("nvidia[0-9]*") if p.name[6:].isdigit()]
    return [(n, None) for n in sorted(int(name[6:]) for name in nodes)]


def _driver_paths(root: Path, loader_paths: Sequence[str] | None) -> list[str]:
    """Where the driver's libraries and the CUDA toolkit lie: the real files of the driver
    libraries the loader knows (their folders) and the usual driver and toolkit folders."""
    paths = _ldconfig_paths() if loader_paths is None else list(loader_paths)
    found: list[str] = []
    for path in paths:
        if _DRIVER_LIBRARY.match(os.path.basename(path)) and os.path.exists(path):
            found += [os.path.dirname(path), os.path.dirname(os.path.realpath(path))]
    for folder in _DRIVER_DIRS:
        where = root / folder.lstrip("/")
        if where.exists():
            found += [str(where), os.path.realpath(where)]
    return list(dict.fromkeys(found))


def _ldconfig_paths() -> list[str]:
    """The library paths `ldconfig -p` lists (none if it cannot run)."""
    ldconfig = which("ldconfig", "/sbin:/usr/sbin:/bin:/usr/bin")
    if ldconfig is None:
        return []
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.rsplit(" => ", 1)[1].strip() for line in out.splitlines() if " => " in line]
