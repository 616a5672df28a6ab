"""Tool execution: the tool server, its kernel-side runner, and the approval of each call."""
