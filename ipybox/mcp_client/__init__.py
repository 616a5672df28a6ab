"""ipybox as an MCP client, shared by tool execution (`tool_exec`) and API generation (`mcp_apigen`).

- `params`: which transport server parameters name, and whether they are well formed;
- `placeholders`: the `${VAR}` secrets policy (where placeholders may stand, where values come from);
- `session`: opening an initialized client session, listing tools, describing errors;
- `repair`: fixing or dropping malformed tools before the SDK's models see them.
"""
