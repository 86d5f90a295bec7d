"""Pulumi ComponentResources, one concern each; __main__.py wires them together."""
