"""`Service`: the base of ipybox's objects that have a start and a stop."""

from __future__ import annotations

from typing import Self


class Service:
    """Something started by `start()` and ended by `stop()`; `async with` does both, the stop also
    on errors and cancellation."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
