"""specplug: speculative decoding, decided, configured and launched for your serving stack."""

__version__ = "0.1.0"
