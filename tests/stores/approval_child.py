"""An agent run that stops at an approval point, and the resumer that finishes it.

    approval_child.py run DB          run until the approval point, then wait (to be killed)
    approval_child.py resume DB OUTBOX [crash-after-effect]

The side effect is "send an email": a line appended to OUTBOX, which stands
for the outside world. A resumer claims the effect by saving it as started
(compare-and-set), naming itself as the owner; only the claimant performs it.
One that finds it started by a live owner leaves it alone; one that finds it
started by a dead owner (or unknown) reconciles with the outside world by the
effect's id instead of performing it again.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from agentlog import SqliteStorage, StorageConflictError
from agentlog.stores import SideEffect

TENANT, RUN = "acme", "run-7"


def run(db: str) -> None:
    with SqliteStorage.open(db) as storage:
        cp = storage.checkpoints.save(
            TENANT, RUN, None, status="running", state={"step": 1}, session_id="chat-1"
        )
        storage.checkpoints.save(
            TENANT, RUN, cp.revision, status="awaiting_approval", state={"step": 2},
            session_id="chat-1", interruption={"reason": "approve sending the email"},
            side_effects=[SideEffect("email-1", "send_email", payload={"to": "ops@example.com"})],
        )  # fmt: skip
        print("waiting for approval", flush=True)
        time.sleep(3600)  # stopped here: the parent kills it at the approval point


def sent(outbox: Path) -> list[str]:
    return outbox.read_text().splitlines() if outbox.exists() else []


def resume(db: str, outbox: Path, crash_after_effect: bool) -> str:
    with SqliteStorage.open(db) as storage:
        cps = storage.checkpoints
        cp = cps.load(TENANT, RUN)
        (effect,) = cp.side_effects
        if effect.state in ("succeeded", "failed"):
            return "nothing to do"
        if effect.state == "started" and _alive(effect.result["owner"]):
            return "another resumer claimed it"
        if effect.state in ("started", "unknown"):
            # The claimant died between acting and recording: ask the world.
            if effect.state == "started":
                cp = cps.save(
                    TENANT, RUN, cp.revision, status="awaiting_side_effect", state=cp.state,
                    session_id="chat-1", side_effects=[_with(effect, "unknown")],
                )  # fmt: skip
            done = effect.id in sent(outbox)
            outcome = "succeeded" if done else "failed"
            cps.save(
                TENANT, RUN, cp.revision, status="completed" if done else "failed", state=cp.state,
                session_id="chat-1", side_effects=[_with(effect, outcome)],
            )  # fmt: skip
            return "reconciled"
        try:
            cp = cps.save(
                TENANT, RUN, cp.revision, status="awaiting_side_effect", state=cp.state,
                session_id="chat-1", side_effects=[_with(effect, "started", os.getpid())],
            )  # fmt: skip
        except StorageConflictError:
            return "another resumer claimed it"
        with open(outbox, "a") as out:
            out.write(effect.id + "\n")
        if crash_after_effect:
            os._exit(3)
        cps.save(
            TENANT, RUN, cp.revision, status="completed", state={"step": 3},
            session_id="chat-1", side_effects=[_with(effect, "succeeded")],
        )  # fmt: skip
        return "performed"


def _with(effect: SideEffect, state: str, owner: int | None = None) -> SideEffect:
    result = {"owner": owner} if owner is not None else effect.result
    return SideEffect(effect.id, effect.kind, state, effect.payload, result)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        print(resume(sys.argv[2], Path(sys.argv[3]), "crash-after-effect" in sys.argv[4:]))
