"""Private by default: the permissions of the files and directories agentlog creates.

Agent transcripts often hold secrets (keys pasted into a chat, tool output),
so every file agentlog creates — a SQLite database and its ``-wal`` and
``-shm`` files, a file store's directory and session files, a migration's
backup — is the owner's only (``0600``, directories ``0700``) unless the
caller passes another ``file_mode``. The process umask still applies on top,
as it does to every file a process creates. Existing files keep their mode.
"""

from __future__ import annotations

import contextlib
import errno
import os

__all__ = [
    "DEFAULT_FILE_MODE",
    "check_file_mode",
    "create_private_file",
    "directory_mode",
    "remove_created",
]

#: The mode of the files agentlog creates unless told otherwise: the owner's only.
DEFAULT_FILE_MODE = 0o600

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def check_file_mode(file_mode: object) -> int:
    """``file_mode`` checked: an int of permission bits only (``0o000`` to ``0o777``)."""
    if isinstance(file_mode, bool) or not isinstance(file_mode, int):
        raise TypeError(f"file_mode must be an int such as 0o600, not {type(file_mode).__name__}")
    if not 0 <= file_mode <= 0o777:
        raise ValueError(f"file_mode must be permission bits (0o000 to 0o777), not {file_mode:#o}")
    return file_mode


def directory_mode(file_mode: int) -> int:
    """The mode of a directory holding files of ``file_mode``: who may read may list."""
    return file_mode | ((file_mode & 0o444) >> 2)


def create_private_file(path: str | os.PathLike[str], file_mode: int) -> bool:
    """Create ``path`` empty with ``file_mode`` if nothing is there (never
    through a symbolic link); whether this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, file_mode)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EROFS, errno.EISDIR):
            return False  # the open that follows reports it, in its own words
        raise
    os.close(fd)
    return True


def remove_created(path: str | os.PathLike[str]) -> None:
    """Remove a database file this process created empty and could not open,
    with the ``-wal`` and ``-shm`` files SQLite may have put beside it."""
    location = os.fspath(path)
    for name in (location + "-wal", location + "-shm", location):
        with contextlib.suppress(OSError):
            os.unlink(name)
