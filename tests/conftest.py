import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipybox import CodeExecutor

pytest_plugins = ["servers.attacker"]  # the `attacker` fixture: an HTTP server that records requests

# Started with Ctrl-C ignored (in the background, under nohup, by some CI launchers), the suite
# would pass that on to every program a test starts: the tests that press Ctrl-C rely on its
# default. A handler of our own is reset to the default in the programs we start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep ipybox's server registry of every test in a temporary directory, never the user's.

    Packages with other needs override it: tests/sandbox (a state dir outside every workspace
    and a PATH with srt), tests/mcp_server (the server's own state dir, passed in its env).
    """
    state = tmp_path / "ipybox-state"
    monkeypatch.setenv("IPYBOX_STATE_DIR", str(state))
    return state


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    """A started executor whose working directory is `tmp_path`, without a spare kernel (one
    kernel start less per test; `default_executor` keeps the default's warm spare)."""
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        yield executor


@pytest.fixture
async def default_executor(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    """A started executor with the defaults (a warm spare kernel), in `tmp_path`."""
    async with CodeExecutor(working_dir=tmp_path) as executor:
        yield executor


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-full",
        action="store_true",
        default=False,
        help="run the reliability soak and load tests at full scale (10,000 executions) instead of CI counts",
    )
