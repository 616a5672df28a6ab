"""Saved code actions: creates `gentools/<category>/<name>/` packages from the gentools template."""

from ipybox.gentools.create import create_gentool, template_dir

__all__ = ["create_gentool", "template_dir"]
