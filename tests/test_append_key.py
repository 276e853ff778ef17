"""The append key's digest (``AppendKey.of``): its definition, pinned.

A key stored by one release must match a repeat of the same append after an
upgrade, so the digest is a fixed function of the events: BLAKE2b (16 bytes)
over ``len(type):type len(json):json`` of each event, ``json`` being its
payload decoded and re-encoded by orjson with sorted keys. The vectors below
were computed by the release before the digest's loop was rewritten; the
property tests hold any JSON value to the definition written out here, and
to what it promises (key order does not count; count, type and value do).
Runs in about a second.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from agentlog.errors import StorageDataError
from agentlog.events import AppendKey, EncodedBatch, encode_events

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KINDS = ("user", "assistant", "tool_started", "tool_result", "summary", "context_view")


def reference_digest(batch: EncodedBatch) -> bytes:
    """The digest's definition, written out independently of ``AppendKey.of``."""
    digest = hashlib.blake2b(digest_size=16)
    for kind, data in batch:
        canonical = orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)
        digest.update(f"{len(kind)}:{kind}{len(canonical)}:".encode())
        digest.update(canonical)
    return digest.digest()


# What encode_events takes: JSON values (tuples too), unicode without
# surrogates, floats without NaN/Infinity, integers within 64 bits (signed, and
# unsigned up to 2**64 - 1).
unicode = st.characters(exclude_categories=["Cs"])  # no surrogates
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(unicode, max_size=12)
)
keys = st.text(unicode, max_size=6)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def events(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    fields = draw(st.dictionaries(keys.filter(lambda k: k != "type"), values, max_size=5))
    event: dict[str, Any] = {"type": kind, **fields}
    for required in ("content", "tool_use_id"):
        if event.get(required) is None:
            event[required] = "x"
    return event


def reordered(value: Any) -> Any:
    """``value`` with every mapping's keys in reverse order (tuples as lists)."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, (list, tuple)):
        return [reordered(v) for v in value]
    return value


def test_digest_of_a_known_batch_is_what_the_release_before_stored() -> None:
    batch = encode_events(
        [
            {
                "type": "user",
                "content": "héllo ✓",
                "meta": {"z": 1, "a": [1.5, -0.0, 1e16, None, True]},
            },
            {"type": "tool_result", "tool_use_id": "t1", "content": ("x", 2**63), "error": False},
            {"type": "summary", "content": "done", "n": 18446744073709551615},
        ]
    )
    assert AppendKey.of("k", batch) == ("k", bytes.fromhex("58f7f7b3b8adfbd0fcf2b38b6ed96a7d"))


def test_a_type_outside_the_known_ones_keeps_its_header_in_characters() -> None:
    # Not what encode_events yields, but the definition covers any batch.
    batch = [("ünknown", b'{"b":1,"a":2}')]
    key = AppendKey.of("k", batch)
    assert key.digest == bytes.fromhex("f4bff23eea16590250464300a846d9cc")
    assert key.digest == reference_digest(batch)


def test_a_bad_key_is_refused_with_a_typed_error() -> None:
    with pytest.raises(StorageDataError):
        AppendKey.of("a/b", encode_events([{"type": "user", "content": "hi"}]))


@settings(max_examples=150, deadline=None)
@given(st.lists(events(), min_size=1, max_size=4))
def test_digest_is_the_definition_and_ignores_key_order(batch_events: list[dict[str, Any]]) -> None:
    batch = encode_events(batch_events)
    digest = AppendKey.of("k", batch).digest
    assert digest == reference_digest(batch)
    assert AppendKey.of("k", encode_events([reordered(e) for e in batch_events])).digest == digest


@settings(max_examples=100, deadline=None)
@given(st.lists(events(), min_size=1, max_size=3), st.data())
def test_digest_tells_count_type_and_value_apart(
    batch_events: list[dict[str, Any]], data: Any
) -> None:
    digest = AppendKey.of("k", encode_events(batch_events)).digest
    # One event fewer, or one more.
    assert AppendKey.of("k", encode_events(batch_events[:-1])).digest != digest
    assert AppendKey.of("k", encode_events([*batch_events, batch_events[0]])).digest != digest
    # Another type for one event.
    index = data.draw(st.integers(0, len(batch_events) - 1))
    other = data.draw(st.sampled_from([k for k in KINDS if k != batch_events[index]["type"]]))
    changed = [dict(e) for e in batch_events]
    changed[index]["type"] = other
    assert AppendKey.of("k", encode_events(changed)).digest != digest
    # Another value for one field.
    changed = [dict(e) for e in batch_events]
    changed[index]["content"] = [changed[index]["content"]]
    assert AppendKey.of("k", encode_events(changed)).digest != digest
