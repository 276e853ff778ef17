"""Who may touch a file store's directory, and how its files are opened.

One process owns the directory: an exclusive OS file lock on its lock file
(:data:`LOCK_NAME`), held until the checkpointer closes. A child of
``os.fork()`` inherits the lock but not the ownership: every owner this
process has is abandoned in the child (:func:`abandon_in_fork_children`).
Session files are opened by their own name only (:func:`open_regular`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

# A fork child abandons a file store as it does a SQLite engine: one registry.
from ...engine.forks import abandon_in_fork_children
from ...errors import (
    CorruptDatabaseError,
    DirectoryLockedError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from ...files import directory_mode
from .format import SUFFIX, is_header

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "abandon_in_fork_children",
    "file_stamp",
    "have_file_locks",
    "is_file_store",
    "is_regular",
    "lock_directory",
    "log",
    "not_regular",
    "open_regular",
    "read_regular",
    "require_store",
]

#: The lock file whose OS lock makes a process the directory's owner.
LOCK_NAME = ".agentlog.lock"
# Session files are opened by their own name only: never through a symbolic
# link, never a FIFO or device planted under a session's name.
#: Operators' news of the file store: refused files, repaired tails (never a
#: session's file name: it is the session's id).
log = logging.getLogger("agentlog.file")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


def file_stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What changes whenever a session file changes: inode, size and mtime."""
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def not_regular(path: Path | str) -> CorruptDatabaseError:
    """The error for a symbolic link or special file found under a store's name
    (told to the operator, the directory named, not the file)."""
    log.warning(
        "refused a file in %s: not a regular file (a symbolic link or a special file)",
        Path(path).parent,
    )
    return CorruptDatabaseError(
        f"{path} is not a regular file (a symbolic link or a special file): "
        "agentlog neither follows nor writes through one"
    )


def open_regular(path: Path | str, flags: int, mode: int = 0o600) -> int:
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
                raise not_regular(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (flags & _WRITE_FLAGS and st.st_nlink > 1):
            raise not_regular(path)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, start: int = 0, size: int = -1) -> tuple[bytes, os.stat_result]:
    """``size`` bytes of ``path`` from ``start`` (all with -1) and its stat,
    opened as :func:`open_regular` opens."""
    fd = open_regular(path, os.O_RDONLY)
    with open(fd, "rb") as handle:
        st = os.fstat(fd)
        if start:
            handle.seek(start)
        return handle.read(size), st


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file by its own name (not through a link)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_file_store(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a file store: the backend's lock file, or at
    least one session file. Reads only."""
    path = Path(directory)
    if not path.is_dir():
        return False
    if (path / LOCK_NAME).is_file():
        return True
    for candidate in path.glob(f"*{SUFFIX}"):
        if not is_regular(candidate):
            continue
        try:
            fd = open_regular(candidate, os.O_RDONLY)
        except (OSError, CorruptDatabaseError):
            continue
        with open(fd, "rb") as handle:
            first = handle.readline(1 << 16)
        if is_header(first):
            return True
    return False


def require_store(directory: Path) -> None:
    """Refuse a directory that holds no file store, changing nothing."""
    if not directory.exists():
        raise StorageNotFoundError(f"no such directory: '{directory}'")
    if not directory.is_dir():
        raise StorageNotFoundError(f"'{directory}' is not a directory")
    if not is_file_store(directory):
        raise StorageNotFoundError(
            f"'{directory}' holds no agentlog file store (no {LOCK_NAME}, no session files)"
        )


def have_file_locks() -> bool:
    """Whether this platform has the POSIX file locks ownership needs."""
    return fcntl is not None


def lock_directory(directory: Path, file_mode: int) -> int:
    """Make this process the owner of ``directory`` (created if missing, with
    the directory mode matching ``file_mode``): the lock file's descriptor,
    holding the lock until it is closed.

    :class:`DirectoryLockedError` when another process or checkpointer owns
    it; :class:`StorageUnavailableError` when it cannot be opened or locked.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=directory_mode(file_mode))
        fd = open_regular(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, file_mode)
    except CorruptDatabaseError as exc:
        raise StorageUnavailableError(f"cannot open {directory}: {exc}") from None
    except OSError as exc:
        raise StorageUnavailableError(f"cannot open {directory}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise DirectoryLockedError(
                f"{directory} is in use by another process or checkpointer"
            ) from None
        raise StorageUnavailableError(f"cannot lock {directory}: {exc}") from exc
    return fd
