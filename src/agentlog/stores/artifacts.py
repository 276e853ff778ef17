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
import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..engine import store_rows as R
from ..errors import StorageDataError
from .common import (
    EngineTransactions,
    LockedTransactions,
    Transactions,
    advance,
    check_name,
    check_revision,
    decode_value,
    encode_value,
)

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


#: An artifact's stored row: ``(sha256, size, media_type, metadata json, revision,
#: created, updated)``.
Row = tuple[str, int, str, bytes, int, float, float]


def _info(key: tuple[str, str], row: Row) -> ArtifactInfo:
    sha, size, media, meta, revision, created, updated = row
    metadata = decode_value(meta, _resource(*key))
    return ArtifactInfo(*key, sha, size, media, metadata, revision, created, updated)


class ArtifactStore(Transactions):
    """Artifacts: bytes, media type, sha256 and metadata, tenant-scoped with CAS."""

    @staticmethod
    def _key(tenant_id: object, artifact_id: object) -> tuple[str, str]:
        return check_name("tenant_id", tenant_id), check_name("artifact_id", artifact_id)

    def put(
        self,
        tenant_id: str,
        artifact_id: str,
        data: bytes | BinaryIO,
        media_type: str,
        expected_revision: int | None,
        metadata: Any = None,
    ) -> ArtifactInfo:
        """Store (``expected_revision=None``) or replace an artifact; bytes or a stream.

        One transaction: a stale revision is refused before the stream is
        read, and a stream that fails part-way writes nothing.
        """
        key = self._key(tenant_id, artifact_id)
        expected = check_revision(expected_revision)
        media = _media_type(media_type)
        meta = encode_value(metadata)

        def work(ctx: Any) -> ArtifactInfo:
            current = self._get_row(ctx, key)
            revision = advance(_resource(*key), expected, None if current is None else current[4])
            sha, size = self._store_blob(ctx, _chunks(data))
            if current is not None:
                self._release_blob(ctx, current[0])
            now = time.time()
            row = (sha, size, media, meta, revision, now if current is None else current[5], now)
            self._put_row(ctx, key, row)
            return _info(key, row)

        return self._atomic("artifact put", work)

    def info(self, tenant_id: str, artifact_id: str) -> ArtifactInfo:
        """The artifact's metadata, or :class:`StorageNotFoundError`."""
        key = self._key(tenant_id, artifact_id)
        row = self._existing("artifact info", _resource(*key), lambda ctx: self._get_row(ctx, key))
        return _info(key, row)

    def open(self, tenant_id: str, artifact_id: str) -> VerifyingReader:
        """A stream of the content, verified when it has been read to the end.

        Each chunk is one read; an artifact replaced or deleted while it is
        being read makes the stream fail its check rather than mix contents.
        """
        info = self.info(tenant_id, artifact_id)
        sha = info.sha256

        def chunks() -> Iterator[bytes]:
            for n in itertools.count():
                chunk = self._reading(
                    "artifact read", functools.partial(self._get_chunk, sha=sha, n=n)
                )
                if chunk is None:
                    return
                yield chunk

        return VerifyingReader(info, chunks())

    def get(self, tenant_id: str, artifact_id: str) -> tuple[ArtifactInfo, bytes]:
        """Metadata and the whole content, verified."""
        with self.open(tenant_id, artifact_id) as reader:
            return reader.info, reader.read()

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[ArtifactInfo]:
        """Metadata of the tenant's artifacts in id order, ids strictly after ``after``."""
        return self._page("artifact list", tenant_id, after, limit, self._select, _info)

    def delete(self, tenant_id: str, artifact_id: str, expected_revision: int) -> None:
        """Remove the artifact if it is at ``expected_revision``; shared bytes stay."""
        key = self._key(tenant_id, artifact_id)

        def remove(ctx: Any, row: Row) -> None:
            self._delete_row(ctx, key)
            self._release_blob(ctx, row[0])

        self._checked_delete(
            "artifact delete",
            _resource(*key),
            expected_revision,
            lambda ctx: self._get_row(ctx, key),
            lambda row: row[4],
            remove,
        )

    # -- what an implementation supplies ------------------------------------------------

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        raise NotImplementedError

    def _put_row(self, ctx: Any, key: tuple[str, str], row: Row) -> None:
        raise NotImplementedError

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        raise NotImplementedError

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        """``(artifact_id, row)`` in id order, ids strictly after ``after``."""
        raise NotImplementedError

    def _store_blob(self, ctx: Any, chunks: Iterator[bytes]) -> tuple[str, int]:
        """Store the content (or count one more reference to it); ``(sha256, size)``."""
        raise NotImplementedError

    def _release_blob(self, ctx: Any, sha: str) -> None:
        """Count one reference less; drop the content at zero."""
        raise NotImplementedError

    def _get_chunk(self, ctx: Any, sha: str, n: int) -> bytes | None:
        """Chunk ``n`` of the content, or ``None`` past its end."""
        raise NotImplementedError


class InMemoryArtifactStore(LockedTransactions, ArtifactStore):
    """An :class:`ArtifactStore` in this process's memory."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[tuple[str, str], Row] = {}
        self._blobs: dict[str, tuple[list[bytes], int]] = {}  # sha256 -> (chunks, refcount)

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        return self._rows.get(key)

    def _put_row(self, ctx: Any, key: tuple[str, str], row: Row) -> None:
        self._rows[key] = row

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        del self._rows[key]

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        ids = sorted(a for t, a in self._rows if t == tenant and (after is None or a > after))
        return [(a, self._rows[(tenant, a)]) for a in ids[:limit]]

    def _store_blob(self, ctx: Any, chunks: Iterator[bytes]) -> tuple[str, int]:
        digest, content = hashlib.sha256(), []
        for chunk in chunks:
            digest.update(chunk)
            content.append(chunk)
        sha = digest.hexdigest()
        stored, count = self._blobs.get(sha, (content, 0))
        self._blobs[sha] = (stored, count + 1)
        return sha, sum(map(len, stored))

    def _release_blob(self, ctx: Any, sha: str) -> None:
        stored, count = self._blobs[sha]
        if count > 1:
            self._blobs[sha] = (stored, count - 1)
        else:
            del self._blobs[sha]

    def _get_chunk(self, ctx: Any, sha: str, n: int) -> bytes | None:
        found = self._blobs.get(sha)
        return found[0][n] if found is not None and n < len(found[0]) else None


class SqliteArtifactStore(EngineTransactions, ArtifactStore):
    """An :class:`ArtifactStore` in the SQLite file of the session log.

    A put is one write transaction: the bytes are streamed into chunks under
    a staging key while the sha256 is computed, then either filed under that
    sha256 or, when the content is already stored, dropped in favour of the
    stored copy; the artifact row and the reference counts change in the same
    transaction.
    """

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        return R.artifact(ctx, *key)

    def _put_row(self, ctx: Any, key: tuple[str, str], row: Row) -> None:
        R.put_artifact(ctx, *key, row)

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        R.delete_artifact(ctx, *key)

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        return [(row[0], row[1:]) for row in R.artifacts(ctx, tenant, after, limit)]

    def _store_blob(self, ctx: Any, chunks: Iterator[bytes]) -> tuple[str, int]:
        staging = f"staging:{uuid.uuid4().hex}"
        digest, size = hashlib.sha256(), 0
        for n, chunk in enumerate(chunks):
            digest.update(chunk)
            size += len(chunk)
            R.stage_chunk(ctx, staging, n, chunk)
        sha = digest.hexdigest()
        R.file_blob(ctx, staging, sha, size)
        return sha, size

    def _release_blob(self, ctx: Any, sha: str) -> None:
        R.release_blob(ctx, sha)

    def _get_chunk(self, ctx: Any, sha: str, n: int) -> bytes | None:
        return R.blob_chunk(ctx, sha, n)
