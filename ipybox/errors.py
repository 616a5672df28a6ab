"""`IpyboxError`: the common base of the errors ipybox raises itself.

Each error keeps the built-in base it always had (`SandboxError` is still a `RuntimeError`,
`ServerParamsError` still a `ValueError`), so existing `except` clauses work unchanged, and
`except IpyboxError` catches everything ipybox raised on purpose. Standard library only: it is
also imported inside kernels (by the generated tool API's client).
"""

from __future__ import annotations


class IpyboxError(Exception):
    """Base of ipybox's own exceptions."""
