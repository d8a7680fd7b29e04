"""The relay's HTTP server: uvicorn, with every connection bounded in time and in number.

Uvicorn waits for a request's headers as long as the client sends a byte now and then, and
accepts connections until the process runs out of file descriptors: slow clients could hold
the relay. Here each connection must have sent its whole request (headers and body) within
`read_timeout` seconds of opening (or of its previous answer), or it is closed; and at most
`max_connections` are open at once: a new one beyond that replaces the oldest connection
still sending its request (a well-formed delivery, sent at once, is never the oldest for
long), or is closed at once when every open connection is being answered. A connection
carries one request at a time, so the cap bounds the requests in the app too.
"""

from __future__ import annotations

import asyncio

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from flows.relay.limits import MAX_CONNECTIONS, READ_TIMEOUT_SECONDS

_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client has not sent its whole request yet


class BoundedH11Protocol(H11Protocol):
    """Uvicorn's h11 protocol with a deadline per request and a cap on open connections."""

    read_timeout = READ_TIMEOUT_SECONDS
    max_connections = MAX_CONNECTIONS
    _deadline: asyncio.TimerHandle | None = None
    _since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the deadline; beyond the cap, make room or close."""
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.max_connections and not self._evict_oldest_receiving():
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline."""
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed h11; once the whole request is in, stop the deadline."""
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING:
            self._disarm()  # the request is in: the app's answer is not bounded here

    def on_response_complete(self) -> None:
        """Start the deadline again for the next request on the connection."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # a kept-alive connection's next request gets the same bound

    def _arm(self) -> None:
        self._disarm()
        self._since = self.loop.time()
        self._deadline = self.loop.call_later(self.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            self.transport.close()

    def _receiving(self) -> bool:
        return self._deadline is not None and not self.transport.is_closing()

    def _evict_oldest_receiving(self) -> bool:
        """Close the oldest other connection still sending; False when there is none."""
        waiting = [c for c in self.connections
                   if c is not self and isinstance(c, BoundedH11Protocol) and c._receiving()]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c._since)
        oldest._disarm()
        oldest.transport.close()
        return True


def protocol_class(read_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """The protocol class uvicorn makes each connection's protocol from, with these bounds."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,),
                {"read_timeout": read_timeout, "max_connections": max_connections})


def server_config(app, host: str, port: int, read_timeout: float = READ_TIMEOUT_SECONDS,
                  max_connections: int = MAX_CONNECTIONS) -> uvicorn.Config:
    """Uvicorn's configuration for the relay's app, bounded as described above."""
    return uvicorn.Config(app, host=host, port=port, log_level="info", ws="none",
                          lifespan="off", http=protocol_class(read_timeout, max_connections),
                          timeout_keep_alive=max(1, int(read_timeout)))
