"""Tests of the Claude Code plugin marketplace, its plugins and the codeact skill's workflow."""
