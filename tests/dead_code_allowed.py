"""What vulture cannot see being used (tests/test_dead_code.py reads this file with the package).

Each name says why it is alive; anything else vulture reports in ipybox/ is dead code.
"""

# ruff: noqa: B018, F821
# mypy: ignore-errors

# Called in a remote kernel by the code that the gateway backend's transfers send as text.
begin_upload
write_chunk
end_upload
make_dir
read_chunk

# Public API of the generated tool modules' results, used by kernel code and IPython's display.
_._repr_png_
_.save
uri
# Public helper of the SDK (the spec's approval examples use it).
arun
# pydantic reads it.
model_config
# Part of functools.lru_cache keys: the file's version.
mtime_ns
# The mcp SDK's TokenVerifier protocol.
_.verify_token
# Awaited by tests and benchmarks that need the warm spare up before they measure.
_.spare_ready
# Public API of the session notebooks (docs/notebooks.md): the SDK's save, what a resume reports,
# and the approval channel's view of whether tool calls are granted without asking.
_.save_notebook
cells_run
cells_skipped
_.automatic
# Tests ask it whether generate_mcp_sources registered a server (the tool server asks is_registered_in).
is_registered
# asyncio calls them on a Protocol (the kernel relay's ends).
_.connection_made
_.data_received
_.pause_writing
_.resume_writing
_.connection_lost
# ipykernel's post_handler_hook restores the SIGINT handler that pre_handler_hook saved here.
_.saved_sigint_handler
