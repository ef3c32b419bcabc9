"""Learning acceptance from the user's own traffic: read a JSONL log of requests and completions, tokenize it
with the model's tokenizer (or a stated proxy), and replay copy-based proposers over it.

``load_traffic(path, model)`` returns a :class:`TrafficProfile`; the tokenizer is loaded only when it is called.
"""

from __future__ import annotations

from specplug.traffic.profile import TrafficProfile, file_digest, load_traffic

__all__ = ["TrafficProfile", "file_digest", "load_traffic"]
