"""ioa: a Python SDK for the ioa hub (standard library + python3-websockets).

    import ioa

    agent = ioa.Agent("Shouter", "uppercases text", hub="http://127.0.0.1:7788",
                      token=os.environ.get("IOA_TOKEN"))

    @agent.task
    def shout(task: ioa.Task) -> str:
        return task.desc.upper()

    agent.run()

Layers, lowest first: ``Envelope`` and the IoA enums (envelope.py),
``Client`` for the HTTP endpoints (client.py), ``Connection`` for the
resuming WebSocket (connection.py), ``Agent`` for the task protocol
(agent.py).  Each can be used alone.
"""

from .agent import Agent, Result, Task
from .client import Client
from .connection import Connection
from .envelope import Envelope, MessageType, State, parse_id
from .errors import AuthError, HubError, IoaError, Unreachable

__all__ = ["Agent", "AuthError", "Client", "Connection", "Envelope",
           "HubError", "IoaError", "MessageType", "Result", "State", "Task",
           "Unreachable", "parse_id"]
__version__ = "0.1.0"
