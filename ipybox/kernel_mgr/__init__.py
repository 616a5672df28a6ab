"""Kernel management: IPython kernel processes, their output, and a supervisor that keeps one alive."""
