"""Tests of sandboxed execution under Anthropic's sandbox-runtime (`srt`)."""
