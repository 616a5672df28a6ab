"""Attacks on the executor's other kernel (its warm spare) from sandboxed kernel code.

A kernel that reached the spare could run code in it, and what it planted there would be the
state a `reset()` promises to clear. Each kernel has its own directory (connection file, ipc
sockets, temp files) and its own policy, under which the sibling directories are hidden.
"""

from __future__ import annotations

import json
from pathlib import Path

from internals import kernels, runtime_dir
from jupyter_client import BlockingKernelClient

from ipybox import CodeExecutor

from .conftest import probe, run, until

_ATTACK = """
import glob, zmq
from ipykernel import get_connection_file
from jupyter_client import BlockingKernelClient
mine = pathlib.Path(get_connection_file())
spare_file = pathlib.Path({spare_file!r})
spare_info = _json.loads({spare_info!r})
def plant(**connection):
    client = BlockingKernelClient(**connection)
    client.start_channels()
    try:
        reply = client.execute_interactive("PLANTED = 'from the other kernel'", timeout=3)
        return reply['content']['status']
    finally:
        client.stop_channels()
def raw_ipc():
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{{spare_info['ip']}}-{{spare_info['shell_port']}}")
    sock.send_multipart([b'<IDS|MSG>', b'', b'{{}}', b'{{}}', b'{{}}', b'{{}}'])
    if not sock.poll(2000):
        raise TimeoutError('no answer')
    return sock.recv_multipart()
print(_json.dumps({{
    'read': attempt(lambda: spare_file.read_text()),
    'glob': [p for p in glob.glob(str(mine.parent.parent) + '/**/*', recursive=True)
             if not p.startswith(str(mine.parent))],
    'list_parent': attempt(lambda: sorted(os.listdir(mine.parent.parent))),
    'list_spare': attempt(lambda: os.listdir(spare_file.parent)),
    'file_client': attempt(lambda: plant(connection_file=str(spare_file))),
    'ipc_client': attempt(lambda: plant(**spare_info)),
    'raw_ipc': attempt(raw_ipc),
}}))
"""


async def test_kernel_cannot_reach_its_spare(srt_available: None, workspace: Path) -> None:
    """The spare's connection file can be neither read (by its exact path, which a kernel could
    guess from its own) nor found (glob, listing); its ipc sockets cannot be connected to even
    with the connection info (key included); nothing planted there survives `reset()`."""
    async with CodeExecutor(sandbox=True, working_dir=workspace) as executor:
        await kernels(executor).spare_ready()
        runtime = runtime_dir(executor)
        assert runtime is not None
        mine = Path(
            await run(executor, "from ipykernel import get_connection_file; print(get_connection_file())")
        )
        others = [f for f in (runtime / "kernels").rglob("k*.json") if f != mine]
        assert len(others) == 1, others  # the spare's: the target exists
        spare_file = others[0]
        spare_info = json.loads(spare_file.read_text())
        host = BlockingKernelClient(connection_file=str(spare_file))  # the host can reach it
        host.load_connection_file()
        host.start_channels()
        try:
            host.wait_for_ready(timeout=30)
        finally:
            host.stop_channels()
        code = _ATTACK.format(spare_file=str(spare_file), spare_info=json.dumps(spare_info))
        result = await probe(executor, code, timeout=120)
        await executor.reset()
        after = await run(executor, "print(globals().get('PLANTED', 'absent'))")
        await until(lambda: not mine.parent.exists())  # the retired kernel's directory goes with it
    for key in ("read", "list_spare", "file_client", "ipc_client", "raw_ipc"):
        assert not result[key].startswith("ok"), (key, result[key])
    assert result["glob"] == [], result["glob"]
    assert result["list_parent"] == f"ok: {[mine.parent.name]!r}", result["list_parent"]
    assert spare_info["key"] not in json.dumps(result)
    assert after == "absent"
