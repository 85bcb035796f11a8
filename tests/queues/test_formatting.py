from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.errors import MQError
from queues.formatting import body_text, describe, hexdump, message_json, mqmd_fields, parse_id
from queues.message import Message

NUL = b"\x00"
MESSAGE = Message(
    body=b"hello",
    msg_id=bytes(range(24)),
    correl_id=b"CORREL".ljust(24, NUL),
    format="MQSTR   ",
    encoding=273,
    ccsid=819,
    msg_type=1,
    report=0x40,
    reply_to_q="REPLY.Q",
    reply_to_qmgr="QM2",
    user_id="alice",
    persistence=1,
    priority=7,
    expiry=600,
    put_appl_type=6,
    put_appl_name="amqsput",
    put_date="20240229",
    put_time="12345678",
    backout_count=2,
)


# -- parse_id ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0x0102", b"\x01\x02" + NUL * 22),
        ("0X0a0B", b"\x0a\x0b" + NUL * 22),
        ("0x", NUL * 24),
        ("0x" + "ff" * 24, b"\xff" * 24),
        ("41" * 24, b"A" * 24),
        ("00" * 23 + "01", NUL * 23 + b"\x01"),
        ("AbCdEf" * 8, bytes.fromhex("abcdef" * 8)),
    ],
)
def test_0x_prefixed_or_exactly_48_hex_digits_are_hex(text, expected):
    assert parse_id(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", b"hello" + NUL * 19),
        ("cafe", b"cafe" + NUL * 20),
        ("", NUL * 24),
        ("é" * 12, ("é" * 12).encode("utf-8")),
        ("x" * 24, b"x" * 24),
    ],
)
def test_anything_else_is_utf8_text_padded_with_nuls(text, expected):
    assert parse_id(text) == expected


def test_48_characters_that_are_not_all_hex_are_text():
    text = "g" + "0" * 23
    assert parse_id(text) == text.encode()


def test_47_hex_digits_are_text_and_too_long():
    with pytest.raises(MQError) as caught:
        parse_id("a" * 47)
    assert caught.value.reason == 2026


@pytest.mark.parametrize("text", ["0xZZ", "0x123", "0xg0", "0x" + "00" * 25, "x" * 25, "é" * 13])
def test_bad_hex_or_more_than_24_bytes_is_2026(text):
    with pytest.raises(MQError) as caught:
        parse_id(text)
    assert caught.value.reason == 2026
    assert caught.value.reason_name == "MQRC_MD_ERROR"


@given(st.binary(max_size=24))
def test_hex_form_of_any_id_round_trips(raw):
    assert parse_id("0x" + raw.hex()) == raw.ljust(24, NUL)


@given(st.binary(min_size=24, max_size=24))
def test_ids_as_printed_round_trip(raw):
    assert parse_id(raw.hex()) == raw


# -- body_text and hexdump ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"hello world", "hello world"),
        (b"line 1\r\nline 2\ttab\n", "line 1\r\nline 2\ttab\n"),
        ("Grüße, 東京".encode(), "Grüße, 東京"),
        (b"", ""),
        (b"\x00abc", None),
        (b"abc\x0b", None),
        (b"abc\x0c", None),
        (b"\xff\xfe", None),
        (b"RFH \x00\x00\x00\x02", None),
    ],
)
def test_body_text_only_for_printable_utf8(body, expected):
    assert body_text(body) == expected


def test_hexdump_is_amqsbcg_like():
    data = b"RFH \x00\x00\x00\x02abcdefghijklmnopq"
    assert hexdump(data).splitlines() == [
        "00000000:  5246 4820 0000 0002 6162 6364 6566 6768  'RFH ....abcdefgh'",
        "00000010:  696A 6B6C 6D6E 6F70 71                   'ijklmnopq'",
    ]


def test_hexdump_of_nothing_is_empty():
    assert hexdump(b"") == ""


def test_hexdump_width_and_offsets():
    lines = hexdump(bytes(range(20)), width=8).splitlines()
    assert [line[:8] for line in lines] == ["00000000", "00000008", "00000010"]
    assert lines[2].startswith("00000010:  1011 1213")
    assert lines[2].endswith("'....'")


# -- descriptor and JSON -----------------------------------------------------------------------


def test_mqmd_fields_are_json_ready():
    assert mqmd_fields(MESSAGE) == {
        "msg_id": bytes(range(24)).hex(),
        "correl_id": (b"CORREL" + NUL * 18).hex(),
        "format": "MQSTR",
        "encoding": 273,
        "ccsid": 819,
        "msg_type": 1,
        "report": 0x40,
        "reply_to_q": "REPLY.Q",
        "reply_to_qmgr": "QM2",
        "user_id": "alice",
        "persistence": 1,
        "priority": 7,
        "expiry": 600,
        "put_appl_type": 6,
        "put_appl_name": "amqsput",
        "put_date": "20240229",
        "put_time": "12345678",
        "backout_count": 2,
    }


def test_message_json_has_text_and_base64_of_a_text_body():
    fields = message_json(MESSAGE)
    assert fields["body_length"] == 5
    assert fields["body_text"] == "hello"
    assert fields["body_base64"] == "aGVsbG8="
    assert fields["msg_id"] == bytes(range(24)).hex()


def test_message_json_of_a_binary_body_is_base64_only():
    body = b"\x00\x01\xfe\xff"
    fields = message_json(Message(body=body))
    assert fields["body_text"] is None
    assert base64.b64decode(fields["body_base64"]) == body
    assert fields["body_length"] == 4


def test_describe_shows_every_field_and_a_text_body():
    lines = describe(MESSAGE).splitlines()
    assert lines[0] == f"  {'msg_id':<14} {bytes(range(24)).hex()!r}"
    assert f"  {'priority':<14} 7" in lines
    assert f"  {'reply_to_q':<14} 'REPLY.Q'" in lines
    assert lines[-2:] == [f"  {'body':<14} 5 bytes, text", "hello"]
    assert len(lines) == 18 + 3
    # PutDate/PutTime are GMT; the line after them says when that was, in local time
    put_at = datetime.fromisoformat(lines[-3].split()[-1])
    assert put_at.utcoffset() is not None
    assert put_at == datetime(2024, 2, 29, 12, 34, 56, 780_000, tzinfo=UTC)


def test_describe_hexdumps_a_binary_body():
    text = describe(Message(body=b"\x00\x01AB"))
    assert text.endswith(f"  {'body':<14} 4 bytes, binary (hex)\n00000000:  0001 4142{' ' * 32}'..AB'")
