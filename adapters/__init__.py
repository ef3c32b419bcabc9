"""One adapter module per serving stack; each exposes ``adapter`` (see specplug.stacks.protocol.Adapter)."""
