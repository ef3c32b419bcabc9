"""Jinja2 templates, one folder per stack, each file named for the lowest stack version it serves."""
