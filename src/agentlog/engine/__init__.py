"""The SQLite engine layer, and the one place that decides which engine runs.

``AGENTLOG_NO_EXTENSIONS=1`` forces the pure engine; otherwise the compiled C
twin (``agentlog.engine.cengine``) is used when it imports, and the pure twin
(:mod:`agentlog.engine.pure`) when it does not (not built, or not CPython).
Everything above this package sees an engine only as
:class:`~agentlog.engine.interface.Engine`.
"""

from __future__ import annotations

import os
import platform
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import SchemaVersionError, StorageNotFoundError
from ..files import DEFAULT_FILE_MODE, check_file_mode
from .connections import DEFAULT_WAL_SIZE_LIMIT, EngineOptions
from .interface import AppendCompletions, Connection, Engine, EngineFactory
from .line_check import first_bad_crc_line
from .pure import PyEngine

__all__ = [
    "AVAILABLE_ENGINES",
    "DEFAULT_ENGINE",
    "DEFAULT_WAL_SIZE_LIMIT",
    "AppendCompletions",
    "Connection",
    "Engine",
    "EngineFactory",
    "EngineOptions",
    "engine_class",
    "engine_info",
    "first_bad_crc_line",
    "open_database",
    "open_engine",
    "open_shared_engine",
    "release_engine",
]

#: Engine classes by name, the default first.
AVAILABLE_ENGINES: dict[str, EngineFactory] = {}
_extension_error: str | None = "disabled by AGENTLOG_NO_EXTENSIONS"

if not os.environ.get("AGENTLOG_NO_EXTENSIONS") and platform.python_implementation() == "CPython":
    try:
        from .cengine import CEngine
    except ImportError as exc:
        _extension_error = f"{type(exc).__name__}: {exc}"
    else:
        AVAILABLE_ENGINES["c"] = CEngine
        _extension_error = None
AVAILABLE_ENGINES["python"] = PyEngine

#: The name of the engine a SqliteCheckpointer uses unless told otherwise.
DEFAULT_ENGINE: str = next(iter(AVAILABLE_ENGINES))


def engine_class(name: str | None = None) -> EngineFactory:
    """The engine class called ``name`` (``"c"`` or ``"python"``), or the default."""
    if name is None:
        return AVAILABLE_ENGINES[DEFAULT_ENGINE]
    try:
        return AVAILABLE_ENGINES[name]
    except KeyError:
        if name == "c":
            raise ImportError(f"the C engine is not available ({_extension_error})") from None
        raise ValueError(f"unknown engine {name!r}; expected 'c' or 'python'") from None


# The engine options (synchronous … hash_chain) are spelled here, on
# open_shared_engine and on SqliteCheckpointer: each is a public signature with
# its own defaults and documentation, which one options object would change.
# Below this point they travel as one EngineOptions.
def open_engine(
    path: str | os.PathLike[str],
    *,
    engine: str | None = None,
    synchronous: str = "normal",
    busy_timeout_ms: int = 5000,
    integrity_check_on_open: bool = False,
    read_only: bool = False,
    wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT,
    file_mode: int = DEFAULT_FILE_MODE,
    immutable: bool = False,
    hash_chain: bool = False,
) -> Engine:
    """Open the agentlog database at ``path`` with the engine called ``engine``.

    Arguments are checked here, once, for every caller (the SQLite backend,
    the stores, migrate and the CLI). A file this creates gets ``file_mode``
    (the owner's only by default), and so do its ``-wal`` and ``-shm``.
    ``immutable`` (with ``read_only``) reads a file that no process has open
    — no ``-wal`` or ``-shm`` beside it — without creating them or taking
    locks; a writer that starts meanwhile is not seen. ``hash_chain`` makes
    the file keep a hash chain per session from now on (for every later
    writer too; see :mod:`agentlog.integrity`).
    """
    location = _check_options(path, synchronous, busy_timeout_ms, wal_size_limit)
    options = EngineOptions(
        synchronous=synchronous,
        busy_timeout_ms=max(0, busy_timeout_ms),
        integrity_check_on_open=bool(integrity_check_on_open),
        read_only=bool(read_only),
        wal_size_limit=wal_size_limit,
        file_mode=check_file_mode(file_mode),
        immutable=bool(immutable),
        hash_chain=bool(hash_chain),
    )
    return engine_class(engine)(location, options=options)


def _check_options(
    path: object, synchronous: object, busy_timeout_ms: object, wal_size_limit: object
) -> str:
    """Refuse bad arguments to an open; the path as a str."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"file must be a path, not {type(path).__name__}")
    location = os.fspath(path)
    if not isinstance(location, str):
        raise TypeError("file must be a str path")
    if synchronous not in ("normal", "full"):
        raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int):
        raise TypeError("busy_timeout_ms must be an int")
    if isinstance(wal_size_limit, bool) or not isinstance(wal_size_limit, int):
        raise TypeError("wal_size_limit must be an int (bytes)")
    if wal_size_limit < 0:
        raise ValueError(f"wal_size_limit must be >= 0, not {wal_size_limit}")
    return location


def engine_info() -> dict[str, Any]:
    """Which engine runs, with the SQLite version and compile options it uses.

    ``{"engine": "c" | "python", "sqlite_version": …, "sqlite_source_id": …,
    "compile_options": [...], "available": [...], "extension_error": None | str}``
    ``extension_error`` says why the C engine is not available, when it is not.
    """
    engine = engine_class()
    return {
        "engine": engine.name,
        **engine.sqlite_info(),
        "available": list(AVAILABLE_ENGINES),
        "extension_error": _extension_error,
    }


# -- one engine per file per process ----------------------------------------------------


class _Shared:
    """One shared engine (weakly: the holders keep it alive) and its holders,
    by identity, each with how many holds it took (weakly too: a holder
    collected leaves, its weakref's callback taking no lock)."""

    __slots__ = ("engine", "holders")

    def __init__(self, engine: Engine) -> None:
        self.engine = weakref.ref(engine)
        self.holders: dict[int, list[Any]] = {}

    def hold(self, holder: object) -> None:
        entry = self.holders.get(id(holder))
        if entry is not None and entry[0]() is holder:
            entry[1] += 1
            return
        self.holders[id(holder)] = [weakref.ref(holder, _forget(self.holders, id(holder))), 1]

    def release(self, holder: object) -> bool:
        """One hold of ``holder`` given up; whether any holder is left."""
        entry = self.holders.get(id(holder))
        if entry is not None and entry[0]() is holder:
            entry[1] -= 1
            if entry[1] == 0:
                del self.holders[id(holder)]
        return any(ref() is not None for ref, _ in self.holders.values())


# The engines open_shared_engine hands out, by (st_dev, st_ino, engine name and
# options). Nothing here runs when an object is collected, so no lock is ever
# taken by the garbage collector: a holder collected without release simply
# leaves the set, and an engine no one references closes itself (its own
# finalizer closes its connections).
_SHARED: dict[tuple[Any, ...], _Shared] = {}
_SHARED_KEYS: weakref.WeakKeyDictionary[Engine, tuple[Any, ...]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _forget(holders: dict[int, list[Any]], key: int) -> Callable[[object], None]:
    """A weakref callback: a collected holder leaves (a dict pop, no lock)."""

    def forget(_: object) -> None:
        holders.pop(key, None)

    return forget


def _shared_key(location: str, name: str, options: dict[str, Any]) -> tuple[Any, ...] | None:
    try:
        stat = os.stat(location)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, name, *sorted(options.items()))


def open_shared_engine(
    path: str | os.PathLike[str],
    holder: object,
    *,
    engine: str | None = None,
    synchronous: str = "normal",
    busy_timeout_ms: int = 5000,
    read_only: bool = False,
    wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT,
    file_mode: int = DEFAULT_FILE_MODE,
    hash_chain: bool = False,
) -> Engine:
    """This process's engine for the database file ``path`` with these options,
    opened (as :func:`open_engine` does) by the first caller and shared by the
    later ones: one writer connection, one group-commit queue and one reader
    pool per file, so appends from every holder group into the same
    transactions.

    ``holder`` (the checkpointer or storage that uses it; weakly held) gives
    it up with :func:`release_engine`; the last release closes the engine. A
    holder collected without releasing leaves on its own, and an engine no
    one references any more closes its connections when it is collected.
    ``file_mode`` applies only to a file this creates. A file is known by its
    device and inode, so another path to it shares the same engine; other
    options (engine, ``synchronous``, busy timeout, WAL limit, ``read_only``)
    get an engine of their own. ``hash_chain=True`` turns the file's hash
    chain on for every holder, and a holder that joins takes up a chain that
    another (or another process) turned on, as a fresh open would.
    """
    location = _check_options(path, synchronous, busy_timeout_ms, wal_size_limit)
    weakref.ref(holder)  # a holder must be weakly referable: refused before anything opens
    name = engine_class(engine).name
    options: dict[str, Any] = {
        "synchronous": synchronous,
        "busy_timeout_ms": busy_timeout_ms,
        "read_only": bool(read_only),
        "wal_size_limit": wal_size_limit,
    }
    if location == ":memory:":
        return open_engine(path, engine=engine, hash_chain=hash_chain, **options)
    # Opens of one file take turns (so that they make one engine), but nothing
    # slow — an open, a migration, a wait for another process's write lock —
    # runs under the registry's lock, which every close needs.
    with _gate(location):
        with _SHARED_LOCK:
            key = _shared_key(location, name, options)
            shared = _SHARED.get(key) if key is not None else None
            found = shared.engine() if shared is not None else None
            if shared is not None and found is not None and not found.closed:
                shared.hold(holder)
            else:
                found = None
        if found is not None:
            try:
                found.join(hash_chain=hash_chain and not read_only)
            except BaseException:
                release_engine(found, holder)
                raise
            return found
        opened = open_engine(
            path, engine=engine, file_mode=file_mode, hash_chain=hash_chain, **options
        )
        with _SHARED_LOCK:
            key = _shared_key(opened.path, name, options)
            if key is not None:
                for gone in [old for old, entry in _SHARED.items() if entry.engine() is None]:
                    del _SHARED[gone]  # engines collected since: their entries go
                _SHARED[key] = shared = _Shared(opened)
                _SHARED_KEYS[opened] = key
                shared.hold(holder)
        return opened


class _Gate:
    """The turn opens of one file take (see open_shared_engine)."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()


# By real path; an entry lasts while an open of that file is under way.
_GATES: weakref.WeakValueDictionary[str, _Gate] = weakref.WeakValueDictionary()


def _gate(location: str) -> _Gate:
    where = os.path.realpath(location)
    with _SHARED_LOCK:
        gate = _GATES.get(where)
        if gate is None:
            gate = _GATES[where] = _Gate()
        return gate


def release_engine(engine: Engine, holder: object) -> None:
    """``holder`` gives up ``engine`` (from :func:`open_shared_engine`); the last
    holder to do so closes it. An engine that was not shared is closed."""
    with _SHARED_LOCK:
        key = _SHARED_KEYS.get(engine)
        shared = _SHARED.get(key) if key is not None else None
        if key is not None and shared is not None and shared.engine() is engine:
            if shared.release(holder):
                return
            del _SHARED[key]
    engine.close()


def open_database(
    file: str | os.PathLike[str],
    *,
    read_only: bool = False,
    create: bool = True,
    holder: object = None,
    **options: Any,
) -> Engine:
    """The engine on the agentlog database ``file`` (``options`` as
    :func:`~agentlog.engine.open_engine` takes them), for the checkpointer and
    the storage alike.

    With a ``holder``, this process's engine for the file and options, shared
    (:func:`~agentlog.engine.open_shared_engine`; the holder gives it back
    with :func:`~agentlog.engine.release_engine`, never ``close()``).

    ``read_only=True`` or ``create=False`` open an existing agentlog database
    only: a missing file raises :class:`StorageNotFoundError`, one that holds
    no agentlog database :class:`SchemaVersionError`, and nothing is created
    or changed before that is known.
    """
    if read_only or not create:
        _refuse_missing(file)
        if not read_only:
            # Look without changing anything before opening to write.
            engine = options.get("engine")
            _require_agentlog(open_engine(file, engine=engine, read_only=True)).close()
    if holder is not None and not options.get("integrity_check_on_open"):
        # (A check on open asked for gets an engine of its own, which runs it.)
        options.pop("integrity_check_on_open", None)
        opened = open_shared_engine(file, holder, read_only=read_only, **options)
        if read_only and opened.schema_version == 0:
            release_engine(opened, holder)
            raise _empty_file(opened)
        return opened
    opened = open_engine(file, read_only=read_only, **options)
    return _require_agentlog(opened) if read_only else opened


def _refuse_missing(file: str | os.PathLike[str]) -> None:
    """Refuse to open what would have to be created."""
    location = os.fspath(file) if isinstance(file, (str, os.PathLike)) else file
    if location == ":memory:":
        raise ValueError("':memory:' is always a new database: it cannot be opened read-only")
    if isinstance(location, str) and not os.path.exists(location):
        raise StorageNotFoundError(f"no such file: {location!r}")


def _require_agentlog(engine: Engine) -> Engine:
    """``engine``, unless its file holds no agentlog database (then it is closed)."""
    if engine.schema_version == 0:
        engine.close()
        raise _empty_file(engine)
    return engine


def _empty_file(engine: Engine) -> SchemaVersionError:
    return SchemaVersionError(f"{engine.path!r} is not an agentlog database (it is empty)")


def _forget_shared_in_child() -> None:
    """In a child of ``os.fork()``: the parent's engines are abandoned (see
    :meth:`EngineBase.abandon_after_fork`); the child opens its own."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()  # a parent thread may have held it
    _SHARED.clear()
    _SHARED_KEYS.clear()
    _GATES.clear()  # (a parent thread may have held one)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_in_child)
