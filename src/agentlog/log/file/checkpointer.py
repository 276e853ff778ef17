"""The file backend's checkpointer: one JSONL file per session, owned by one process.

The files' format is :mod:`.format`'s, a session's state :mod:`.state`'s,
the directory's ownership and the safe opening of its files
:mod:`.ownership`'s, the integrity checks :mod:`.checks`'.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import secrets
import stat
import threading
import weakref
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ...errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    StorageUnavailableError,
    damaged_event,
    fork_past_head,
    no_session_to_fork,
    session_exists,
)
from ...events import AppendKey, EncodedBatch, RawEvent, SessionInfo, StoredEvent
from ...files import DEFAULT_FILE_MODE, check_file_mode
from ...integrity import DamagedEvent, Progress, describe_damage
from ..contract import (
    WOULD_WAIT,
    BaseCheckpointer,
    PreparedAppend,
    WouldWait,
    metadata_conflict,
)
from .checks import check_metadata_file, check_session_file, damaged_lines
from .format import (
    METADATA_SUFFIX,
    SUFFIX,
    append_keys,
    decode_page,
    decode_record,
    event_line,
    header_line,
    header_origin,
    line_payload,
    metadata_file,
    parse_session_file,
    raw_page,
    read_metadata_file,
    session_file_name,
)
from .ownership import (
    abandon_in_fork_children,
    file_stamp,
    have_file_locks,
    is_regular,
    lock_directory,
    log,
    not_regular,
    open_regular,
    read_regular,
    require_store,
)
from .state import SessionState

__all__ = ["FileCheckpointer"]

_T = TypeVar("_T")
#: A page's events: decoded, or their JSON as the lines hold it.
_E = TypeVar("_E", StoredEvent, RawEvent)
#: How a page of whole lines becomes events (``decode_page`` or ``raw_page``).
_Page = Callable[[str, Path, int, bytes], builtins.list[_E]]


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
        if not have_file_locks():  # pragma: no cover - not POSIX
            raise StorageUnavailableError("FileCheckpointer needs POSIX file locks")
        self.directory = Path(directory)
        self.fsync = bool(fsync)
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._sessions: dict[str, SessionState | None] = {}
        self._all_loaded = False
        self._activity = 0
        self._lock_fd: int | None = None
        if self.read_only or not create:
            require_store(self.directory)
        if self.read_only:
            abandon_in_fork_children(self)
            return
        self._lock_fd = lock_directory(self.directory, self.file_mode)
        # Dropped without close(): the collector gives the directory up.
        self._finalizer = weakref.finalize(self, os.close, self._lock_fd)
        self._finalizer.atexit = False
        abandon_in_fork_children(self)
        for stale in self.directory.glob(f"*{SUFFIX}.tmp"):
            # An interrupted rewrite (the original is intact), or a link
            # planted under a temporary name: either way, not a session.
            with contextlib.suppress(OSError):
                stale.unlink()

    # -- loading -----------------------------------------------------------------

    def _session(self, session_id: str) -> SessionState | None:
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

    def _fresh(self, session_id: str) -> SessionState | None:
        cached = self._sessions.get(session_id)
        path = self.directory / session_file_name(session_id) if cached is None else cached.path
        try:
            stamp = file_stamp(path.stat())
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

    def _load(self, path: Path, expected_id: str | None) -> SessionState | None:
        try:
            data, st = read_regular(path)
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
                fd = open_regular(path, os.O_WRONLY)
                try:
                    if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
                        raise not_regular(path)  # replaced since it was read
                    os.ftruncate(fd, offsets[-1])
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StorageUnavailableError(f"cannot repair {path}: {exc}") from exc
            log.info(
                "%s: cut a torn tail of %d bytes from a session file (a crash interrupted"
                " an append: none of it was ever acknowledged)",
                self.directory,
                len(data) - offsets[-1],
            )
        session = SessionState(session_id, path, offsets, st.st_mtime, file_stamp(st))
        session.header = data[: offsets[0]]
        return session

    def _load_all(self) -> None:
        if self.read_only:
            self._reload_all()
            return
        if self._all_loaded:
            return
        known = {s.path.name for s in self._sessions.values() if s is not None}
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            if path.name in known or not is_regular(path):
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
        current: dict[str, SessionState | None] = {}
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            if not is_regular(path):
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
        tmp = path.with_name(f"{path.name[: -len(SUFFIX)]}.{secrets.token_hex(8)}{SUFFIX}.tmp")
        mode = self.file_mode if file_mode is None else file_mode
        fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
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

    @contextlib.contextmanager
    def _rewriting(self, session_id: str, what: str) -> Iterator[None]:
        """Around a rewrite of ``session_id``'s files: if it fails or is
        interrupted, what this object knows of the session is read again from
        disk, and an ``OSError`` is reported as ``"{what} failed: …"``."""
        try:
            yield
        except BaseException as exc:
            self._forget(session_id)  # read it again as it is on disk
            if not isinstance(exc, OSError):
                raise
            raise StorageUnavailableError(f"{what} failed: {exc}") from exc

    def _touch(self, session: SessionState, mtime: float | None = None) -> None:
        """Record a change to ``session``: its file's mtime and the order of changes."""
        session.mtime = session.path.stat().st_mtime if mtime is None else mtime
        self._activity += 1
        session.activity = self._activity

    # -- metadata ----------------------------------------------------------------

    @staticmethod
    def _meta_path(path: Path) -> Path:
        return path.with_name(path.name + METADATA_SUFFIX)

    def _load_meta(self, session: SessionState) -> None:
        """Read the session's metadata file (owner: once; read-only: every time)."""
        if session.meta_loaded and not self.read_only:
            return
        path = self._meta_path(session.path)
        try:
            data, _ = read_regular(path)
        except FileNotFoundError:
            session.meta, session.base = None, 0
        except OSError as exc:
            raise StorageUnavailableError(f"cannot read {path}: {exc}") from exc
        else:
            session.base, session.meta = read_metadata_file(data, str(path), session.session_id)
        session.meta_loaded = True

    def _write_meta(self, session: SessionState, meta: bytes | None, base: int) -> None:
        """Replace the session's metadata file atomically (temporary file + rename)."""
        self._write_new(
            self._meta_path(session.path), metadata_file(session.session_id, meta, base)
        )
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
            with self._rewriting(session_id, f"setting the metadata of {session_id!r}"):
                if session is None:
                    path = self.directory / session_file_name(session_id)
                    self._forget_meta(path)
                    self._write_new(path, header_line(session_id, ts))
                    self._sessions.pop(session_id, None)
                    session = self._session(session_id)
                    assert session is not None
                self._write_meta(session, data, revision + 1 - session.head)
                self._touch(session, ts)
            return revision + 1

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        return self._append_lines(session_id, batch, expected_head, ts, None)

    def _append_keyed(self, append: PreparedAppend, ts: float, key: AppendKey) -> int:
        session_id, batch, expected_head = append
        with self._lock:  # one owner process: the lock makes look-up and append one step
            self._check_open()
            self._check_writable()
            session = self._session(session_id)
            if session is not None:
                if session.keys is None:
                    try:
                        data, _ = read_regular(session.path, 0, session.offsets[-1])
                    except OSError as exc:
                        raise StorageUnavailableError(f"cannot read {session.path}: {exc}") from exc
                    session.keys = append_keys(data, session.offsets)
                found = session.keys.get(key.name)
                if found is not None:
                    return key.replay(session_id, *found)
            head = self._append_lines(session_id, batch, expected_head, ts, key)
            written = self._sessions.get(session_id)
            if written is not None and written.keys is not None:
                written.keys[key.name] = (key.digest, head)
            return head

    def _append_lines(
        self,
        session_id: str,
        batch: EncodedBatch,
        expected_head: int | None,
        ts: float,
        key: AppendKey | None,
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
                event_line(seq, end, ts, payload)
                for seq, (_, payload) in enumerate(batch[:-1], head + 1)
            ]
            lines.append(event_line(end, end, ts, batch[-1][1], key))
            body = b"".join(lines)
            new = session is None
            if session is None:
                path, committed = self.directory / session_file_name(session_id), 0
            else:
                path, committed = session.path, session.offsets[-1]
            try:
                if session is None:
                    self._forget_meta(path)
                    header = header_line(session_id, ts)
                    # Empty, or a header that never completed (nothing of it returned).
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                    fd = open_regular(path, flags, self.file_mode)
                    offsets = array("q", [len(header)])
                    content = header + body
                else:
                    fd = open_regular(path, os.O_WRONLY | os.O_APPEND)
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
                    session = SessionState(session_id, path, offsets, mtime)
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
    def _events_through(session: SessionState, to_seq: int, data: bytes) -> tuple[bytes, bool]:
        """The event lines 1..``to_seq`` of ``data`` (the file from offset 0),
        with the batch that ``to_seq`` falls in closed at ``to_seq``, and
        whether any line had to be rewritten for that."""
        offsets = session.offsets
        keep = to_seq
        closing: builtins.list[bytes] = []
        if to_seq:
            batch_end = decode_record(
                session.session_id, to_seq, data[offsets[to_seq - 1] : offsets[to_seq]]
            )["end"]
            # Every line of a batch carries the same end; rewrite those up to to_seq.
            while batch_end != to_seq and keep >= 1:
                line = data[offsets[keep - 1] : offsets[keep]]
                record = decode_record(session.session_id, keep, line)
                if record["end"] != batch_end:
                    break
                payload = line_payload(line)
                crc = record.get("crc")
                if crc is not None and zlib.crc32(payload) != crc:
                    # Rewriting it would give the damage a fresh checksum.
                    raise damaged_event(session.session_id, keep, "payload checksum mismatch")
                closing.append(event_line(keep, to_seq, record["ts"], payload))
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
            with self._rewriting(session_id, f"truncate of {session_id!r} to {to_seq}"):
                # The revision (base + head) must rise though the head falls:
                # the new base is written first, so a crash can only leave it higher.
                self._load_meta(session)
                self._write_meta(session, session.meta, session.base + session.head - to_seq + 1)
                base = session.base
                data, st = read_regular(session.path, 0, session.offsets[to_seq])
                header = data[: session.offsets[0]]
                body, rewritten = self._events_through(session, to_seq, data)
                if not rewritten:
                    # A batch boundary: cutting the file is one atomic step.
                    fd = open_regular(session.path, os.O_WRONLY)
                    try:
                        os.ftruncate(fd, session.offsets[to_seq])
                        if self.fsync:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    del session.offsets[to_seq + 1 :]
                    session.keys = None  # the cut lines took their keys along
                else:
                    self._write_new(session.path, header + body, stat.S_IMODE(st.st_mode))
                    meta = session.meta
                    self._sessions.pop(session_id)
                    session = self._session(session_id)
                    assert session is not None
                    session.meta, session.base, session.meta_loaded = meta, base, True
                self._touch(session)
            return to_seq

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        with self._lock:
            self._check_open()
            self._check_writable()
            source = self._session(session_id)
            if source is None:
                raise no_session_to_fork(session_id)
            if at_seq > source.head:
                raise fork_past_head(session_id, at_seq, source.head)
            if self._session(new_session_id) is not None:
                raise session_exists(new_session_id)
            with self._rewriting(
                new_session_id, f"fork of {session_id!r} at {at_seq} into {new_session_id!r}"
            ):
                data, _ = read_regular(source.path, 0, source.offsets[at_seq])
                body, _ = self._events_through(source, at_seq, data)
                path = self.directory / session_file_name(new_session_id)
                self._forget_meta(path)
                header = header_line(new_session_id, ts, (session_id, at_seq))
                self._write_new(path, header + body)
                self._sessions.pop(new_session_id, None)
                forked = self._session(new_session_id)
                assert forked is not None
                self._touch(forked)
            return at_seq

    def _lineage(self, session_id: str) -> tuple[str, int] | None:
        with self._lock:
            self._check_open()
            session = self._session(session_id)
            return None if session is None else self._origin(session)

    def _forks(self, session_id: str) -> builtins.list[tuple[str, int]]:
        found = []
        with self._lock:
            self._check_open()
            self._load_all()  # the headers, as list() reads them: no event is decoded
            for session in [s for s in self._sessions.values() if s is not None]:
                try:
                    origin = self._origin(session)
                except CorruptDatabaseError:
                    # Its own lineage() and check_integrity() name the damage; it
                    # cannot be told to be a fork of this session or another.
                    continue
                if origin is not None and origin[0] == session_id:
                    found.append((session.session_id, origin[1]))
        return found

    @staticmethod
    def _origin(session: SessionState) -> tuple[str, int] | None:
        """The fork origin the session file's header records."""
        if session.header is None:
            try:
                session.header = read_regular(session.path, 0, session.offsets[0])[0]
            except OSError as exc:
                raise StorageUnavailableError(f"cannot read {session.path}: {exc}") from exc
        return header_origin(session.header, str(session.path))

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
        return self._scan_with(decode_page, session_id, since_seq, limit)

    def _scan_json(self, session_id: str, since_seq: int, limit: int) -> builtins.list[RawEvent]:
        return self._scan_with(raw_page, session_id, since_seq, limit)

    def _scan_with(
        self, page: _Page[_E], session_id: str, since_seq: int, limit: int
    ) -> builtins.list[_E]:
        """Up to ``limit`` events after ``since_seq``, as ``page`` reads the lines."""
        try:
            if not self.read_only:
                return self._scan_once(page, session_id, since_seq, limit)
            # The owner may change the file between looking at it and reading it:
            # read it again from the start, and believe damage only when it stays.
            for _ in range(2):
                try:
                    return self._scan_once(page, session_id, since_seq, limit)
                except CorruptDatabaseError:
                    with self._lock:
                        self._sessions.pop(session_id, None)
            return self._scan_once(page, session_id, since_seq, limit)
        except CorruptDatabaseError as exc:
            if exc.seq is not None:  # a damaged line (a refused file is logged where refused)
                log.warning(
                    "%s: a read found event %d of a session file damaged (nothing was changed)",
                    self.directory,
                    exc.seq,
                )
            raise

    def _scan_once(
        self,
        page: _Page[_E],
        session_id: str,
        since_seq: int,
        limit: int,
    ) -> builtins.list[_E]:
        with self._lock:
            self._check_open()
            session = self._session(session_id)
            if session is None or since_seq >= session.head:
                return []
            last = min(session.head, since_seq + limit)
            start, stop = session.offsets[since_seq], session.offsets[last]
            try:
                data, st = read_regular(session.path, start, stop - start)
                if self.read_only and file_stamp(st) != session.stamp:
                    raise CorruptDatabaseError(f"{session.path} changed while it was read")
            except FileNotFoundError:
                if self.read_only:
                    self._sessions.pop(session_id, None)
                    return []  # deleted by its owner
                raise
        if len(data) != stop - start:
            raise CorruptDatabaseError(f"{session.path} is shorter than its log")
        return page(session.session_id, session.path, since_seq, data)

    def _change_token(self, session_id: str) -> tuple[int, int, int] | None:
        if not self.read_only:
            return None  # the owner: nobody else writes the directory
        # Beside the owner, its writes show as the file's inode, size and mtime.
        try:
            return file_stamp((self.directory / session_file_name(session_id)).stat())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageUnavailableError(f"cannot look at {session_id!r}: {exc}") from exc

    def _try_read(self, read: Callable[[], _T]) -> _T | WouldWait:
        """``read()``, unless a write under way holds this store (see
        :meth:`WriterPort.try_read`)."""
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
            paths = sorted(self.directory.glob(f"*{SUFFIX}"))
            for done, path in enumerate(paths, 1):
                # Deep: each damaged event on its own line, instead of the file's first.
                damaged = describe_damage(damaged_lines(path)) if deep else []
                problem = None if damaged else check_session_file(path)
                problems += damaged if problem is None else [problem]
                if progress is not None:
                    progress(done, len(paths))
            problems += [
                problem
                for path in sorted(self.directory.glob(f"*{SUFFIX}{METADATA_SUFFIX}"))
                if (problem := check_metadata_file(path)) is not None
            ]
        if problems:
            log.warning("%s: check found %d problem(s)", self.directory, len(problems))
        return (not problems, "\n".join(problems) or "ok")

    def damaged_events(self) -> builtins.list[DamagedEvent]:
        """Every damaged event line of every session file: its event does not
        match its checksum or does not decode (``tenant`` is ``""``: a file
        store has none)."""
        with self._lock:
            self._check_open()
            paths = sorted(self.directory.glob(f"*{SUFFIX}"))
            return [d for path in paths for d in damaged_lines(path)]

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
