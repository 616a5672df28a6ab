"""The installed ipybox's version, read from its package metadata."""

from __future__ import annotations

import importlib.metadata


def _version() -> str:
    try:
        return importlib.metadata.version("ipybox")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


__version__ = _version()
