"""Tool call approval: requests the application must accept or reject before a tool runs."""
