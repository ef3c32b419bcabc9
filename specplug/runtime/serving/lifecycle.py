"""Graceful shutdown for the embedded server: drain in-flight requests, the way production servers stop.

On SIGTERM (or Ctrl-C) the server

1. stops accepting connections, and answers every new request on a connection still open with an
   OpenAI-shaped 503 (``server_shutting_down``, ``Retry-After``, ``Connection: close``); ``/health`` says
   ``draining`` with a 503 so load balancers take the replica out;
2. lets the requests already in flight finish, for up to the grace period (``--shutdown-grace``);
3. then ends whatever is left: a stream gets an SSE error event in OpenAI's error shape and ``data: [DONE]``,
   a non-streaming request an OpenAI-shaped 503; then uvicorn closes the connections and the app stops.

Nothing is cancelled mid-response in the normal course, so the log carries no ``CancelledError`` tracebacks.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import uvicorn

log = logging.getLogger("specplug.server")

FINISH_S = 3.0  # after the grace: time for the ended requests to write their last bytes before uvicorn cancels
POLL_S = 0.05


@dataclass
class Drain:
    """Shutdown state shared by the ASGI app (which reads it) and :class:`DrainingServer` (which drives it)."""

    draining: bool = False
    in_flight: int = 0  # requests being answered, except /health and /metrics

    def begin(self) -> None:
        self.draining = True


class DrainingServer(uvicorn.Server):
    """uvicorn with a drain phase before its own shutdown; ``abort`` ends every request still in flight."""

    def __init__(self, config: uvicorn.Config, drain: Drain, abort: Callable[[], int], grace_s: float) -> None:
        config.timeout_graceful_shutdown = int(FINISH_S) + 1  # a backstop only: the drain below ends requests
        super().__init__(config)
        self.drain = drain
        self.abort = abort
        self.grace_s = grace_s
        self.signal_name = "shutdown"

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as the signal handler: flag at once, so no request starts normally after the signal (logging
        # waits for shutdown(), outside the handler).
        if not self.drain.draining:
            self.signal_name = signal.Signals(sig).name
        self.drain.begin()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting; connections already open get 503s meanwhile
        self.drain.begin()
        log.info("%s: draining %d request(s) in flight (grace %.0f s)", self.signal_name, self.drain.in_flight,
                 self.grace_s)
        if not await self._settled(self.grace_s):
            ended = self.abort()
            log.warning("shutdown grace of %.0f s is over: ended the %d request(s) still in flight "
                        "(503, or an error event on a stream)", self.grace_s, ended)
            await self._settled(FINISH_S)
        await super().shutdown(sockets)

    async def _settled(self, within_s: float) -> bool:
        """Wait until no request is in flight, or ``within_s`` seconds; True if none is left."""
        deadline = time.monotonic() + within_s
        while self.drain.in_flight > 0 and not self.force_exit:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True
