"""The conformance suites, for any backend, from any project's pytest.

Every built-in backend runs these suites in agentlog's own tests. To run the
``Checkpointer`` suite against your backend, subclass
:class:`CheckpointerConformance` in a test module and say how to open your
store::

    # test_my_backend.py
    from agentlog.testing import CheckpointerConformance

    class TestMyBackend(CheckpointerConformance):
        durable = True          # data survives close() and reopen
        multiprocess = True     # two processes may share one store

        def open_checkpointer(self, location):
            return MyCheckpointer(location / "store.db")

or, equivalently, ``TestMyBackend = checkpointer_conformance(opener)`` with a
module-level ``opener(location)``. ``location`` is a fresh directory per test;
calling ``open_checkpointer`` again with the same location must open the same
store (the reopen and two-process tests do that). The multi-process tests
start children with the ``spawn`` method, so the subclass (or the opener)
must be importable from its module.

The four stores' suites work the same way: subclass
:class:`SessionStoreConformance`, :class:`CheckpointStoreConformance`,
:class:`MemoryStoreConformance` or :class:`ArtifactStoreConformance` and
implement ``open_storage(location)``, returning an object that has the store
as an attribute (``sessions``, ``checkpoints``, ``memory``, ``artifacts``) and
a ``close()`` method, such as a ``SqliteStorage``; set ``durable`` and
``multiprocess`` to what it promises. Run them with plain ``pytest``. For an
async storage (:class:`agentlog.aio.AsyncStorage`), mix in
:class:`AsyncStorageSuite` and implement ``async open_async_storage(location)``
instead: the suites then drive it through :class:`BlockingStorage`;
:class:`AsyncStorageConformance` adds the async-only tests.

The package: :mod:`~agentlog.testing.harness` (``make_event``, the hostile
ids, the store-suite base), :mod:`~agentlog.testing.races` (the one race
runner, threads or spawned processes), :mod:`~agentlog.testing.log` (the
``Checkpointer`` suite, on its frame :mod:`~agentlog.testing.log_suite`, with
its metadata, append-key and ``list_page`` parts
:mod:`~agentlog.testing.log_metadata`, :mod:`~agentlog.testing.log_keys` and
:mod:`~agentlog.testing.activity`) and one module per store suite.
"""

from __future__ import annotations

from .aio import AsyncCheckpointerConformance, BlockingFacade
from .aio_stores import AsyncStorageConformance, AsyncStorageSuite, BlockingStorage
from .artifacts import ArtifactStoreConformance
from .checkpoints import CheckpointStoreConformance
from .harness import HOSTILE_SESSION_IDS, make_event
from .log import CheckpointerConformance, checkpointer_conformance
from .memory import MemoryStoreConformance
from .races import RaceFunction as RaceFunction
from .sessions import SessionStoreConformance

__all__ = [
    "HOSTILE_SESSION_IDS",
    "ArtifactStoreConformance",
    "AsyncCheckpointerConformance",
    "AsyncStorageConformance",
    "AsyncStorageSuite",
    "BlockingFacade",
    "BlockingStorage",
    "CheckpointStoreConformance",
    "CheckpointerConformance",
    "MemoryStoreConformance",
    "SessionStoreConformance",
    "checkpointer_conformance",
    "make_event",
]

# Before it became a package, this module also exposed agentlog's own types
# that it imported for its own use; they stay importable from here.
from ..errors import CheckpointConflictError as CheckpointConflictError
from ..errors import CheckpointerClosedError as CheckpointerClosedError
from ..errors import InvalidEventError as InvalidEventError
from ..errors import InvalidSessionIdError as InvalidSessionIdError
from ..errors import SessionExistsError as SessionExistsError
from ..errors import SessionNotFoundError as SessionNotFoundError
from ..errors import StorageConflictError as StorageConflictError
from ..errors import StorageDataError as StorageDataError
from ..errors import StorageNotFoundError as StorageNotFoundError
from ..events import MAX_SESSION_ID_LENGTH as MAX_SESSION_ID_LENGTH
from ..events import SessionInfo as SessionInfo
from ..events import StoredEvent as StoredEvent
from ..log.contract import Checkpointer as Checkpointer
from ..stores.artifacts import ArtifactInfo as ArtifactInfo
from ..stores.checkpoints import Checkpoint as Checkpoint
from ..stores.checkpoints import SideEffect as SideEffect
