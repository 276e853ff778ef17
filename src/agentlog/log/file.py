"""The file backend: one JSONL file per session, owned by one process.

Layout of a session file::

    {"agentlog":1,"session":"<id>","created":<ts>}          <- header
    {"seq":1,"end":2,"ts":<ts>,"crc":<crc>,"event":{...}}   <- batch 1..2
    {"seq":2,"end":2,"ts":<ts>,"crc":<crc>,"event":{...}}
    {"seq":3,"end":3,"ts":<ts>,"crc":<crc>,"event":{...}}   <- batch 3..3

A batch is written with one ``write`` call (and an ``fsync`` with
``fsync=True``). Every line carries the seq of its batch's last event
(``end``), so on open a batch that a crash left half-written — a torn last
line, or complete lines whose batch end never arrived — is detected and cut
off, leaving exactly the appends that had returned. Truncating or forking in
the middle of a batch rewrites that batch's ``end`` through a temporary file
and an atomic rename, so a crash never leaves a half-truncated log.

File names are ``<slug>.<hash>.jsonl``: a lower-case, readable slug of the id
plus 96 bits of its SHA-256, so no id can escape the directory and ids that
differ only by case never share a file, even on case-insensitive file systems.
The header holds the exact id.

``crc`` is the CRC-32 (``zlib.crc32``) of the line's event bytes exactly as
written after ``"event":``; every read verifies it, and a line that does not
match (or does not decode) raises :class:`CorruptDatabaseError` naming the
session and seq, after the events before it. Lines written before checksums
existed have no ``crc`` and are read as before.

A session's metadata lives beside its log, in ``<slug>.<hash>.jsonl.meta``::

    {"agentlog":1,"session":"<id>","base":<int>}            <- header
    <the metadata's JSON>

written whole through a temporary file and an atomic rename, so a crash
leaves the old metadata or the new, never a mix. The session's revision is
``base + head``: an append raises it with the head, and a truncate or a
metadata change writes a new ``base`` that raises it past what it was (a
truncate writes it before it cuts the log). A session without the file (as
every file written before metadata existed) has no metadata and ``base`` 0.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import threading
import weakref
import zlib
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from ..engine import first_bad_crc_line
from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    DirectoryLockedError,
    SessionExistsError,
    SessionNotFoundError,
    StorageNotFoundError,
    StorageUnavailableError,
    damaged_event,
)
from ..events import EncodedBatch, SessionInfo, StoredEvent
from ..files import DEFAULT_FILE_MODE, check_file_mode, directory_mode
from ..integrity import DamagedEvent, Progress, describe_damage, payload_problem
from .contract import WOULD_WAIT, BaseCheckpointer, WouldWait, metadata_conflict

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["METADATA_SUFFIX", "FileCheckpointer", "is_file_store", "read_metadata_file"]

_T = TypeVar("_T")
_LOCK_NAME = ".agentlog.lock"
_SUFFIX = ".jsonl"
#: What a session file's name takes to name its metadata file.
METADATA_SUFFIX = ".meta"
_SLUG_UNSAFE = re.compile(r"[^a-z0-9_-]+")
_new_stored = tuple.__new__
# Session files are opened by their own name only: never through a symbolic
# link, never a FIFO or device planted under a session's name.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


def session_file_name(session_id: str) -> str:
    """The file name that holds ``session_id`` (the id must be valid)."""
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:24]
    slug = _SLUG_UNSAFE.sub("_", session_id.lower())[:40] or "_"
    return f"{slug}.{digest}{_SUFFIX}"


def _header(session_id: str, created: float) -> bytes:
    return orjson.dumps({"agentlog": 1, "session": session_id, "created": created}) + b"\n"


def _line(seq: int, end: int, ts: float, payload: bytes) -> bytes:
    return b'{"seq":%d,"end":%d,"ts":%s,"crc":%d,"event":%s}\n' % (
        seq,
        end,
        repr(ts).encode(),
        zlib.crc32(payload),
        payload,
    )


#: The start of every event line agentlog writes: seq and end, read without
#: decoding the line (so a damaged payload does not hide them).
_LINE_START = re.compile(rb'\{"seq":(\d+),"end":(\d+),')
_EVENT_KEY = b'"event":'


def _payload(line: bytes) -> bytes:
    """The event bytes of an event line (its newline, if any, left out)."""
    end = -2 if line.endswith(b"\n") else -1
    return line[line.index(_EVENT_KEY) + 8 : end]


def _line_problem(line: bytes) -> str | None:
    """What is wrong with one event line's event: its checksum (when it has one)
    or its decoding; ``None`` when sound."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            payload = _payload(line)
        except ValueError:
            return f"unreadable event line ({exc})"
        crc = re.search(rb'"crc":(\d+),"event":', line)
        return payload_problem(payload, int(crc.group(1)) if crc else None) or (
            f"unreadable event line ({exc})"
        )
    if not isinstance(record, dict):
        return "not an event line"
    crc = record.get("crc")
    return payload_problem(_payload(line), crc if isinstance(crc, int) else None)


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What changes whenever a session file changes: inode, size and mtime."""
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _not_regular(path: Path | str) -> CorruptDatabaseError:
    return CorruptDatabaseError(
        f"{path} is not a regular file (a symbolic link or a special file): "
        "agentlog neither follows nor writes through one"
    )


def _open_regular(path: Path | str, flags: int, mode: int = 0o600) -> int:
    """Open ``path`` itself: never through a symbolic link (``O_NOFOLLOW``),
    never a FIFO or device (it is refused without blocking), and for writing
    never a file with a second name (a hard link from outside the directory).

    Raises :class:`CorruptDatabaseError` for such a file and ``OSError`` for
    the rest (``FileNotFoundError`` when there is nothing there)."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.ENODEV, errno.EEXIST):
            try:
                planted = not stat.S_ISREG(os.lstat(path).st_mode)
            except OSError:
                planted = False
            if planted:
                raise _not_regular(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (flags & _WRITE_FLAGS and st.st_nlink > 1):
            raise _not_regular(path)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_regular(path: Path | str, start: int = 0, size: int = -1) -> tuple[bytes, os.stat_result]:
    """``size`` bytes of ``path`` from ``start`` (all with -1) and its stat,
    opened as :func:`_open_regular` opens."""
    fd = _open_regular(path, os.O_RDONLY)
    with open(fd, "rb") as handle:
        st = os.fstat(fd)
        if start:
            handle.seek(start)
        return handle.read(size), st


def _is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file by its own name (not through a link)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _record(session: _Session, seq: int, line: bytes) -> dict[str, Any]:
    """Event line ``seq`` of ``session`` decoded; :class:`CorruptDatabaseError`
    naming it when it does not decode."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise damaged_event(session.session_id, seq, f"unreadable event line ({exc})") from None
    if not isinstance(record, dict):
        raise damaged_event(session.session_id, seq, "not an event line")
    return record


class _Session:
    """What the owning process knows about one session file."""

    __slots__ = ("activity", "base", "meta", "meta_loaded", "mtime", "offsets", "path",
                 "session_id", "stamp")  # fmt: skip

    def __init__(
        self,
        session_id: str,
        path: Path,
        offsets: array[int],
        mtime: float,
        stamp: tuple[int, int, int] | None = None,
    ) -> None:
        self.session_id = session_id
        self.path = path
        # offsets[k] is where event k+1 starts; offsets[head] is the end of
        # the committed log. offsets[0] is the end of the header.
        self.offsets = offsets
        # The file's own mtime, so list() reads the same after a reopen; the
        # activity counter orders changes that fall in one clock tick.
        self.mtime = mtime
        self.activity = 0
        # The file as it was read (a read-only checkpointer reloads on change).
        self.stamp = stamp
        # From the metadata file, read on first use: the metadata's JSON and
        # the base of the revision (revision = base + head).
        self.meta: bytes | None = None
        self.base = 0
        self.meta_loaded = False

    @property
    def head(self) -> int:
        return len(self.offsets) - 1


def parse_session_file(
    data: bytes, name: str, expected_id: str | None = None
) -> tuple[str, array[int]] | None:
    """Read a session file's bytes without changing anything.

    Returns ``(session_id, offsets)`` where ``offsets[k]`` is where event k+1
    starts and ``offsets[-1]`` is the end of the committed log (a torn tail or
    a half-written batch after it is left out), or ``None`` for a file whose
    header never completed (or, with no ``expected_id``, one that is not ours).
    """
    header_end = data.find(b"\n") + 1
    if header_end == 0:
        # The creating append never finished (nothing of it returned); the
        # next append to this id starts the file afresh.
        return None
    try:
        header = orjson.loads(data[:header_end])
        session_id = header["session"]
        valid = header.get("agentlog") == 1 and isinstance(session_id, str)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        valid = False
    if not valid:
        if expected_id is None:
            return None  # not one of ours; leave it alone
        raise CorruptDatabaseError(f"{name}: not an agentlog session file")
    if expected_id is not None and session_id != expected_id:
        raise CorruptDatabaseError(f"{name} holds session {session_id!r}, not {expected_id!r}")
    offsets = array("q", [header_end])
    find = data.find
    start = header_end
    while True:
        newline = find(b"\n", start)
        if newline < 0:
            break
        start = newline + 1
        offsets.append(start)
    # Leave out a torn tail: complete lines of a batch whose last line is missing.
    while len(offsets) > 1:
        line = data[offsets[-2] : offsets[-1]]
        start_of = _LINE_START.match(line)
        try:
            # A damaged payload still leaves seq and end readable (checked on read).
            if start_of is not None:
                seq, end = int(start_of.group(1)), int(start_of.group(2))
            else:
                record = orjson.loads(line)
                seq, end = record["seq"], record["end"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorruptDatabaseError(f"{name}: unreadable event line {len(offsets) - 1}") from exc
        if seq != len(offsets) - 1:
            raise CorruptDatabaseError(f"{name}: line {len(offsets) - 1} holds seq {seq}")
        if seq == end:
            break
        offsets.pop()
    return session_id, offsets


def _is_header(line: bytes) -> bool:
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(header, dict)
        and header.get("agentlog") == 1
        and isinstance(header.get("session"), str)
    )


def is_file_store(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a file store: the backend's lock file, or at
    least one session file. Reads only."""
    path = Path(directory)
    if not path.is_dir():
        return False
    if (path / _LOCK_NAME).is_file():
        return True
    for candidate in path.glob(f"*{_SUFFIX}"):
        if not _is_regular(candidate):
            continue
        try:
            fd = _open_regular(candidate, os.O_RDONLY)
        except (OSError, CorruptDatabaseError):
            continue
        with open(fd, "rb") as handle:
            first = handle.readline(1 << 16)
        if _is_header(first):
            return True
    return False


def _require_store(directory: Path) -> None:
    """Refuse a directory that holds no file store, changing nothing."""
    if not directory.exists():
        raise StorageNotFoundError(f"no such directory: '{directory}'")
    if not directory.is_dir():
        raise StorageNotFoundError(f"'{directory}' is not a directory")
    if not is_file_store(directory):
        raise StorageNotFoundError(
            f"'{directory}' holds no agentlog file store (no {_LOCK_NAME}, no session files)"
        )


def _damaged_lines(path: Path) -> builtins.list[DamagedEvent]:
    """Every damaged event line of one session file (a deep check); a file that
    cannot be read or parsed at all is left to :func:`_check_session_file`."""
    try:
        data, _ = _read_regular(path)
        parsed = parse_session_file(data, str(path))
    except (OSError, CorruptDatabaseError):
        return []
    if parsed is None:
        return []
    session_id, offsets = parsed
    damaged = []
    for seq in range(1, len(offsets)):
        problem = _line_problem(data[offsets[seq - 1] : offsets[seq]])
        if problem is not None:
            damaged.append(DamagedEvent("", session_id, seq, problem))
    return damaged


def _check_session_file(path: Path) -> str | None:
    """What is wrong with one session file, or ``None``."""
    if not _is_regular(path):
        return None  # not one of ours (agentlog writes regular files only)
    try:
        data, _ = _read_regular(path)
    except (FileNotFoundError, CorruptDatabaseError):
        return None  # deleted meanwhile, or replaced by what is not ours
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    try:
        parsed = parse_session_file(data, str(path))
        if parsed is None:
            return None
        _, offsets = parsed
        for seq in range(1, len(offsets)):
            record = orjson.loads(data[offsets[seq - 1] : offsets[seq]])
            event = record.get("event") if isinstance(record, dict) else None
            if not isinstance(event, dict) or record.get("seq") != seq:
                return f"{path}: line {seq} is not event {seq}"
            if not isinstance(event.get("type"), str):
                return f"{path}: event {seq} has no type"
    except CorruptDatabaseError as exc:
        return str(exc)
    except orjson.JSONDecodeError:
        return f"{path}: unreadable event line {seq}"
    return None


def _check_metadata_file(path: Path) -> str | None:
    """What is wrong with a metadata file, or None."""
    try:
        data, _ = _read_regular(path)
    except (FileNotFoundError, CorruptDatabaseError):
        return None  # deleted meanwhile, or not ours
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    try:
        header = orjson.loads(data.partition(b"\n")[0])
        session_id = header.get("session") if isinstance(header, dict) else None
    except orjson.JSONDecodeError:
        session_id = None
    try:
        read_metadata_file(data, str(path), session_id if isinstance(session_id, str) else "")
    except CorruptDatabaseError as exc:
        return str(exc)
    return None


def read_metadata_file(data: bytes, name: str, session_id: str) -> tuple[int, bytes]:
    """A session's metadata file (``<session file>`` + :data:`METADATA_SUFFIX`):
    ``(base, metadata json)``; :class:`CorruptDatabaseError` when it is not the
    metadata of ``session_id``. Read-only."""
    header, _, meta = data.partition(b"\n")
    try:
        record = orjson.loads(header)
        valid = (
            isinstance(record, dict)
            and record.get("agentlog") == 1
            and record.get("session") == session_id
            and type(record.get("base")) is int
        )
        orjson.loads(meta)
    except orjson.JSONDecodeError:
        valid = False
    if not valid:
        raise CorruptDatabaseError(f"{name}: not the metadata of session {session_id!r}")
    return record["base"], meta


def read_session_file(data: bytes, name: str) -> tuple[str, list[tuple[float, str, bytes]]] | None:
    """A session file's id and committed events as ``(ts, type, payload)``, read-only."""
    parsed = parse_session_file(data, name)
    if parsed is None:
        return None
    session_id, offsets = parsed
    events = []
    for seq in range(1, len(offsets)):
        line = data[offsets[seq - 1] : offsets[seq]]
        problem = _line_problem(line)
        if problem is not None:
            raise damaged_event(session_id, seq, f"{name}: {problem}")
        record = orjson.loads(line)
        events.append((float(record["ts"]), str(record["event"]["type"]), _payload(line)))
    return session_id, events


class FileCheckpointer(BaseCheckpointer):
    """A checkpointer in a directory of JSONL files, one per session.

    For CLI tools and one agent per project: human-readable, greppable and
    easy to copy. One process owns the directory (an OS file lock, held until
    :meth:`close`); a second one — or a second checkpointer in the same
    process — is refused with :class:`DirectoryLockedError` instead of
    interleaving writes. Within the process, one object is safe to share
    between threads.

    ``fsync=False`` (the default) survives a crash of the process: every
    batch reaches the operating system in one write before ``append``
    returns. ``fsync=True`` also survives a crash of the operating system, at
    the cost of an fsync per append.

    ``create=False`` opens an existing file store only: a missing directory,
    or one that holds neither the lock file nor a session file, raises
    :class:`StorageNotFoundError` instead of becoming a new store.
    ``read_only=True`` (which implies it) opens one to read beside its owner:
    it takes no lock and writes nothing — not the lock file, not the repair of
    a torn tail — and every write raises :class:`StorageUnavailableError`.
    It sees each batch the owner had committed when a read starts; a file that
    changed since it was last read is read again.

    ``file_mode`` is the mode of the files it creates (the owner's only,
    ``0o600``, unless told otherwise); the directory, when it creates it, gets
    the matching directory mode (``0o700``). A rewritten file keeps its mode.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fsync: bool = False,
        *,
        create: bool = True,
        read_only: bool = False,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a path, not {type(directory).__name__}")
        self.file_mode = check_file_mode(file_mode)
        if fcntl is None:  # pragma: no cover - not POSIX
            raise StorageUnavailableError("FileCheckpointer needs POSIX file locks")
        self.directory = Path(directory)
        self.fsync = bool(fsync)
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._sessions: dict[str, _Session | None] = {}
        self._all_loaded = False
        self._activity = 0
        self._lock_fd: int | None = None
        if self.read_only or not create:
            _require_store(self.directory)
        if self.read_only:
            _LIVE_FILE_STORES.add(self)
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=directory_mode(self.file_mode))
            self._lock_fd = _open_regular(
                self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, self.file_mode
            )
        except CorruptDatabaseError as exc:
            raise StorageUnavailableError(f"cannot open {self.directory}: {exc}") from None
        except OSError as exc:
            raise StorageUnavailableError(f"cannot open {self.directory}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            self._lock_fd = None
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise DirectoryLockedError(
                    f"{self.directory} is in use by another process or checkpointer"
                ) from None
            raise StorageUnavailableError(f"cannot lock {self.directory}: {exc}") from exc
        # Dropped without close(): the collector gives the directory up.
        self._finalizer = weakref.finalize(self, os.close, self._lock_fd)
        self._finalizer.atexit = False
        _LIVE_FILE_STORES.add(self)
        for stale in self.directory.glob(f"*{_SUFFIX}.tmp"):
            # An interrupted rewrite (the original is intact), or a link
            # planted under a temporary name: either way, not a session.
            with contextlib.suppress(OSError):
                stale.unlink()

    # -- loading -----------------------------------------------------------------

    def _session(self, session_id: str) -> _Session | None:
        """The session's state, loading (and repairing) its file on first use.

        Read-only, the file is looked at every time and read again when it
        changed (its owner is another checkpointer)."""
        if self.read_only:
            return self._fresh(session_id)
        if session_id in self._sessions:
            return self._sessions[session_id]
        path = self.directory / session_file_name(session_id)
        session = self._load(path, session_id)
        self._sessions[session_id] = session
        return session

    def _fresh(self, session_id: str) -> _Session | None:
        cached = self._sessions.get(session_id)
        path = self.directory / session_file_name(session_id) if cached is None else cached.path
        try:
            stamp = _stamp(path.stat())
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            raise StorageUnavailableError(f"cannot read {path}: {exc}") from exc
        if stamp is None:
            session = None
        elif cached is not None and cached.stamp == stamp:
            return cached
        else:
            session = self._load(path, session_id)
        if session is None:
            self._sessions.pop(session_id, None)
        else:
            self._sessions[session_id] = session
        return session

    def _load(self, path: Path, expected_id: str | None) -> _Session | None:
        try:
            data, st = _read_regular(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageUnavailableError(f"cannot read {path}: {exc}") from exc
        parsed = parse_session_file(data, str(path), expected_id)
        if parsed is None:
            return None
        session_id, offsets = parsed
        if offsets[-1] != len(data) and not self.read_only:
            try:
                fd = _open_regular(path, os.O_WRONLY)
                try:
                    if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
                        raise _not_regular(path)  # replaced since it was read
                    os.ftruncate(fd, offsets[-1])
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StorageUnavailableError(f"cannot repair {path}: {exc}") from exc
        return _Session(session_id, path, offsets, st.st_mtime, _stamp(st))

    def _load_all(self) -> None:
        if self.read_only:
            self._reload_all()
            return
        if self._all_loaded:
            return
        known = {s.path.name for s in self._sessions.values() if s is not None}
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            if path.name in known or not _is_regular(path):
                continue  # loaded already, or not one of ours
            session = self._load(path, None)
            if session is None or session.session_id in self._sessions:
                continue
            if path.name != session_file_name(session.session_id):
                continue  # a copied or renamed file: not where we would look for it
            self._sessions[session.session_id] = session
        self._all_loaded = True

    def _reload_all(self) -> None:
        """Read-only: the sessions as the directory holds them now."""
        known = {s.path.name: s for s in self._sessions.values() if s is not None}
        current: dict[str, _Session | None] = {}
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            if not _is_regular(path):
                continue  # not one of ours
            cached = known.get(path.name)
            if cached is not None:
                session = self._fresh(cached.session_id)
            else:
                session = self._load(path, None)
                if session is not None and path.name != session_file_name(session.session_id):
                    continue  # a copied or renamed file: not where we would look for it
            if session is not None and session.session_id not in current:
                current[session.session_id] = session
        self._sessions = current

    def _check_writable(self) -> None:
        if self.read_only:
            raise StorageUnavailableError(f"'{self.directory}' is open read-only")

    # -- writing -----------------------------------------------------------------

    def _sync_directory(self) -> None:
        if self.fsync:
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _write_new(self, path: Path, content: bytes, file_mode: int | None = None) -> None:
        """Create ``path`` holding ``content`` atomically (temporary file + rename).

        The temporary file has a random name and is created exclusively
        (``O_CREAT | O_EXCL | O_NOFOLLOW``), so nothing planted in the
        directory can redirect the write. It gets ``file_mode`` (the store's,
        unless a rewrite keeps the original's)."""
        tmp = path.with_name(f"{path.name[: -len(_SUFFIX)]}.{secrets.token_hex(8)}{_SUFFIX}.tmp")
        mode = self.file_mode if file_mode is None else file_mode
        fd = _open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            if file_mode is not None:
                os.fchmod(fd, file_mode)  # exactly the original's, whatever the umask
            with open(fd, "wb") as handle:
                handle.write(content)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            # A full disk, an I/O error: the original is untouched; leave no trace.
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._sync_directory()

    def _forget(self, *session_ids: str) -> None:
        """Drop what this object knows of ``session_ids`` after a write failed
        or was interrupted part-way (Ctrl-C, a signal handler's exception): the
        next access reads them again from their files, as they are."""
        for session_id in session_ids:
            self._sessions.pop(session_id, None)
        self._all_loaded = False

    def _touch(self, session: _Session, mtime: float | None = None) -> None:
        """Record a change to ``session``: its file's mtime and the order of changes."""
        session.mtime = session.path.stat().st_mtime if mtime is None else mtime
        self._activity += 1
        session.activity = self._activity

    # -- metadata ----------------------------------------------------------------

    @staticmethod
    def _meta_path(path: Path) -> Path:
        return path.with_name(path.name + METADATA_SUFFIX)

    def _load_meta(self, session: _Session) -> None:
        """Read the session's metadata file (owner: once; read-only: every time)."""
        if session.meta_loaded and not self.read_only:
            return
        path = self._meta_path(session.path)
        try:
            data, _ = _read_regular(path)
        except FileNotFoundError:
            session.meta, session.base = None, 0
        except OSError as exc:
            raise StorageUnavailableError(f"cannot read {path}: {exc}") from exc
        else:
            session.base, session.meta = read_metadata_file(data, str(path), session.session_id)
        session.meta_loaded = True

    def _write_meta(self, session: _Session, meta: bytes | None, base: int) -> None:
        """Replace the session's metadata file atomically (temporary file + rename)."""
        header = orjson.dumps({"agentlog": 1, "session": session.session_id, "base": base})
        body = b"null" if meta is None else meta
        self._write_new(self._meta_path(session.path), header + b"\n" + body)
        session.meta, session.base, session.meta_loaded = meta, base, True

    def _forget_meta(self, path: Path) -> None:
        """Remove a metadata file left without its session (the session is new)."""
        with contextlib.suppress(FileNotFoundError):
            self._meta_path(path).unlink()

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        with self._lock:
            self._check_open()
            session = self._session(session_id)
            if session is None:
                return None, 0
            self._load_meta(session)
            return session.meta, session.base + session.head

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        with self._lock:
            self._check_open()
            self._check_writable()
            session = self._session(session_id)
            revision = 0
            if session is not None:
                self._load_meta(session)
                revision = session.base + session.head
            if revision != expected_revision:
                raise metadata_conflict(session_id, expected_revision, revision)
            try:
                if session is None:
                    path = self.directory / session_file_name(session_id)
                    self._forget_meta(path)
                    self._write_new(path, _header(session_id, ts))
                    self._sessions.pop(session_id, None)
                    session = self._session(session_id)
                    assert session is not None
                self._write_meta(session, data, revision + 1 - session.head)
                self._touch(session, ts)
            except BaseException as exc:
                self._forget(session_id)  # read it again as it is on disk
                if not isinstance(exc, OSError):
                    raise
                raise StorageUnavailableError(
                    f"setting the metadata of {session_id!r} failed: {exc}"
                ) from exc
            return revision + 1

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        with self._lock:
            self._check_open()
            self._check_writable()
            session = self._session(session_id)
            head = 0 if session is None else session.head
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(session_id, expected_head, head)
            if not batch:
                return head
            end = head + len(batch)
            lines = [
                _line(seq, end, ts, payload) for seq, (_, payload) in enumerate(batch, head + 1)
            ]
            body = b"".join(lines)
            new = session is None
            if session is None:
                path, committed = self.directory / session_file_name(session_id), 0
            else:
                path, committed = session.path, session.offsets[-1]
            try:
                if session is None:
                    self._forget_meta(path)
                    header = _header(session_id, ts)
                    # Empty, or a header that never completed (nothing of it returned).
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                    fd = _open_regular(path, flags, self.file_mode)
                    offsets = array("q", [len(header)])
                    content = header + body
                else:
                    fd = _open_regular(path, os.O_WRONLY | os.O_APPEND)
                    offsets = session.offsets
                    content = body
                try:
                    if new:
                        os.ftruncate(fd, 0)
                    written = os.write(fd, content)
                    if written != len(content):
                        raise OSError(errno.EIO, f"short write to {path}")
                    if self.fsync:
                        os.fsync(fd)
                    mtime = os.fstat(fd).st_mtime
                finally:
                    os.close(fd)
                if new:
                    self._sync_directory()
                position = offsets[-1]
                for line in lines:
                    position += len(line)
                    offsets.append(position)
                if session is None:
                    session = _Session(session_id, path, offsets, mtime)
                    self._sessions[session_id] = session
                self._touch(session, mtime)
            except BaseException as exc:
                # Failed, or interrupted (Ctrl-C, a signal handler's exception)
                # part-way: what this object knew of the session is read again
                # from the file on the next access.
                self._forget(session_id)
                if not isinstance(exc, OSError):
                    raise  # the batch is stored or not, as the file says
                # A failure is reported, so nothing of the batch may stay.
                with contextlib.suppress(OSError):
                    if new:
                        path.unlink()
                    else:
                        os.truncate(path, committed)
                raise StorageUnavailableError(f"append to {session_id!r} failed: {exc}") from exc
            return end

    @staticmethod
    def _events_through(session: _Session, to_seq: int, data: bytes) -> tuple[bytes, bool]:
        """The event lines 1..``to_seq`` of ``data`` (the file from offset 0),
        with the batch that ``to_seq`` falls in closed at ``to_seq``, and
        whether any line had to be rewritten for that."""
        offsets = session.offsets
        keep = to_seq
        closing: builtins.list[bytes] = []
        if to_seq:
            batch_end = _record(session, to_seq, data[offsets[to_seq - 1] : offsets[to_seq]])["end"]
            # Every line of a batch carries the same end; rewrite those up to to_seq.
            while batch_end != to_seq and keep >= 1:
                line = data[offsets[keep - 1] : offsets[keep]]
                record = _record(session, keep, line)
                if record["end"] != batch_end:
                    break
                payload = _payload(line)
                crc = record.get("crc")
                if crc is not None and zlib.crc32(payload) != crc:
                    # Rewriting it would give the damage a fresh checksum.
                    raise damaged_event(session.session_id, keep, "payload checksum mismatch")
                closing.append(_line(keep, to_seq, record["ts"], payload))
                keep -= 1
        return data[offsets[0] : offsets[keep]] + b"".join(reversed(closing)), bool(closing)

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        with self._lock:
            self._check_open()
            self._check_writable()
            session = self._session(session_id)
            if session is None:
                return 0
            if to_seq >= session.head:
                return session.head
            try:
                # The revision (base + head) must rise though the head falls:
                # the new base is written first, so a crash can only leave it higher.
                self._load_meta(session)
                self._write_meta(session, session.meta, session.base + session.head - to_seq + 1)
                base = session.base
                data, st = _read_regular(session.path, 0, session.offsets[to_seq])
                header = data[: session.offsets[0]]
                body, rewritten = self._events_through(session, to_seq, data)
                if not rewritten:
                    # A batch boundary: cutting the file is one atomic step.
                    fd = _open_regular(session.path, os.O_WRONLY)
                    try:
                        os.ftruncate(fd, session.offsets[to_seq])
                        if self.fsync:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    del session.offsets[to_seq + 1 :]
                else:
                    self._write_new(session.path, header + body, stat.S_IMODE(st.st_mode))
                    meta = session.meta
                    self._sessions.pop(session_id)
                    session = self._session(session_id)
                    assert session is not None
                    session.meta, session.base, session.meta_loaded = meta, base, True
                self._touch(session)
            except BaseException as exc:
                self._forget(session_id)  # read it again as it is on disk
                if not isinstance(exc, OSError):
                    raise
                raise StorageUnavailableError(
                    f"truncate of {session_id!r} to {to_seq} failed: {exc}"
                ) from exc
            return to_seq

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        with self._lock:
            self._check_open()
            self._check_writable()
            source = self._session(session_id)
            if source is None:
                raise SessionNotFoundError(f"no session {session_id!r} to fork")
            if at_seq > source.head:
                raise ValueError(
                    f"cannot fork {session_id!r} at {at_seq}: its head is {source.head}"
                )
            if self._session(new_session_id) is not None:
                raise SessionExistsError(f"session {new_session_id!r} already exists")
            try:
                data, _ = _read_regular(source.path, 0, source.offsets[at_seq])
                body, _ = self._events_through(source, at_seq, data)
                path = self.directory / session_file_name(new_session_id)
                self._forget_meta(path)
                self._write_new(path, _header(new_session_id, ts) + body)
                self._sessions.pop(new_session_id, None)
                forked = self._session(new_session_id)
                assert forked is not None
                self._touch(forked)
            except BaseException as exc:
                self._forget(new_session_id)  # read it again as it is on disk
                if not isinstance(exc, OSError):
                    raise
                raise StorageUnavailableError(
                    f"fork of {session_id!r} at {at_seq} into {new_session_id!r} failed: {exc}"
                ) from exc
            return at_seq

    def _delete(self, session_id: str) -> None:
        with self._lock:
            self._check_open()
            self._check_writable()
            session = self._session(session_id)
            if session is None:
                return
            try:
                with contextlib.suppress(FileNotFoundError):
                    session.path.unlink()
                # After the log: a crash in between leaves a metadata file that the
                # next session of this id removes before it starts.
                self._forget_meta(session.path)
                self._sync_directory()
            except BaseException:
                self._forget(session_id)  # deleted or not, as the directory says
                raise
            self._sessions[session_id] = None

    # -- reading -----------------------------------------------------------------

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        if not self.read_only:
            return self._scan_once(session_id, since_seq, limit)
        # The owner may change the file between looking at it and reading it:
        # read it again from the start, and believe damage only when it stays.
        for _ in range(2):
            try:
                return self._scan_once(session_id, since_seq, limit)
            except CorruptDatabaseError:
                with self._lock:
                    self._sessions.pop(session_id, None)
        return self._scan_once(session_id, since_seq, limit)

    def _scan_once(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        with self._lock:
            self._check_open()
            session = self._session(session_id)
            if session is None or since_seq >= session.head:
                return []
            last = min(session.head, since_seq + limit)
            start, stop = session.offsets[since_seq], session.offsets[last]
            try:
                data, st = _read_regular(session.path, start, stop - start)
                if self.read_only and _stamp(st) != session.stamp:
                    raise CorruptDatabaseError(f"{session.path} changed while it was read")
            except FileNotFoundError:
                if self.read_only:
                    self._sessions.pop(session_id, None)
                    return []  # deleted by its owner
                raise
        if len(data) != stop - start:
            raise CorruptDatabaseError(f"{session.path} is shorter than its log")
        if first_bad_crc_line is not None and first_bad_crc_line(data) >= 0:
            # The C engine's loop found a line whose crc does not match.
            raise _first_damaged(session, since_seq, data[:-1].split(b"\n"))
        try:
            records = orjson.loads(b"[" + data[:-1].replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            raise _first_damaged(session, since_seq, data[:-1].split(b"\n")) from None
        if len(records) != data.count(b"\n"):
            raise _first_damaged(session, since_seq, data[:-1].split(b"\n"))
        if first_bad_crc_line is None:
            _check_crcs(session, since_seq, data, records)
        events = []
        for seq, record in enumerate(records, since_seq + 1):
            if record.get("seq") != seq:
                raise CorruptDatabaseError(
                    f"{session.path}: line {seq} holds seq {record.get('seq')}"
                )
            event = record["event"]
            events.append(
                _new_stored(StoredEvent, (seq, seq - 1, record["ts"], event["type"], event))
            )
        return events

    def _change_token(self, session_id: str) -> tuple[int, int, int] | None:
        if not self.read_only:
            return None  # the owner: nobody else writes the directory
        # Beside the owner, its writes show as the file's inode, size and mtime.
        try:
            return _stamp((self.directory / session_file_name(session_id)).stat())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageUnavailableError(f"cannot look at {session_id!r}: {exc}") from exc

    def try_read(self, read: Callable[[], _T]) -> _T | WouldWait:
        """``read()``, unless a write under way holds this store (see
        :meth:`BaseCheckpointer.try_read`)."""
        if not self._lock.acquire(blocking=False):
            return WOULD_WAIT
        try:
            return read()
        finally:
            self._lock.release()

    def _head(self, session_id: str) -> int:
        with self._lock:
            self._check_open()
            session = self._session(session_id)
            return 0 if session is None else session.head

    def _list(self) -> builtins.list[SessionInfo]:
        with self._lock:
            self._check_open()
            self._load_all()
            found = [s for s in self._sessions.values() if s is not None]
        found.sort(key=lambda s: (s.mtime, s.activity), reverse=True)
        return [SessionInfo(s.session_id, s.mtime, s.head) for s in found]

    def check_integrity(
        self, deep: bool = False, progress: Progress | None = None
    ) -> tuple[bool, str]:
        """Read every session file and check each committed line: ``(True, "ok")``,
        or ``(False, detail)`` with one line per damaged file. ``progress``, if
        given, is told ``(files checked, files in all)`` as it goes.

        ``deep=True`` also checks every event line against its checksum, and
        lists each damaged event on a line of its own (see :meth:`damaged_events`).
        A torn tail (what a crash leaves) is not damage; files that are not
        agentlog session files are left out, as :meth:`list` leaves them out.
        Metadata files are checked too (each must be whole, valid JSON).
        Changes nothing.
        """
        with self._lock:
            self._check_open()
            problems = []
            paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
            for done, path in enumerate(paths, 1):
                # Deep: each damaged event on its own line, instead of the file's first.
                damaged = describe_damage(_damaged_lines(path)) if deep else []
                problem = None if damaged else _check_session_file(path)
                problems += damaged if problem is None else [problem]
                if progress is not None:
                    progress(done, len(paths))
            problems += [
                problem
                for path in sorted(self.directory.glob(f"*{_SUFFIX}{METADATA_SUFFIX}"))
                if (problem := _check_metadata_file(path)) is not None
            ]
        return (not problems, "\n".join(problems) or "ok")

    def damaged_events(self) -> builtins.list[DamagedEvent]:
        """Every damaged event line of every session file: its event does not
        match its checksum or does not decode (``tenant`` is ``""``: a file
        store has none)."""
        with self._lock:
            self._check_open()
            paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
            return [d for path in paths for d in _damaged_lines(path)]

    def _close(self) -> None:
        with self._lock:
            self._sessions.clear()
            if self._lock_fd is not None:
                self._finalizer()  # closes the lock file: releases the directory
                self._lock_fd = None

    _forked_from: int | None = None

    def _check_open(self) -> None:
        if self._closed:
            if self._forked_from is not None:
                raise CheckpointerClosedError(
                    f"this FileCheckpointer of {self.directory} was opened in process "
                    f"{self._forked_from}, before os.fork(): the directory has one owner; "
                    "open it again in this process (after the owner closes it)"
                )
            raise CheckpointerClosedError("this FileCheckpointer is closed")

    def abandon_after_fork(self) -> None:
        """In a child of ``os.fork()`` (called by the fork hook): refuse every
        later use — the parent still owns the directory — without touching the
        parent's lock file; a fresh lock, as a parent thread may have held it.
        A read-only one owns nothing: it goes on reading, on its fresh lock."""
        self._lock = threading.RLock()
        if self.read_only:
            return
        self._forked_from = self._pid
        self._closed = True
        if self._lock_fd is not None:
            self._finalizer.detach()
            self._lock_fd = None


def _check_crcs(
    session: _Session, since_seq: int, data: bytes, records: builtins.list[Any]
) -> None:
    """Each line's event bytes against its crc, in Python (without the C engine):
    two lists compared (their loops in C); a page that differs anywhere (damage,
    or lines written before checksums) is looked at line by line."""
    lines = data[:-1].split(b"\n")
    find = bytes.find
    payloads = [line[find(line, _EVENT_KEY, 20) + 8 : -1] for line in lines]
    if list(map(zlib.crc32, payloads)) != [record.get("crc") for record in records]:
        for record, payload in zip(records, payloads, strict=True):
            crc = record.get("crc")
            if crc is not None and zlib.crc32(payload) != crc:
                raise _first_damaged(session, since_seq, lines)


def _first_damaged(
    session: _Session, since_seq: int, lines: builtins.list[bytes]
) -> CorruptDatabaseError:
    """The error naming the first damaged line of a page (read after ``since_seq``)."""
    for seq, line in enumerate(lines, since_seq + 1):
        problem = _line_problem(line)
        if problem is not None:
            return damaged_event(session.session_id, seq, f"{session.path}: {problem}")
    return CorruptDatabaseError(f"{session.path}: the page's lines do not decode one to one")


# File stores open in this process; a fork child abandons each (see
# FileCheckpointer.abandon_after_fork).
_LIVE_FILE_STORES: weakref.WeakSet[FileCheckpointer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_LIVE_FILE_STORES):
        if not store.closed:
            store.abandon_after_fork()
    _LIVE_FILE_STORES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
