"""Fixtures for API generation tests: the nasty server's API, generated once per module."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from servers.launch import nasty_params

from ipybox import CodeExecutor, generate_mcp_sources
from ipybox.tool_exec import registry


@dataclass
class GeneratedApi:
    """A generated package `root/name/`, importable in-process as `name` (a unique name)."""

    root: Path
    name: str
    params: dict[str, Any]
    modules: list[str]

    @property
    def package_dir(self) -> Path:
        return self.root / self.name

    def module(self, module: str) -> ModuleType:
        return importlib.import_module(f"{self.name}.{module}")

    def register(self) -> None:
        registry.register(self.name, self.params)


@contextlib.contextmanager
def generated_api(
    tmp_path_factory: pytest.TempPathFactory, prefix: str, params: dict[str, Any]
) -> Iterator[GeneratedApi]:
    """Generate the API of the server `params` under a unique name, importable in the block."""
    root = tmp_path_factory.mktemp("apis")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYBOX_STATE_DIR", str(tmp_path_factory.mktemp("generation-state")))
        modules = asyncio.run(generate_mcp_sources(name, params, root))
    sys.path.insert(0, str(root))
    try:
        yield GeneratedApi(root, name, params, modules)
    finally:
        sys.path.remove(str(root))
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]


@pytest.fixture(scope="module")
def nasty_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeneratedApi]:
    with generated_api(tmp_path_factory, "nasty", nasty_params()) as api:
        yield api


@pytest.fixture
async def nasty_executor(nasty_api: GeneratedApi, _state_dir: Path) -> AsyncIterator[CodeExecutor]:
    """An executor whose kernel can `import <nasty_api.name>`; the server is registered."""
    nasty_api.register()
    async with CodeExecutor(working_dir=nasty_api.root, spare_kernel=False) as executor:
        yield executor
