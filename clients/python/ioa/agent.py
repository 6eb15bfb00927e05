"""The agent runtime: a program becomes an IoA agent by writing a handler.

Design: it speaks exactly what ``ioa-agent`` (workers/agent/task.c) speaks,
so the goal workers cannot tell the two apart:

  SYNC_TASK_ASSIGNMENT (5) / ASYNC_TASK_ASSIGNMENT (6) naming us in
  next_speaker
      --> INFORM_TASK_PROGRESS (8) to the assigner, at once
      --> the handler runs, concurrently with other tasks and the inbox
      --> INFORM_TASK_RESULT (7) with task_conclusion and task_status
          (completed, partial, failed, timed_out); next_speaker "" for an
          async task, the assigner for a sync one (it waits to speak).

The task's id and text are taken as task.c takes them (``tasks[<name>]``
first, the envelope's own fields next), and the progress and result texts
open with IoA's marker sentences, which IoA clients filter by.  A handler
that raises reports ``failed`` with the exception's text: the coordinator
can then re-route the part instead of waiting for a timeout.

Envelopes go out over HTTP (``POST /agents/{name}/messages``), one at a
time in order, because that answer says the envelope is stored (the
WebSocket's echo would have to be matched up instead).  A post whose answer
was lost may have been stored: before sending it again the runtime looks
in the room's log after the assignment for our envelope of the same type
and task, so a result is never stored twice.  The inbox is the resuming
``Connection``, so an assignment posted while the hub restarts still
arrives, once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import random
import uuid
from typing import Any, Awaitable, Callable, Union

from .client import Client
from .connection import Connection
from .envelope import Envelope, MessageType, State
from .errors import HubError, Unreachable

log = logging.getLogger("ioa")

PROGRESS_TEXT = ("Team, the following task is being executed in the "
                 "background by myself.")
RESULT_TEXT = "Just a quick interruption to our current discussion."
ABSTRACT_MAX = 80
STATUS_WORDS = {"completed": "is completed", "partial": "is partly done",
                "failed": "failed", "timed_out": "timed out"}


@dataclasses.dataclass
class Task:
    """A task assigned to this agent."""

    task_id: str
    desc: str          # what to do
    abstract: str      # its title
    comm_id: str       # the room
    assigner: str      # who assigned it (the coordinator, usually)
    sync: bool         # SYNC_TASK_ASSIGNMENT: the assigner waits for it
    envelope: Envelope  # the assignment as it came

    @property
    def input(self) -> str:
        """The markdown IoA hands its tool agents (and ioa-agent's --exec
        programs read on stdin)."""
        return f"# {self.abstract}\n## Task Description\n{self.desc}\n"


@dataclasses.dataclass
class Result:
    """A handler's answer with a status: ``completed``, ``partial`` (what
    was done so far; the coordinator may hand the rest out again) or
    ``failed``.  Returning a plain string means completed."""

    text: str
    status: str = "completed"


TaskHandler = Callable[[Task], Union[str, Result, Awaitable[Union[str, Result]]]]
MessageHandler = Callable[[Envelope], Any]


class Agent:
    """An agent: registration, the resuming connection, task handling.

    >>> agent = Agent("Shouter", "uppercases text", hub=URL, token=TOKEN)
    >>> @agent.task
    ... def shout(task: Task) -> str:
    ...     return task.desc.upper()
    >>> agent.run()
    """

    def __init__(self, name: str, desc: str, *, hub: str,
                 token: str | None = None, tags: list[str] | None = None,
                 type: str = "Thing Assistant", task_timeout: float | None = None,
                 max_result: int = 48 * 1024, backoff_max: float = 30.0) -> None:
        self.name = name
        self.desc = desc
        self.tags = tags
        self.type = type
        self.task_timeout = task_timeout
        self.max_result = max_result
        self.client = Client(hub, token)
        self.conn = Connection(hub, name, token, backoff_max=backoff_max)
        self._task_handler: TaskHandler | None = None
        self._turn_handler: TaskHandler | None = None
        self._message_handlers: list[MessageHandler] = []
        self._seen_tasks: set[tuple[str, str]] = set()
        self._outbox: asyncio.Queue[tuple[dict[str, Any], str]] | None = None
        self._running: set[asyncio.Task[Any]] = set()
        self.completed = 0       # results posted

    # -- decorators -------------------------------------------------------

    def task(self, fn: TaskHandler) -> TaskHandler:
        """Register the task handler (sync or async): it receives a Task
        and returns the result text or a Result."""
        self._task_handler = fn
        return fn

    def turn(self, fn: TaskHandler) -> TaskHandler:
        """Register a discussion-turn handler: the agent then registers as
        speaking the protocol, and a DISCUSSION naming it is answered with
        the handler's text (a Task whose desc is the message)."""
        self._turn_handler = fn
        return fn

    def message(self, fn: MessageHandler) -> MessageHandler:
        """Register a handler for every envelope from others (tasks
        included), e.g. to follow the room's conversation."""
        self._message_handlers.append(fn)
        return fn

    # -- running ----------------------------------------------------------

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C); blocking."""
        try:
            asyncio.run(self.serve())
        except KeyboardInterrupt:
            pass

    async def serve(self) -> None:
        """Register, connect and handle envelopes until ``stop``."""
        await self.start()
        connects = self.conn.connects
        try:
            async for env in self.conn:
                if self.conn.connects != connects:
                    # as ioa-agent: register again after a reconnect, the
                    # registry may have gone with Redis (it is idempotent)
                    connects = self.conn.connects
                    self._spawn(asyncio.to_thread(self._register))
                await self.handle(env)
        finally:
            await self._drain()

    async def start(self) -> None:
        """Register and connect (raises HubError/AuthError if refused)."""
        await asyncio.to_thread(self._register)
        self._outbox = asyncio.Queue()
        self._spawn(self._send_loop())
        await self.conn.connect()

    def _register(self) -> None:
        try:
            self.client.register(self.name, self.desc, self.type, self.tags,
                                 self._turn_handler is not None)
        except (HubError, Unreachable) as e:
            if self.conn.connects == 0:
                raise
            log.warning("%s: could not register again: %s", self.name, e)

    async def stop(self) -> None:
        """Stop after the current envelope; running tasks are cancelled."""
        await self.conn.close()

    async def post(self, envelope: Envelope | dict[str, Any]) -> str:
        """Post an envelope (any room we are in) now; its id."""
        return await asyncio.to_thread(self.client.post, self.name, envelope)

    async def say(self, comm_id: str, content: str, **fields: Any) -> str:
        """Post a plain message (no IoA type: chat, never refused by the
        floor); its id."""
        return await self.post({"comm_id": comm_id, "content": content,
                                **fields})

    # -- the inbox --------------------------------------------------------

    async def handle(self, env: Envelope) -> None:
        """One envelope of the inbox (``serve`` calls this for each)."""
        if env.sender == self.name:
            return      # the echo of our own post
        for fn in self._message_handlers:
            r = fn(env)
            if inspect.isawaitable(r):
                await r
        if not env.addresses(self.name):
            return
        if env.type in (MessageType.SYNC_TASK_ASSIGNMENT,
                        MessageType.ASYNC_TASK_ASSIGNMENT) \
                and self._task_handler:
            self._assigned(env)
        elif env.type == MessageType.DISCUSSION and self._turn_handler:
            self._turn(env)

    def _assigned(self, env: Envelope) -> None:
        mine = (env.tasks or {}).get(self.name) or {}
        if not isinstance(mine, dict):
            mine = {}
        task_id = mine.get("task_id") or (
            env.task_id if len(env.addressees()) == 1 else None) \
            or uuid.uuid4().hex
        key = (env.comm_id or "", task_id)
        if key in self._seen_tasks:
            log.warning("%s: task %s assigned again; ignored", self.name,
                        task_id)
            return
        self._seen_tasks.add(key)
        desc = mine.get("task_desc") or env.task_desc or env.content or ""
        abstract = mine.get("task_abstract") or env.task_abstract \
            or abstract_of(desc)
        t = Task(task_id, desc, abstract, env.comm_id or "",
                 env.sender or "", env.type == MessageType.SYNC_TASK_ASSIGNMENT,
                 env)
        self._queue(self._head(t, MessageType.INFORM_TASK_PROGRESS,
                               f"{PROGRESS_TEXT}\n{t.abstract}", True), t)
        self._spawn(self._run_task(t))

    def _turn(self, env: Envelope) -> None:
        t = Task("", env.content or "", "Discussion turn", env.comm_id or "",
                 env.sender or "", True, env)
        self._spawn(self._run_task(t, turn=True))

    async def _call(self, fn: TaskHandler, t: Task) -> Result:
        try:
            if inspect.iscoroutinefunction(fn):
                coro = fn(t)
            else:
                coro = asyncio.to_thread(fn, t)
            r = await asyncio.wait_for(coro, self.task_timeout)
        except asyncio.TimeoutError:
            return Result(f"no result within {self.task_timeout} s",
                          "timed_out")
        except Exception as e:      # the handler's failure is the result
            log.warning("%s: task %s failed: %r", self.name, t.task_id, e)
            return Result(f"{type(e).__name__}: {e}", "failed")
        if inspect.isawaitable(r):
            r = await r
        if isinstance(r, Result):
            return r
        return Result("" if r is None else str(r))

    async def _run_task(self, t: Task, turn: bool = False) -> None:
        r = await self._call(self._turn_handler if turn
                             else self._task_handler, t)  # type: ignore[arg-type]
        text = cut(r.text, self.max_result)
        if turn:
            if r.status not in ("completed", "partial"):
                # as ioa-agent: a failed or timed-out turn says so, rather
                # than passing the error off as what the agent said
                text = f"(no reply: {r.status}) {text}"
            self._queue({"comm_id": t.comm_id, "content": text,
                         "next_speaker": [t.assigner],
                         "state": int(State.DISCUSSION),
                         "type": int(MessageType.DISCUSSION),
                         "reply_to": t.envelope.id}, t)
            return
        status = r.status if r.status in STATUS_WORDS else "completed"
        env = self._head(t, MessageType.INFORM_TASK_RESULT,
                         f'{RESULT_TEXT} The task "{t.abstract}" '
                         f"{STATUS_WORDS[status]}.", t.sync)
        env["task_conclusion"] = text
        env["task_status"] = status
        self._queue(env, t)

    def _head(self, t: Task, type: MessageType, content: str,
              to_assigner: bool) -> dict[str, Any]:
        # a list even for one name: IoA clients test "name in next_speaker",
        # a substring test on a plain string
        return {"comm_id": t.comm_id, "content": content,
                "next_speaker": [t.assigner] if to_assigner else "",
                "state": int(State.DISCUSSION), "type": int(type),
                "task_id": t.task_id, "task_desc": t.desc,
                "task_abstract": t.abstract}

    # -- the outbox -------------------------------------------------------

    def _queue(self, env: dict[str, Any], t: Task) -> None:
        assert self._outbox is not None, "start() first"
        self._outbox.put_nowait((env, t.envelope.id or ""))

    async def _send_loop(self) -> None:
        assert self._outbox is not None
        while True:
            env, after = await self._outbox.get()
            try:
                await self._deliver(env, after)
            finally:
                self._outbox.task_done()

    async def _deliver(self, env: dict[str, Any], after: str) -> None:
        delay = 0.2
        maybe_stored = False
        while True:
            try:
                if maybe_stored and await asyncio.to_thread(
                        self._stored, env, after):
                    return
                await self.post(env)
                if env["type"] == MessageType.INFORM_TASK_RESULT:
                    self.completed += 1
                return
            except HubError as e:
                if not e.retryable:
                    log.error("%s: the hub refused our %s in %s: %s",
                              self.name, MessageType(env["type"]).name,
                              env["comm_id"], e)
                    return
                maybe_stored = True
            except Unreachable:
                maybe_stored = True
            await asyncio.sleep(delay / 2 + random.random() * delay / 2)
            delay = min(delay * 2, 10.0)

    def _stored(self, env: dict[str, Any], after: str) -> bool:
        key, value = ("reply_to", env["reply_to"]) if "reply_to" in env \
            else ("task_id", env["task_id"])
        for e in self.client.chat_record(env["comm_id"], after=after or None):
            if e.sender == self.name and e.type == env["type"] \
                    and e.get(key) == value:
                return True
        return False

    # -- housekeeping -----------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(coro)
        self._running.add(t)
        t.add_done_callback(self._running.discard)

    async def _drain(self) -> None:
        if self._outbox is not None:
            try:
                await asyncio.wait_for(self._outbox.join(), 5)
            except asyncio.TimeoutError:
                pass
        for t in list(self._running):
            t.cancel()


def abstract_of(desc: str) -> str:
    """A task's title: its first line, at most 80 characters (task.c)."""
    line = desc.lstrip(" \t\r\n#").splitlines()[0] if desc.strip(" \t\r\n#") \
        else ""
    return line[:ABSTRACT_MAX].rstrip(" \t") or "Task"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes, saying so."""
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}\n[truncated: {len(kept.encode())} of {len(data)} bytes]"
