"""The file backend: one JSONL file per session, owned by one process.

:mod:`.format` is the files' format (session files, their lines, metadata
files) and describes it; :mod:`.ownership` the directory's owner (an OS lock,
given up in a fork child) and the safe opening of its files; :mod:`.checks`
the integrity checks; :mod:`.checkpointer` the :class:`FileCheckpointer`.
"""

from __future__ import annotations

from .checkpointer import FileCheckpointer
from .format import (
    METADATA_SUFFIX,
    parse_session_file,
    read_metadata_file,
    read_session_file,
    session_file_name,
    session_file_origin,
)
from .ownership import is_file_store

__all__ = [
    "METADATA_SUFFIX",
    "FileCheckpointer",
    "is_file_store",
    "parse_session_file",
    "read_metadata_file",
    "read_session_file",
    "session_file_name",
    "session_file_origin",
]
