"""`python -m ipybox.mcp_server`: same as the `ipybox` command."""

from ipybox.cli import main

if __name__ == "__main__":
    main()
