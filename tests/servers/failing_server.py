"""A stdio MCP server that fails before its handshake, the way a misconfigured one does.

`failing_server.py COUNT NAME...` writes COUNT numbered lines to stderr, then one line per NAME
with that variable's value in its environment (or `unset`), and exits with status 3.
"""

import os
import sys

count, names = int(sys.argv[1]), sys.argv[2:]
for i in range(1, count + 1):
    sys.stderr.write(f"log line {i}\n")
for name in names:
    sys.stderr.write(f"{name}={os.environ.get(name, 'unset')}\n")
sys.exit(3)
