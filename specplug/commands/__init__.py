"""CLI commands, one module each; specplug.cli loads them lazily by name."""
