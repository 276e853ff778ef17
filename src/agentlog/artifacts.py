"""The ArtifactStore: bytes with a media type, a sha256 and metadata (ADR-004).

Artifacts are tenant-scoped and written with compare-and-set revisions like
every store. Their bytes are content-addressed: identical content is stored
once and reference-counted, so deleting or replacing one artifact never
breaks another that shares its bytes. ``put`` accepts bytes or a readable
binary stream and ``open`` returns a stream, both moving 1 MiB at a time, so
an artifact of any size passes through without being held in memory. Every
read verifies the sha256: a tampered artifact raises
:class:`StorageDataError` instead of returning wrong bytes. ``list`` returns
metadata only.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import io
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable

from ._store_common import check_page, decode
from ._store_common import encode as _encode
from ._store_common import name as _name
from ._store_common import revision as _revision
from .errors import StorageConflictError, StorageDataError, StorageNotFoundError

__all__ = [
    "CHUNK_SIZE",
    "ArtifactInfo",
    "ArtifactStore",
    "InMemoryArtifactStore",
    "SqliteArtifactStore",
]

#: How many bytes move at a time, in and out.
CHUNK_SIZE = 1 << 20


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """An artifact's metadata (never its bytes)."""

    tenant_id: str
    artifact_id: str
    sha256: str
    size: int
    media_type: str
    metadata: Any
    revision: int
    created_at: float
    updated_at: float


def _resource(tenant_id: str, artifact_id: str) -> str:
    return f"artifact {tenant_id!r}/{artifact_id!r}"


def _media_type(value: object) -> str:
    if (
        not isinstance(value, str)
        or "/" not in value
        or not value.isprintable()
        or len(value) > 255
    ):
        raise StorageDataError(f"media_type must be like 'text/plain', not {value!r}")
    return value


def _chunks(data: bytes | bytearray | memoryview | BinaryIO) -> Iterator[bytes]:
    """The input, CHUNK_SIZE bytes at a time."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_SIZE):
            yield bytes(view[start : start + CHUNK_SIZE])
        return
    read = getattr(data, "read", None)
    if not callable(read):
        raise StorageDataError(
            f"artifact data must be bytes or a binary stream, not {type(data).__name__}"
        )
    while True:
        chunk = read(CHUNK_SIZE)
        if not chunk:
            return
        if not isinstance(chunk, (bytes, bytearray)):
            raise StorageDataError("artifact streams must be binary (read() returned text)")
        yield bytes(chunk)


class VerifyingReader(io.RawIOBase):
    """A read-only stream over an artifact's chunks that checks its sha256.

    The check happens when the last byte has been read: a mismatch (or a
    missing chunk) raises :class:`StorageDataError` instead of ending quietly.
    """

    def __init__(self, info: ArtifactInfo, chunks: Iterator[bytes]) -> None:
        self.info = info
        self._chunks = chunks
        self._digest = hashlib.sha256()
        self._buffer = b""
        self._read = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer and not self._done:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._finish()
            elif not isinstance(chunk, bytes):
                resource = _resource(self.info.tenant_id, self.info.artifact_id)
                raise StorageDataError(
                    f"{resource}: a stored chunk is not bytes (sha256 unverifiable)"
                )
            else:
                self._digest.update(chunk)
                self._read += len(chunk)
                self._buffer = chunk
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size

    def _finish(self) -> None:
        self._done = True
        resource = _resource(self.info.tenant_id, self.info.artifact_id)
        if self._read != self.info.size or self._digest.hexdigest() != self.info.sha256:
            raise StorageDataError(f"{resource}: stored bytes do not match their sha256")


@runtime_checkable
class ArtifactStore(Protocol):
    """Artifacts: bytes, media type, sha256 and metadata, tenant-scoped with CAS."""

    def put(
        self,
        tenant_id: str,
        artifact_id: str,
        data: bytes | BinaryIO,
        media_type: str,
        expected_revision: int | None,
        metadata: Any = None,
    ) -> ArtifactInfo:
        """Store (``expected_revision=None``) or replace an artifact; bytes or a stream."""
        ...

    def info(self, tenant_id: str, artifact_id: str) -> ArtifactInfo:
        """The artifact's metadata, or :class:`StorageNotFoundError`."""
        ...

    def get(self, tenant_id: str, artifact_id: str) -> tuple[ArtifactInfo, bytes]:
        """Metadata and the whole content, verified."""
        ...

    def open(self, tenant_id: str, artifact_id: str) -> VerifyingReader:
        """A stream of the content, verified when it has been read to the end."""
        ...

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[ArtifactInfo]:
        """Metadata of the tenant's artifacts in id order, ids strictly after ``after``."""
        ...

    def delete(self, tenant_id: str, artifact_id: str, expected_revision: int) -> None:
        """Remove the artifact if it is at ``expected_revision``; shared bytes stay."""
        ...


class _ArtifactStoreBase:
    """What both implementations share: checks, and get() on top of open()."""

    @staticmethod
    def _keys(tenant_id: object, artifact_id: object) -> tuple[str, str]:
        return _name("tenant_id", tenant_id), _name("artifact_id", artifact_id)

    @staticmethod
    def _next_info(
        key: tuple[str, str],
        expected: int | None,
        current: ArtifactInfo | None,
        sha256: str,
        size: int,
        media_type: str,
        metadata: Any,
        now: float,
    ) -> ArtifactInfo:
        actual = None if current is None else current.revision
        if actual != expected:
            raise StorageConflictError(_resource(*key), expected, actual)
        return ArtifactInfo(
            *key, sha256, size, media_type, metadata,
            0 if current is None else current.revision + 1,
            now if current is None else current.created_at, now,
        )  # fmt: skip

    def open(self, tenant_id: str, artifact_id: str) -> VerifyingReader:
        raise NotImplementedError

    def get(self, tenant_id: str, artifact_id: str) -> tuple[ArtifactInfo, bytes]:
        """Metadata and the whole content, verified."""
        with self.open(tenant_id, artifact_id) as reader:
            return reader.info, reader.read()


class InMemoryArtifactStore(_ArtifactStoreBase):
    """An :class:`ArtifactStore` in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs: dict[str, list[Any]] = {}  # sha256 -> [chunks, refcount]
        self._artifacts: dict[tuple[str, str], tuple[ArtifactInfo, bytes]] = {}

    def put(
        self,
        tenant_id: str,
        artifact_id: str,
        data: bytes | BinaryIO,
        media_type: str,
        expected_revision: int | None,
        metadata: Any = None,
    ) -> ArtifactInfo:
        """Store (``expected_revision=None``) or replace an artifact; bytes or a stream."""
        key = self._keys(tenant_id, artifact_id)
        expected = _revision(expected_revision)
        media = _media_type(media_type)
        meta = _encode(metadata)
        with self._lock:  # fail fast, before reading a large stream
            current = self._artifacts.get(key)
            self._next_info(key, expected, current[0] if current else None, "", 0, media, None, 0.0)
        digest, chunks = hashlib.sha256(), []
        for chunk in _chunks(data):
            digest.update(chunk)
            chunks.append(chunk)
        sha = digest.hexdigest()
        with self._lock:
            current = self._artifacts.get(key)
            info = self._next_info(
                key, expected, current[0] if current else None, sha, sum(map(len, chunks)), media,
                decode(meta, ""), time.time(),
            )  # fmt: skip
            self._blobs.setdefault(sha, [chunks, 0])[1] += 1
            if current is not None:
                self._release(current[0].sha256)
            self._artifacts[key] = (info, meta)
        return info

    def _release(self, sha: str) -> None:
        blob = self._blobs[sha]
        blob[1] -= 1
        if blob[1] == 0:
            del self._blobs[sha]

    def info(self, tenant_id: str, artifact_id: str) -> ArtifactInfo:
        """The artifact's metadata, or :class:`StorageNotFoundError`."""
        key = self._keys(tenant_id, artifact_id)
        with self._lock:
            found = self._artifacts.get(key)
        if found is None:
            raise StorageNotFoundError(f"no {_resource(*key)}")
        info, meta = found
        return ArtifactInfo(*key, info.sha256, info.size, info.media_type, decode(meta, ""),
                            info.revision, info.created_at, info.updated_at)  # fmt: skip

    def open(self, tenant_id: str, artifact_id: str) -> VerifyingReader:
        """A stream of the content, verified when it has been read to the end."""
        info = self.info(tenant_id, artifact_id)
        with self._lock:
            chunks = list(self._blobs[info.sha256][0])
        return VerifyingReader(info, iter(chunks))

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[ArtifactInfo]:
        """Metadata of the tenant's artifacts in id order, ids strictly after ``after``."""
        tenant = _name("tenant_id", tenant_id)
        start, count = check_page(after, limit)
        with self._lock:
            ids = sorted(
                a for (t, a) in self._artifacts if t == tenant and (start is None or a > start)
            )
        return [self.info(tenant, artifact_id) for artifact_id in ids[:count]]

    def delete(self, tenant_id: str, artifact_id: str, expected_revision: int) -> None:
        """Remove the artifact if it is at ``expected_revision``; shared bytes stay."""
        key = self._keys(tenant_id, artifact_id)
        expected = _revision(expected_revision)
        with self._lock:
            found = self._artifacts.get(key)
            if found is None:
                raise StorageNotFoundError(f"no {_resource(*key)}")
            if found[0].revision != expected:
                raise StorageConflictError(_resource(*key), expected, found[0].revision)
            del self._artifacts[key]
            self._release(found[0].sha256)


_INFO_COLUMNS = "sha256, size, media_type, metadata, revision, created, updated"


class SqliteArtifactStore(_ArtifactStoreBase):
    """An :class:`ArtifactStore` in the SQLite file of the session log.

    A put is one write transaction: the bytes are streamed into chunks under
    a staging key while the sha256 is computed, then either filed under that
    sha256 or, when the content is already stored, dropped in favour of the
    stored copy; the artifact row and the reference counts change in the same
    transaction.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def _info(self, conn: Any, key: tuple[str, str]) -> ArtifactInfo | None:
        rows = self._engine._rows(
            conn, f"SELECT {_INFO_COLUMNS} FROM artifacts WHERE tenant = ? AND artifact_id = ?", key
        )
        if not rows:
            return None
        sha, size, media, meta, revision, created, updated = rows[0]
        return ArtifactInfo(*key, sha, size, media, decode(meta, _resource(*key)), revision,
                            created, updated)  # fmt: skip

    def _release(self, conn: Any, sha: str) -> None:
        rows = self._engine._rows
        rows(conn, "UPDATE blobs SET refcount = refcount - 1 WHERE sha256 = ?", (sha,))
        if rows(conn, "SELECT refcount FROM blobs WHERE sha256 = ?", (sha,))[0][0] <= 0:
            rows(conn, "DELETE FROM blob_chunks WHERE sha256 = ?", (sha,))
            rows(conn, "DELETE FROM blobs WHERE sha256 = ?", (sha,))

    def put(
        self,
        tenant_id: str,
        artifact_id: str,
        data: bytes | BinaryIO,
        media_type: str,
        expected_revision: int | None,
        metadata: Any = None,
    ) -> ArtifactInfo:
        """Store (``expected_revision=None``) or replace an artifact; bytes or a stream."""
        key = self._keys(tenant_id, artifact_id)
        expected = _revision(expected_revision)
        media = _media_type(media_type)
        meta = _encode(metadata)
        rows = self._engine._rows

        def work(conn: Any) -> ArtifactInfo:
            current = self._info(conn, key)
            self._next_info(key, expected, current, "", 0, media, None, 0.0)  # fail fast
            staging = f"staging:{uuid.uuid4().hex}"
            digest, size = hashlib.sha256(), 0
            for n, chunk in enumerate(_chunks(data)):
                digest.update(chunk)
                size += len(chunk)
                rows(conn, "INSERT INTO blob_chunks (sha256, n, data) VALUES (?, ?, ?)",
                     (staging, n, chunk))  # fmt: skip
            sha = digest.hexdigest()
            if rows(conn, "SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)):
                rows(conn, "DELETE FROM blob_chunks WHERE sha256 = ?", (staging,))
                rows(conn, "UPDATE blobs SET refcount = refcount + 1 WHERE sha256 = ?", (sha,))
            else:
                rows(conn, "UPDATE blob_chunks SET sha256 = ? WHERE sha256 = ?", (sha, staging))
                rows(
                    conn, "INSERT INTO blobs (sha256, size, refcount) VALUES (?, ?, 1)", (sha, size)
                )
            if current is not None:
                self._release(conn, current.sha256)
            info = self._next_info(key, expected, current, sha, size, media, decode(meta, ""),
                                   time.time())  # fmt: skip
            rows(
                conn,
                "INSERT OR REPLACE INTO artifacts (tenant, artifact_id, sha256, size, media_type,"
                " metadata, revision, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, sha, size, media, meta, info.revision, info.created_at, info.updated_at),
            )
            return info

        return self._engine._write("artifact put", work)  # type: ignore[no-any-return]

    def info(self, tenant_id: str, artifact_id: str) -> ArtifactInfo:
        """The artifact's metadata, or :class:`StorageNotFoundError`."""
        key = self._keys(tenant_id, artifact_id)
        found = self._engine._read("artifact info", lambda conn: self._info(conn, key))
        if found is None:
            raise StorageNotFoundError(f"no {_resource(*key)}")
        return found  # type: ignore[no-any-return]

    def open(self, tenant_id: str, artifact_id: str) -> VerifyingReader:
        """A stream of the content, verified when it has been read to the end.

        Each chunk is one read; an artifact replaced or deleted while it is
        being read makes the stream fail its check rather than mix contents.
        """
        info = self.info(tenant_id, artifact_id)
        engine = self._engine

        def chunk(conn: Any, n: int) -> list[tuple[Any, ...]]:
            return engine._rows(  # type: ignore[no-any-return]
                conn, "SELECT data FROM blob_chunks WHERE sha256 = ? AND n = ?", (info.sha256, n)
            )

        def chunks() -> Iterator[bytes]:
            n = 0
            while True:
                found = engine._read("artifact read", functools.partial(chunk, n=n))
                if not found:
                    return
                yield found[0][0]
                n += 1

        return VerifyingReader(info, chunks())

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[ArtifactInfo]:
        """Metadata of the tenant's artifacts in id order, ids strictly after ``after``."""
        tenant = _name("tenant_id", tenant_id)
        start, count = check_page(after, limit)
        found = self._engine._read(
            "artifact list",
            lambda conn: self._engine._rows(
                conn,
                f"SELECT artifact_id, {_INFO_COLUMNS} FROM artifacts"
                " WHERE tenant = ? AND artifact_id > ? ORDER BY artifact_id LIMIT ?",
                (tenant, "" if start is None else start, count),
            ),
        )
        return [
            ArtifactInfo(tenant, a, sha, size, media, decode(meta, _resource(tenant, a)), rev, c, u)
            for a, sha, size, media, meta, rev, c, u in found
        ]

    def delete(self, tenant_id: str, artifact_id: str, expected_revision: int) -> None:
        """Remove the artifact if it is at ``expected_revision``; shared bytes stay."""
        key = self._keys(tenant_id, artifact_id)
        expected = _revision(expected_revision)

        def work(conn: Any) -> None:
            current = self._info(conn, key)
            if current is None:
                raise StorageNotFoundError(f"no {_resource(*key)}")
            if current.revision != expected:
                raise StorageConflictError(_resource(*key), expected, current.revision)
            self._engine._rows(
                conn, "DELETE FROM artifacts WHERE tenant = ? AND artifact_id = ?", key
            )
            self._release(conn, current.sha256)

        self._engine._write("artifact delete", work)
