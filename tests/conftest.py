from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipybox import CodeExecutor


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    """A started executor (with a warm spare kernel) whose working directory is `tmp_path`."""
    async with CodeExecutor(working_dir=tmp_path) as executor:
        yield executor
