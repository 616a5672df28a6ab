"""The seccomp filter every sandbox gets: Linux's key management system calls fail there.

Kernel keyrings are shared across namespaces: a process inherits its parent's session keyring
(a login's, where `pam_keyinit` made one; Kerberos keeps tickets there, with `KEYRING:` caches,
and tools cache passwords and keys in it), and bubblewrap neither replaces it nor filters the
calls. A sandboxed kernel could read what the host keeps there, plant or change keys that host
programs of the same login then trust, and, through `request_key`, have the host run
`/sbin/request-key` upcalls outside the sandbox (a `dns_resolver` key resolves a name of the
kernel's choosing through the host's network). The launcher (`ipybox.sandbox.launcher`) has
bubblewrap install this filter (`--seccomp`), which makes `add_key`, `request_key` and `keyctl`
fail with `EPERM` for every process in the sandbox, as Docker's default seccomp profile does.
"""

from __future__ import annotations

import errno
import platform
import struct

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_DENY = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_ARCH_OFFSET, _NR_OFFSET = 4, 0  # in struct seccomp_data
_X32_BIT = 0x40000000

#: Per machine: each system call ABI its processes can use (audit arch, a mask for the call
#: number, and the numbers of add_key, request_key and keyctl). A 64-bit x86 process can also
#: make i386 calls (`int 0x80`) and x32 ones (numbers with bit 30 set), so all are covered.
_ABIS: dict[str, tuple[tuple[int, int, tuple[int, ...]], ...]] = {
    "x86_64": (
        (0xC000003E, 0xFFFFFFFF & ~_X32_BIT, (248, 249, 250)),  # x86_64 and x32
        (0x40000003, 0xFFFFFFFF, (286, 287, 288)),  # i386
    ),
    "aarch64": (
        (0xC00000B7, 0xFFFFFFFF, (217, 218, 219)),  # aarch64
        (0x40000028, 0xFFFFFFFF, (309, 310, 311)),  # arm (EABI)
    ),
}
_ABIS["amd64"] = _ABIS["x86_64"]
_ABIS["arm64"] = _ABIS["aarch64"]


def keyring_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter (classic BPF, as bubblewrap's `--seccomp` reads it) for
    `machine` (default: this one's), or None for a machine whose system call numbers ipybox
    does not know."""
    abis = _ABIS.get((machine or platform.machine()).lower())
    if abis is None:
        return None
    # each ABI: load arch, skip the block unless it matches; load the number, mask it, compare
    program: list[tuple[int, int, int, int | str]] = []  # code, jt, jf, k ("deny": resolved below)
    for arch, mask, numbers in abis:
        program.append((_LD_W_ABS, 0, 0, _ARCH_OFFSET))
        program.append((_JEQ_K, 0, 3 + len(numbers), arch))  # else: past this block
        program.append((_LD_W_ABS, 0, 0, _NR_OFFSET))
        program.append((_AND_K, 0, 0, mask))
        program += [(_JEQ_K, 0, 0, f"deny:{nr}") for nr in numbers]
        program.append((_RET_K, 0, 0, _ALLOW))
    program.append((_RET_K, 0, 0, _ALLOW))
    deny = len(program)
    program.append((_RET_K, 0, 0, _DENY))
    compiled = b""
    for index, (code, jt, jf, k) in enumerate(program):
        if isinstance(k, str):  # a call number: to `deny` if equal
            jt, k = deny - index - 1, int(k.removeprefix("deny:"))
        compiled += struct.pack("=HBBI", code, jt, jf, k)
    return compiled
