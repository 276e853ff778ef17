"""An append's arrays in PostgreSQL's binary array format, built in C-level loops.

psycopg dumps a Python list to a binary array element by element in Python
(a dumper call and a ``struct`` pack for each): for a 100-event append's
three arrays that was a fifth of the client's time, and about as long as
the one element of a one-event append takes to insert. Here each array is
joined in one pass (``bytes.join`` over ``struct`` packs, no Python-level
loop) and handed to psycopg already dumped, through a dumper of its own
for each wrapper type (:func:`adapt` registers them on a connection).

The format (``array_recv``): the number of dimensions, whether any element
is NULL, the elements' type; each dimension's length and lower bound; then
each element as its length (``int4``) and its bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any

import psycopg
from psycopg.adapt import AdaptersMap, Buffer, Dumper, PyFormat
from psycopg.pq import Format

__all__ = ["ByteaArray", "Int8Array", "TextArray", "adapt"]

_HEADER = struct.Struct(">iiIii")
_EMPTY = struct.Struct(">iiI")
_length = struct.Struct(">i").pack
# The element types' oids (pg_type): what each array holds.
_BYTEA, _TEXT, _INT8 = 17, 25, 20


def _header(element_oid: int, count: int) -> bytes:
    if not count:
        return _EMPTY.pack(0, 0, element_oid)  # no dimension: the empty array
    return _HEADER.pack(1, 0, element_oid, count, 1)


def _varlena(element_oid: int, elements: Sequence[bytes]) -> bytes:
    """An array of variable-length elements (each its length, then its bytes)."""
    lengths = map(_length, map(len, elements))
    items = chain.from_iterable(zip(lengths, elements, strict=True))
    return b"".join(chain((_header(element_oid, len(elements)),), items))


# A bigint element: its length (8), then the value.
_int8 = struct.Struct(">iq").pack


class _Dumped:
    """An array already in the binary format (its ``data``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class ByteaArray(_Dumped):
    """A ``bytea[]`` of ``values``."""

    __slots__ = ()

    def __init__(self, values: Sequence[bytes]) -> None:
        super().__init__(_varlena(_BYTEA, values))


class TextArray(_Dumped):
    """A ``text[]`` of ``values`` (ASCII: event types; the bytes are the same
    in every client encoding)."""

    __slots__ = ()

    def __init__(self, values: Sequence[str]) -> None:
        super().__init__(_varlena(_TEXT, [value.encode("ascii") for value in values]))


class Int8Array(_Dumped):
    """A ``bigint[]`` of ``values``."""

    __slots__ = ()

    def __init__(self, values: Sequence[int]) -> None:
        items = map(_int8, repeat(8, len(values)), values)
        super().__init__(b"".join(chain((_header(_INT8, len(values)),), items)))


def _dumper(array_oid: int) -> type[Dumper]:
    class _ArrayDumper(Dumper):
        format = Format.BINARY
        oid = array_oid

        def dump(self, obj: Any) -> Buffer:
            data: bytes = obj.data
            return data

    return _ArrayDumper


# The array types' oids (pg_type): bytea[], text[], bigint[].
_DUMPERS: dict[type[_Dumped], type[Dumper]] = {
    ByteaArray: _dumper(1001),
    TextArray: _dumper(1009),
    Int8Array: _dumper(1016),
}


def _register(adapters: AdaptersMap) -> None:
    for cls, dumper in _DUMPERS.items():
        adapters.register_dumper(cls, dumper)


def adapt(adapters: AdaptersMap) -> None:
    """Make a connection's ``adapters`` dump the arrays of this module (once:
    a connection made after this module was imported has them already)."""
    try:
        adapters.get_dumper(Int8Array, PyFormat.BINARY)
    except psycopg.ProgrammingError:  # a connection made before this module was imported
        _register(adapters)


# Every connection made from now on starts with them.
_register(psycopg.adapters)
