"""Small helpers for applications built on ipybox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def arun(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking function (e.g. `input`) in a worker thread without blocking the event loop."""
    return await asyncio.to_thread(func, *args, **kwargs)
