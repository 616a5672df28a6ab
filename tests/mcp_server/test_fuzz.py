"""Property-based test: random arguments to ipybox's MCP tools never crash the server.

Values are random, but what they could make ipybox do is not: commands that cannot do harm,
URLs of closed local ports, package specs the validator refuses, short timeouts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.types import CallToolResult

from .conftest import Ipybox, open_ipybox

pytestmark = pytest.mark.timeout(600)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_harmless_params = st.one_of(
    st.fixed_dictionaries(
        {"command": st.sampled_from(["/nonexistent/mcp-server", "false", "true"])},
        optional={
            "args": st.lists(st.text(max_size=10), max_size=3),
            "env": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
        },
    ),
    st.fixed_dictionaries(
        {"command": st.just(sys.executable), "args": st.just(["-c", "print('not an MCP server')"])}
    ),
    st.builds(lambda path: {"url": f"http://127.0.0.1:9/{path}"}, st.sampled_from(["mcp", "sse", "x"])),
    st.dictionaries(st.text(max_size=8), _json, max_size=3),
    _json,
)
_calls = st.one_of(
    st.tuples(
        st.just("register_mcp_server"),
        st.fixed_dictionaries({"server_name": st.text(max_size=12), "server_params": _harmless_params}),
    ),
    st.tuples(
        st.just("execute_ipython_cell"),
        st.fixed_dictionaries(
            {"code": st.text(max_size=40)},
            optional={
                "timeout": st.floats(min_value=-5, max_value=3, allow_nan=False),
                "max_output_chars": st.integers(min_value=-10, max_value=100),
            },
        ),
    ),
    st.tuples(
        st.just("install_package"),
        st.builds(lambda s: {"package_name": s}, st.text(max_size=20).map(lambda s: f"{s} ;bad spec")),
    ),
    st.tuples(st.just("reset"), st.just({})),
    st.tuples(st.sampled_from(["execute_ipython_cell", "register_mcp_server", "no_such_tool"]), _json),
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlockingPortal, Ipybox]]:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "workspace").mkdir()
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(open_ipybox(root / "workspace", root / "state")) as box:
            yield portal, box


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=_calls)
def test_random_arguments_never_crash_the_server(served: tuple[BlockingPortal, Ipybox], call: Any) -> None:
    portal, box = served
    tool, arguments = call
    result = portal.call(
        lambda: box.session.call_tool(tool, arguments if isinstance(arguments, dict) else {})
    )
    assert isinstance(result, CallToolResult)  # an answer, error or not
    follow_up = portal.call(lambda: box.session.call_tool("execute_ipython_cell", {"code": "print('alive')"}))
    assert isinstance(follow_up, CallToolResult)
    assert not follow_up.is_error and follow_up.content[0].text == "alive"  # type: ignore[union-attr]
