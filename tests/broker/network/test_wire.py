"""broker.network.wire: the channel's JSON batches, and what the receiver refuses as malformed (2337)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.network import wire
from queues.errors import MQError
from queues.names import NAME_PATTERN
from queues.reasons import Reason

FRAMES = st.builds(
    wire.Frame,
    data=st.binary(max_size=200),
    expiry=st.one_of(st.just(-1), st.integers(min_value=1, max_value=2**31 - 1)),
)
BATCHES = st.builds(
    wire.Batch,
    sender=st.from_regex(NAME_PATTERN, fullmatch=True),
    epoch=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    number=st.integers(min_value=1, max_value=2**63 - 1),
    frames=st.lists(FRAMES, max_size=5).map(tuple),
)


@given(BATCHES)
def test_a_batch_survives_the_round_trip(batch: wire.Batch) -> None:
    assert wire.decode(wire.encode(batch)) == batch


def test_the_encoding_is_compact_readable_json() -> None:
    payload = wire.encode(wire.Batch("QMB", "e" * 32, 7, (wire.Frame(b"\x00\xffhi", 250),)))
    assert payload == (
        b'{"sender":"QMB","epoch":"' + b"e" * 32 + b'","batch":7,'
        b'"messages":[{"data":"AP9oaQ==","expiry":250}]}'
    )


def document(**changes: Any) -> bytes:
    """A well-formed batch with some members replaced (or removed, given ``None``)."""
    base: dict[str, Any] = {
        "sender": "QMB",
        "epoch": "0123456789abcdef0123456789abcdef",
        "batch": 1,
        "messages": [{"data": base64.b64encode(b"frame").decode(), "expiry": -1}],
    }
    base.update(changes)
    return json.dumps({k: v for k, v in base.items() if v is not None}).encode()


def frame(**changes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"data": "ZnJhbWU=", "expiry": -1, **changes}
    return {k: v for k, v in item.items() if v is not None}


def test_the_largest_batch_allowed_is_accepted() -> None:
    batch = wire.decode(document(messages=[frame()] * wire.MAX_BATCH_MESSAGES))
    assert len(batch.frames) == wire.MAX_BATCH_MESSAGES == 1000
    assert batch.frames[0] == wire.Frame(b"frame", -1)


MALFORMED = {
    "not JSON": b"{sender:",
    "not UTF-8": b'{"sender":"\xff"}',
    "a JSON array": b"[]",
    "nested past the recursion limit": b"[" * 100_000,
    "no sender": document(sender=None),
    "no epoch": document(epoch=None),
    "no batch number": document(batch=None),
    "no messages": document(messages=None),
    "a message without data": document(messages=[frame(data=None)]),
    "a message without expiry": document(messages=[frame(expiry=None)]),
    "data that is not base64": document(messages=[frame(data="@@not base64@@")]),
    "data that is not a string": document(messages=[frame(data=12)]),
    "an expiry that is not a number": document(messages=[frame(expiry="soon")]),
    "an expiry of 0": document(messages=[frame(expiry=0)]),
    "an expiry below -1": document(messages=[frame(expiry=-5)]),
    "an expiry wider than the MQMD field": document(messages=[frame(expiry=2**31)]),
    "messages that are not a list": document(messages="ZnJhbWU="),
    "batch 0": document(batch=0),
    "a negative batch": document(batch=-3),
    "a batch number beyond 64 bits": document(batch=2**63),
    "a batch number as text": document(batch="1"),
    "a batch number that is a boolean": document(batch=True),
    "a sender that is not a string": document(sender=["QMB"]),
    "an empty sender": document(sender=""),
    "an epoch that is not a string": document(epoch=[1, 2]),
    "an empty epoch": document(epoch=""),
    "an epoch longer than 32 characters": document(epoch="e" * 33),
    "too many messages": document(messages=[frame()] * (wire.MAX_BATCH_MESSAGES + 1)),
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_batch_is_2337(payload: bytes) -> None:
    with pytest.raises(MQError) as refused:
        wire.decode(payload)
    assert refused.value.reason == Reason.MQRC_RFH_PARM_ERROR
    assert refused.value.detail
