"""Tests of saved code actions (`ipybox.gentools`)."""
