"""An agent's WebSocket to the hub, ``/ws/{name}``, that survives restarts.

Design: the hub delivers every envelope of every room the agent is in, and
each carries its room's Stream id.  The connection keeps the last id it
handed to the program per room (``position``) and, after any disconnect,
reconnects with ``?wait_resume=1`` and a first frame
``{"op":"resume","rooms":{...},"since":...}``: the hub loads the rooms only
once it has read that frame, so every room continues exactly after the
last envelope the program saw.  ``wait_resume`` rather than ``resume=`` in
the URL because a position grows with the rooms and a URL does not.

``since`` covers the rooms the position does not name (nothing received
from them yet, or created while away): it is the moment the first
connection opened, taken as the earlier of this host's clock and the
hub's ``Date``, so that a room that stayed silent until the outage still
delivers what was posted during it.  Earlier is harmless there: nothing
from those rooms was delivered, so nothing can come twice.

Duplicates are dropped here as well, whatever the hub does: an envelope
whose id is not after its room's position is counted (``duplicates``)
and skipped.  The position moves when ``recv`` returns the envelope, so
what a program was handed is what it has seen.

Reconnects back off exponentially (0.2 s doubling up to ``backoff_max``,
half of each delay random, so agents that lost the same hub do not all
return at once); the backoff restarts after a connection stayed up 2 s.
A refused handshake is not retried when the hub said 4xx (a bad token, a
bad name): the hub's error is raised instead.  websockets does not expose
the refusal's body, so the SDK asks again over plain HTTP with the same
token for the hub's JSON error.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import urllib.parse
from typing import Any, AsyncIterator, Callable

import websockets
import websockets.exceptions

from .client import Client
from .envelope import Envelope, parse_id
from .errors import HubError, Unreachable

log = logging.getLogger("ioa")

BACKOFF_MIN = 0.2
STABLE = 2.0       # seconds up before the backoff restarts
MAX_SIZE = 8 * 1024 * 1024   # well above the hub's ioa_max_message_size


class Connection:
    """``/ws/{name}`` with resume.

    ``position`` ({comm_id: last id}) and ``since`` may come from an
    earlier run (saved with ``position`` after handling) to resume across
    processes.  ``on_error`` receives the hub's error frames as HubError
    (the default logs them): they answer envelopes sent with ``send``.
    """

    def __init__(self, hub: str, name: str, token: str | None = None, *,
                 position: dict[str, str] | None = None,
                 since: str | None = None, backoff_max: float = 30.0,
                 on_error: Callable[[HubError], Any] | None = None) -> None:
        self.hub = hub.rstrip("/")
        self.name = name
        self.token = token
        self.position: dict[str, str] = dict(position or {})
        self.since = since
        self.backoff_max = backoff_max
        self.on_error = on_error or (lambda e: log.warning(
            "%s: the hub refused an envelope: %s", name, e))
        self.duplicates = 0      # envelopes dropped as already seen
        self.connects = 0        # connections opened (1 + reconnects)
        self._ws: Any = None
        self._opened = 0.0
        self._attempt = 0
        self._closed = False

    # -- opening ----------------------------------------------------------

    def _url(self, resume: bool) -> str:
        base = self.hub.replace("http://", "ws://", 1) \
                       .replace("https://", "wss://", 1)
        url = f"{base}/ws/{urllib.parse.quote(self.name, safe='')}"
        return url + "?wait_resume=1" if resume else url

    async def connect(self) -> None:
        """Open the connection (the first time, or again).

        Raises AuthError/HubError when the hub refuses the handshake, and
        Unreachable when it cannot be reached."""
        resume = bool(self.position or self.since)
        headers = [("Authorization", "Bearer " + self.token)] \
            if self.token else []
        started = time.time()
        try:
            ws = await websockets.connect(self._url(resume),
                                          extra_headers=headers,
                                          max_size=MAX_SIZE,
                                          open_timeout=10)
        except websockets.exceptions.InvalidStatusCode as e:
            raise await self._refusal(e.status_code) from None
        except (OSError, asyncio.TimeoutError,
                websockets.exceptions.WebSocketException) as e:
            raise Unreachable(f"{self._url(resume)}: {e}") from None
        if resume:
            frame: dict[str, Any] = {"op": "resume", "rooms": self.position}
            if self.since:
                frame["since"] = self.since
            await ws.send(json.dumps(frame))
        else:
            self.since = self._since(started, ws)
        self.connects += 1
        self._ws = ws
        self._opened = time.monotonic()

    @staticmethod
    def _since(started: float, ws: Any) -> str:
        ms = int(started * 1000)
        date = ws.response_headers.get("Date")
        if date:
            try:
                ms = min(ms, int(email.utils.parsedate_to_datetime(date)
                                 .timestamp() * 1000))
            except (TypeError, ValueError):
                pass
        return f"{ms}-0"

    async def _refusal(self, status: int) -> Exception:
        if status >= 500 or status == 429:
            return Unreachable(f"handshake answered {status}")
        c = Client(self.hub, self.token, timeout=10)
        try:
            await asyncio.to_thread(
                c.request, "GET",
                f"/ws/{urllib.parse.quote(self.name, safe='')}")
        except HubError as e:
            if e.status == status:
                return e
        except Unreachable:
            pass
        return HubError.from_body(status, f"handshake refused ({status})")

    async def _reconnect(self) -> None:
        while not self._closed:
            if self._opened and time.monotonic() - self._opened >= STABLE:
                self._attempt = 0
            self._opened = 0.0
            delay = min(self.backoff_max, BACKOFF_MIN * 2 ** self._attempt)
            self._attempt += 1
            await asyncio.sleep(delay / 2 + random.random() * delay / 2)
            try:
                await self.connect()
                return
            except Unreachable as e:
                log.info("%s: reconnecting: %s", self.name, e)
            except HubError as e:
                if not e.retryable:
                    raise
                log.info("%s: reconnecting: %s", self.name, e)
        raise Unreachable("connection closed")

    # -- traffic ----------------------------------------------------------

    async def recv(self) -> Envelope:
        """The next envelope of any of the agent's rooms, reconnecting and
        resuming as needed; our own frames (errors, acks) are handled
        here.  Raises AuthError/HubError if a reconnect is refused."""
        while True:
            if self._ws is None:
                await self._reconnect()
            try:
                raw = await self._ws.recv()
            except websockets.exceptions.ConnectionClosed as e:
                log.info("%s: connection lost (%s); resuming", self.name, e)
                self._ws = None
                if self._closed:
                    raise Unreachable("connection closed") from None
                continue
            try:
                doc = json.loads(raw)
            except ValueError:
                log.warning("%s: not JSON from the hub: %.100r", self.name,
                            raw)
                continue
            if not isinstance(doc, dict):
                continue
            if "op" in doc:
                if doc["op"] == "error":
                    self.on_error(HubError.from_body(None, doc))
                continue
            env = Envelope.from_dict(doc)
            if env.id and env.comm_id:
                last = self.position.get(env.comm_id)
                if last and parse_id(env.id) <= parse_id(last):
                    self.duplicates += 1
                    continue
                self.position[env.comm_id] = env.id
            return env

    def __aiter__(self) -> AsyncIterator[Envelope]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Envelope]:
        while not self._closed:
            try:
                yield await self.recv()
            except Unreachable:
                if self._closed:
                    return
                raise

    async def send(self, envelope: Envelope | dict[str, Any]) -> None:
        """Send one envelope over the WebSocket.  Fire and forget: the
        echo (or an error frame, to ``on_error``) comes back through
        ``recv``.  ``Client.post`` is the call that answers with the id.
        Raises Unreachable while disconnected."""
        body = envelope.to_dict() if isinstance(envelope, Envelope) \
            else envelope
        if self._ws is None:
            raise Unreachable("not connected")
        try:
            await self._ws.send(json.dumps(body))
        except websockets.exceptions.ConnectionClosed as e:
            raise Unreachable(f"connection lost: {e}") from None

    async def close(self) -> None:
        """Close for good; a pending ``recv`` ends with Unreachable and
        ``async for`` loops end."""
        self._closed = True
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    async def __aenter__(self) -> "Connection":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
