"""The sync saver, :class:`AgentlogSaver`, and the reads both savers share."""

from __future__ import annotations

import builtins
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentlog import (
    BaseCheckpointer,
    CheckpointConflictError,
    IdempotencyKeyError,
    SqliteCheckpointer,
    SqliteStorage,
    StorageUnavailableError,
)

from .core import RETRIES, Core
from .encoding import thread_of, tuple_config
from .index import Plan
from .maintenance import Maintenance, Op

__all__ = ["DEFAULT_LANGGRAPH_TENANT", "AgentlogSaver", "SaverBase"]

#: The tenant a saver opened from a path keeps its sessions in.
DEFAULT_LANGGRAPH_TENANT = "langgraph"


def _stored(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
    """The config naming ``checkpoint``, stored in ``config``'s thread and namespace."""
    thread_id, ns = thread_of(config)
    return tuple_config(thread_id, ns, checkpoint["id"])


class SaverBase(BaseCheckpointSaver[int]):
    """What both savers share: the reads, the versions and the write faces."""

    _core: Core
    _maintenance: Maintenance

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the namespace's latest without a
        checkpoint_id), with its pending writes in LangGraph's order."""
        return self._core.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id), of one thread (and namespace, if
        given) or of all, matching ``filter`` on metadata, older than
        ``before``, at most ``limit``."""
        return iter(self._core.list(config, filter, before, limit))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` (a short read, on the caller's loop)."""
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` (short reads, on the caller's loop)."""
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    def get_next_version(self, current: int | str | None, channel: None) -> Any:
        """The next version: 1, 2, 3 … per channel (LangGraph's default).

        Savers that key stored values by version add a random suffix so two
        branches never share a key; values here are found along the parent
        chain, not by version, so plain integers do — and every checkpoint's
        ``channel_versions`` and ``versions_seen`` stay short. A thread
        another saver (or an older release) wrote holds strings,
        ``"000…7.0.123"``: it continues in their form, ``"000…8.0"``, since
        LangGraph compares a checkpoint's versions with each other.
        """
        if current is None:
            return 1
        if isinstance(current, int):
            return current + 1
        return f"{int(current.split('.')[0]) + 1:032}.0"

    # -- writes: LangGraph's BaseCheckpointSaver faces -----------------------
    # LangGraph asks for each sync method and its async twin with the same
    # signature, so each is spelled twice here, once for both savers: the
    # logic is one plan in Core, which a saver's _commit / _run (sync) and
    # _acommit / _arun (async) write.

    def _commit(self, make: Callable[[], Plan | None]) -> None:
        raise NotImplementedError

    def _run(self, plan: Callable[[], builtins.list[Op]]) -> None:
        raise NotImplementedError

    async def _acommit(self, make: Callable[[], Plan | None]) -> None:
        raise NotImplementedError

    async def _arun(self, plan: Callable[[], builtins.list[Op]]) -> None:
        raise NotImplementedError

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: the channels in ``new_versions`` (a list that
        grew, only its new tail), the others by reference to the parent."""
        self._commit(lambda: self._core.plan_put(config, checkpoint, metadata, new_versions))
        return _stored(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint in ``config``: a regular
        write already stored under the same ``(task_id, idx)`` is kept, a
        special one (error, interrupt, …; ``WRITES_IDX_MAP``) replaced."""
        self._commit(lambda: self._core.plan_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every namespace of ``thread_id`` (an unknown thread is fine)."""
        self._run(lambda: self._maintenance.delete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another (replacing
        what it held) with the log's own fork of each namespace."""
        self._run(lambda: self._maintenance.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint (a
        snapshot) and its writes, with the ancestors back to the last full
        value of each ``DeltaChannel`` it holds; ``"delete"``: delete the
        threads."""
        self._run(lambda: self._maintenance.prune(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id``
        is one of ``run_ids``; the others stay readable. As LangGraph warns,
        a later checkpoint's ``DeltaChannel`` rebuilt from a deleted one's
        writes loses them: deleting is what was asked."""
        self._run(lambda: self._maintenance.delete_for_runs(run_ids))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, awaited."""
        await self._acommit(lambda: self._core.plan_put(config, checkpoint, metadata, new_versions))
        return _stored(config, checkpoint)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, awaited."""
        await self._acommit(lambda: self._core.plan_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited."""
        await self._arun(lambda: self._maintenance.delete_thread(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited."""
        await self._arun(lambda: self._maintenance.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited."""
        await self._arun(lambda: self._maintenance.prune(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited."""
        await self._arun(lambda: self._maintenance.delete_for_runs(run_ids))


class AgentlogSaver(SaverBase):
    """A LangGraph checkpointer on an agentlog log: deltas per step, bounded snapshots.

    ``target`` is a path (an agentlog SQLite file is opened — created if
    missing — for ``tenant`` on ``engine``, and closed with the saver), an
    open :class:`~agentlog.SqliteStorage` (its log for ``tenant``), or any
    :class:`~agentlog.BaseCheckpointer` (used as it is, with its own tenant,
    and not closed by the saver). The ``a…`` methods run the same code
    inline (SQLite writes are short); :class:`AsyncAgentlogSaver` keeps
    writes off the event loop. One saver is safe to share between threads.
    The package docstring (:mod:`agentlog.integrations.langgraph`) describes
    what is stored.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | BaseCheckpointer | SqliteStorage,
        *,
        tenant: str = DEFAULT_LANGGRAPH_TENANT,
        engine: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._owns = False
        if isinstance(target, BaseCheckpointer):
            log = target
        elif isinstance(target, SqliteStorage):
            log = target.checkpointer(tenant)
        else:
            log = SqliteCheckpointer(target, tenant=tenant, engine=engine)
            self._owns = True
        self.log: BaseCheckpointer = log
        self._core = Core(log, self.serde)
        self._maintenance = Maintenance(self._core)

    def close(self) -> None:
        """Close the log if the saver opened it (from a path)."""
        if self._owns:
            self.log.close()

    def __enter__(self) -> AgentlogSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------

    def _commit(self, make: Callable[[], Plan | None]) -> None:
        core = self._core
        for _ in range(RETRIES):
            with core.lock:
                plan = make()
                if plan is None:
                    return
                try:
                    self.log.append(
                        plan.sess.sid,
                        core.stamp(plan),
                        expected_head=plan.expected,
                        key=core.append_key(plan),
                    )
                except IdempotencyKeyError:
                    # This checkpoint id is in the log already: a host's retry
                    # of a put that landed writes nothing (exactly once). An
                    # index behind the log catches up at its next conflict.
                    return
                except CheckpointConflictError:
                    core.conflicted(plan)
                    continue
                core.committed(plan)
                return
        raise StorageUnavailableError(f"gave up after {RETRIES} conflicting writers")

    def _run(self, plan: Callable[[], builtins.list[Op]]) -> None:
        core = self._core
        with core.lock:
            ops = plan()
            try:
                for op in ops:
                    if op[0] == "delete":
                        self.log.delete(op[1])
                    elif op[0] == "fork":
                        self.log.fork(op[1], op[2], op[3])
                    else:
                        self.log.append(op[1], op[2], expected_head=op[3])
            finally:
                self._maintenance.done(ops)

    async def _acommit(self, make: Callable[[], Plan | None]) -> None:
        self._commit(make)

    async def _arun(self, plan: Callable[[], builtins.list[Op]]) -> None:
        self._run(plan)
