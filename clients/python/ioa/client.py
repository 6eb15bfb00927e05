"""The hub's HTTP endpoints, as blocking calls.

Design: ``urllib`` from the standard library and one short-lived request
per call, so nothing is installed and there is no connection state to go
stale across a hub restart.  The calls block; the asyncio parts of the SDK
run them in a thread (``asyncio.to_thread``), which keeps one
implementation of each endpoint instead of a sync and an async copy.
Every non-2xx answer becomes a ``HubError`` built from the hub's JSON
error, and a network failure ``Unreachable``: callers never see urllib's
own exceptions.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable

from .envelope import Envelope
from .errors import HubError, Unreachable


class Client:
    """A client of the hub's HTTP API.

    ``hub`` is the base URL (``http://127.0.0.1:7788``); ``token`` a JWT
    sent as ``Authorization: Bearer`` (None on a hub with ``ioa_auth
    off``).  Methods return the hub's decoded JSON answer.
    """

    def __init__(self, hub: str, token: str | None = None,
                 timeout: float = 15.0) -> None:
        self.hub = hub.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- plumbing ---------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> Any:
        """One request; the decoded JSON answer (None for an empty one).

        Raises HubError (the hub refused: its code, message and field) or
        Unreachable (no answer)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.hub + path, data=data,
                                     method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = raw.decode("utf-8", "replace")
            raise HubError.from_body(e.code, doc) from None
        except (urllib.error.URLError, OSError, socket.timeout,
                http.client.HTTPException) as e:
            raise Unreachable(f"{method} {self.hub}{path}: {e}") from None
        return json.loads(raw) if raw.strip() else None

    @staticmethod
    def quote(s: str) -> str:
        """A path segment, escaped."""
        return urllib.parse.quote(s, safe="")

    # -- the registry -----------------------------------------------------

    def register(self, name: str, desc: str,
                 type: str = "Thing Assistant",
                 tags: Iterable[str] | None = None,
                 speaks_protocol: bool = False) -> dict[str, Any]:
        """POST /register (again is fine: it updates the description)."""
        body: dict[str, Any] = {"name": name, "type": type, "desc": desc,
                                "speaks_protocol": speaks_protocol}
        if tags:
            body["tags"] = list(tags)
        return self.request("POST", "/register", body)

    def retrieve(self, sender: str, capabilities: Iterable[str],
                 limit: int | None = None,
                 online_only: bool = False) -> list[dict[str, Any]]:
        """POST /retrieve_assistant: agents ranked by how well their
        description matches each capability."""
        body: dict[str, Any] = {"sender": sender,
                                "capabilities": list(capabilities),
                                "online_only": online_only}
        if limit is not None:
            body["limit"] = limit
        return self.request("POST", "/retrieve_assistant", body)

    def query(self, name: str | list[str]) -> Any:
        """POST /query_assistant: one agent (HubError ``unknown_agent``
        if unknown), or a list with None for each unknown name."""
        return self.request("POST", "/query_assistant", {"name": name})

    def teamup(self, sender: str, agent_names: Iterable[str],
               team_name: str | None = None) -> str:
        """POST /teamup: a room of ``sender`` and ``agent_names``; its
        comm_id."""
        doc = self.request("POST", "/teamup", {
            "sender": sender, "agent_names": list(agent_names),
            "team_name": team_name})
        return doc["comm_id"]

    # -- rooms ------------------------------------------------------------

    def post(self, name: str, envelope: Envelope | dict[str, Any]) -> str:
        """POST /agents/{name}/messages: one envelope, stored once the
        answer comes; its id."""
        body = envelope.to_dict() if isinstance(envelope, Envelope) \
            else envelope
        doc = self.request("POST", f"/agents/{self.quote(name)}/messages",
                           body)
        return doc["id"]

    def chat_record(self, comm_id: str, after: str | None = None,
                    limit: int | None = None) -> list[Envelope]:
        """POST /fetch_chat_record for one room: its envelopes, oldest
        first (every page, from after ``after`` if given)."""
        out: list[Envelope] = []
        while True:
            body: dict[str, Any] = {"comm_id": comm_id}
            if after:
                body["after"] = after
            if limit:
                body["limit"] = limit
            room = self.request("POST", "/fetch_chat_record", body)[comm_id]
            out += [Envelope.from_dict(e) for e in room["chat_record"]]
            after = room.get("next_after")
            if not room.get("more") or not after:
                return out

    # -- goals ------------------------------------------------------------

    def launch_goal(self, goal: str, wait: bool = False,
                    **fields: Any) -> Any:
        """POST /launch_goal (IoA's fields as keywords: team_member_names,
        max_turns, deadline_s, ...).  Without ``wait``: the 202's
        ``{"goal_id","state",...}``; with it: IoA's ``[comm_id,
        conclusion]`` once the goal concludes (HubError ``goal_failed``
        if it fails)."""
        path = "/launch_goal?wait=1" if wait else "/launch_goal?wait=0"
        return self.request("POST", path, {"goal": goal, **fields})

    def goal(self, goal_id: str) -> dict[str, Any]:
        """GET /goals/{id}: its state, conclusion, comm_id, ..."""
        return self.request("GET", f"/goals/{self.quote(goal_id)}")

    def goals(self, state: str | None = None,
              limit: int | None = None) -> dict[str, Any]:
        """GET /goals: the newest goals first."""
        q = {k: v for k, v in (("state", state), ("limit", limit)) if v}
        qs = "?" + urllib.parse.urlencode(q) if q else ""
        return self.request("GET", "/goals" + qs)

    def cancel_goal(self, goal_id: str) -> dict[str, Any]:
        """POST /goals/{id}/cancel."""
        return self.request("POST", f"/goals/{self.quote(goal_id)}/cancel")

    def health(self) -> bool:
        """Whether /health_check says ok (no token needed)."""
        try:
            return self.request("GET", "/health_check") == "ok"
        except (HubError, Unreachable):
            return False

