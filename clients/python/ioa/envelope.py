"""IoA's message envelope and its enums, as they travel on the wire.

Design: an envelope is IoA's ``AgentMessage`` with a few fields of ours
(``id``, ``timestamp``, ``task_status``, ``tasks``, ``ioa_*`` markers).
The hub forwards any field it does not know unchanged, and IoA's clients
add fields too, so an ``Envelope`` keeps whatever it did not declare in
``extra`` and writes it back out: a program that reads an envelope and
posts a modified copy never loses a field.  Unset fields (``None``) are
left out of the JSON rather than sent as IoA's defaults: an envelope
without a ``type`` is a plain chat line to floor control, while
``type: 0`` is IoA's DEFAULT, and the SDK should not decide that for you.
Enum fields are parsed into the IntEnums when the integer is
known and kept as plain ints otherwise, so a newer hub cannot make
parsing fail.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Iterable, Mapping


class MessageType(enum.IntEnum):
    """IoA's ``CommunicationType``, with IoA's integers."""

    DEFAULT = 0
    PROPOSAL = 1
    VOTE = 2
    VOTING_RESULT = 3
    DISCUSSION = 4
    SYNC_TASK_ASSIGNMENT = 5
    ASYNC_TASK_ASSIGNMENT = 6
    INFORM_TASK_RESULT = 7
    INFORM_TASK_PROGRESS = 8
    PAUSE = 9
    CONCLUDE_GROUP_DISCUSSION = 10
    CONCLUSION = 11


class State(enum.IntEnum):
    """IoA's ``CommunicationState``; IoA's clients only act on DISCUSSION."""

    TEAMUP = 0
    DISCUSSION = 1
    VOTE = 2
    EXECUTION = 3


# IoA's fields in declaration order, then ours that the SDK reads.
_FIELDS = ("id", "sender", "timestamp", "comm_id", "content", "next_speaker",
           "state", "type", "proposal_id", "goal", "team_members",
           "team_up_depth", "task_id", "task_desc", "task_conclusion",
           "task_abstract", "triggers", "updated_plan",
           "is_collaborative_planning_enabled", "max_turns", "task_status",
           "tasks")


def _enum(cls: type[enum.IntEnum], v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            return cls(v)
        except ValueError:
            return v
    return v


@dataclasses.dataclass
class Envelope:
    """One envelope of a room.

    ``id``, ``sender`` and ``timestamp`` are set by the hub (a client's
    ``id`` is dropped; with authentication the sender is the token's
    subject).  Fields the class does not declare are in ``extra``.
    """

    comm_id: str | None = None
    content: str | None = None
    type: MessageType | int | None = None
    next_speaker: str | list[str] | None = None
    state: State | int | None = None
    id: str | None = None
    sender: str | None = None
    timestamp: int | None = None
    proposal_id: str | None = None
    goal: str | None = None
    team_members: list[dict[str, Any]] | None = None
    team_up_depth: int | None = None
    task_id: str | None = None
    task_desc: str | None = None
    task_conclusion: str | None = None
    task_abstract: str | None = None
    triggers: list[str] | None = None
    updated_plan: str | None = None
    is_collaborative_planning_enabled: bool | None = None
    max_turns: int | None = None
    task_status: str | None = None
    tasks: dict[str, dict[str, Any]] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Envelope":
        """Build from decoded JSON; unknown fields go to ``extra``."""
        known = {k: d[k] for k in _FIELDS if k in d}
        extra = {k: v for k, v in d.items() if k not in known}
        env = cls(**known, extra=extra)
        env.type = _enum(MessageType, env.type)
        env.state = _enum(State, env.state)
        return env

    def to_dict(self) -> dict[str, Any]:
        """The JSON object to send: set fields, then ``extra``."""
        out: dict[str, Any] = {}
        for k in _FIELDS:
            v = getattr(self, k)
            if v is not None:
                out[k] = int(v) if isinstance(v, enum.IntEnum) else v
        out.update(self.extra)
        return out

    def get(self, key: str, default: Any = None) -> Any:
        """Any field by name, declared or extra."""
        if key in _FIELDS:
            v = getattr(self, key)
            return default if v is None else v
        return self.extra.get(key, default)

    def addressees(self) -> list[str]:
        """``next_speaker`` as a list (a string is a one-name list)."""
        ns = self.next_speaker
        if isinstance(ns, str):
            return [ns] if ns else []
        if isinstance(ns, Iterable):
            return [n for n in ns if isinstance(n, str)]
        return []

    def addresses(self, name: str) -> bool:
        """Whether ``next_speaker`` names ``name`` (exactly, not as IoA's
        substring test on a plain string)."""
        return name in self.addressees()


def parse_id(sid: str) -> tuple[int, int]:
    """A Redis Stream id ``<ms>-<seq>`` as a tuple that orders correctly
    (string comparison does not: ``"9-0" > "10-0"``)."""
    ms, _, seq = sid.partition("-")
    return int(ms), int(seq or 0)
