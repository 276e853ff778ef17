"""A child process that appends to an ADK session held at the version it read.

Run by tests/integrations/test_google_adk.py as
``python google_adk_child.py DB ENGINE GO NAME``: it reads session ``s`` of
user ``u`` of ``my_app``, prints ``loaded``, waits until the file GO exists
(the parent creates it once both children have read), appends one event that
sets the state key NAME, and prints ``appended`` — or ``stale`` when the
service refused the append because the other child's landed first.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

from agentlog.integrations.google_adk import STALE_SESSION_MESSAGE, AgentlogSessionService


async def main(db: str, engine: str, go: Path, name: str) -> None:
    async with AgentlogSessionService(db, engine=engine) as service:
        session = await service.get_session(app_name="my_app", user_id="u", session_id="s")
        assert session is not None
        print("loaded", flush=True)
        deadline = time.monotonic() + 60
        while not go.exists():  # the parent's signal: a file, polled
            if time.monotonic() > deadline:
                raise SystemExit("no go signal")
            await asyncio.sleep(0.005)
        event = Event(author="user", actions=EventActions(state_delta={name: 1}))
        try:
            await service.append_event(session, event)
        except ValueError as exc:
            assert str(exc) == STALE_SESSION_MESSAGE
            print("stale", flush=True)
            return
        print("appended", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]))
