"""Tests of the `ipybox` command line."""
