"""The SDK's exceptions.

Design: the hub answers every refusal with the same JSON object, over HTTP
and as WebSocket error frames: ``{"code","message","field"}`` (see the
README's Endpoint reference).  ``HubError`` carries those three, plus the
HTTP status, so a program can branch on ``code`` (``not_member``,
``not_your_turn``, ...) without parsing text.  Refusals of the token get
their own subclass because they are the one error a long-running agent
must not retry: reconnecting with the same token only repeats them.
"""

from __future__ import annotations

from typing import Any


class IoaError(Exception):
    """Base class of every exception the SDK raises."""


class HubError(IoaError):
    """The hub refused a request; ``code``, ``message`` and ``field`` are
    the hub's, ``status`` the HTTP status (None for a WebSocket frame)."""

    def __init__(self, status: int | None, code: str, message: str,
                 field: str | None = None,
                 body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.body = body or {}
        where = f" (field: {field})" if field else ""
        head = f"{status} " if status else ""
        super().__init__(f"{head}{code}: {message}{where}")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (429, 5xx:
        ``rate_limited``, ``redis_unavailable``, ``store_full``, ...)."""
        return self.status is not None and (self.status == 429
                                            or self.status >= 500)

    @classmethod
    def from_body(cls, status: int | None, body: Any) -> "HubError":
        """From the hub's JSON error (or whatever came instead)."""
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            code, msg = body["code"], str(body.get("message", ""))
            field = body.get("field")
            field = field if isinstance(field, str) else None
        else:
            code, msg, field = f"http_{status}", str(body)[:200], None
            body = None
        klass = AuthError if status in (401, 403) or code in (
            "unauthorized", "forbidden") else cls
        return klass(status, code, msg, field, body)


class AuthError(HubError):
    """401 ``unauthorized`` (no token, or one that does not verify) or 403
    ``forbidden`` (a token without the scope or the name)."""


class Unreachable(IoaError):
    """The hub could not be reached, or the connection broke before an
    answer; trying again later may work."""
