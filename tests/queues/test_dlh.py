from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues import dlh
from queues.dlh import DeadLetterHeader
from queues.errors import MQError
from queues.message import MQFMT_DEAD_LETTER_HEADER, Message

MQENC_NORMAL = 273  # big-endian integers
MQENC_REVERSED = 546  # little-endian integers
BYTE_ORDER = {MQENC_NORMAL: "big", MQENC_REVERSED: "little"}

HEADER = DeadLetterHeader(
    reason=2053,
    dest_q_name="APP.REPLY.QUEUE",
    dest_q_mgr_name="QM1",
    encoding=273,
    ccsid=819,
    format="MQHRF2  ",
    put_appl_type=6,
    put_appl_name="broker",
    put_date="20240229",
    put_time="23595999",
)

# (field, offset, length) of IBM's MQDLH (cmqc.h), written out independently of the module.
IBM_LAYOUT = [
    ("StrucId", 0, 4),
    ("Version", 4, 4),
    ("Reason", 8, 4),
    ("DestQName", 12, 48),
    ("DestQMgrName", 60, 48),
    ("Encoding", 108, 4),
    ("CodedCharSetId", 112, 4),
    ("Format", 116, 8),
    ("PutApplType", 124, 4),
    ("PutApplName", 128, 28),
    ("PutDate", 156, 8),
    ("PutTime", 164, 8),
]


def test_ibm_layout_is_contiguous_and_172_bytes():
    end = 0
    for _, offset, length in IBM_LAYOUT:
        assert offset == end
        end = offset + length
    assert end == dlh.LENGTH == 172


@pytest.mark.parametrize("encoding", [MQENC_NORMAL, MQENC_REVERSED])
def test_fields_sit_at_ibms_offsets_in_the_encodings_byte_order(encoding):
    data = dlh.encode(HEADER, encoding)
    order = BYTE_ORDER[encoding]
    field = {name: data[offset : offset + length] for name, offset, length in IBM_LAYOUT}
    assert len(data) == 172
    assert field["StrucId"] == b"DLH "
    assert field["Version"] == (1).to_bytes(4, order)
    assert field["Reason"] == (2053).to_bytes(4, order)
    assert field["DestQName"] == b"APP.REPLY.QUEUE".ljust(48)
    assert field["DestQMgrName"] == b"QM1".ljust(48)
    assert field["Encoding"] == (273).to_bytes(4, order)
    assert field["CodedCharSetId"] == (819).to_bytes(4, order)
    assert field["Format"] == b"MQHRF2  "
    assert field["PutApplType"] == (6).to_bytes(4, order)
    assert field["PutApplName"] == b"broker".ljust(28)
    assert field["PutDate"] == b"20240229"
    assert field["PutTime"] == b"23595999"


def test_the_two_byte_orders_differ_only_in_integers():
    integers = {"Version", "Reason", "Encoding", "CodedCharSetId", "PutApplType"}
    big, little = dlh.encode(HEADER, MQENC_NORMAL), dlh.encode(HEADER, MQENC_REVERSED)
    for name, offset, length in IBM_LAYOUT:
        chunk_big, chunk_little = big[offset : offset + length], little[offset : offset + length]
        assert chunk_big == (chunk_little[::-1] if name in integers else chunk_little), name


@pytest.mark.parametrize("encoding", [MQENC_NORMAL, MQENC_REVERSED, 1, 2, 0x111, 0x222])
def test_round_trip_returns_header_and_original_data(encoding):
    original = b"RFH \x00\x00\x00\x02 and binary \x00\xff data"
    header, data = dlh.decode(dlh.encode(HEADER, encoding) + original, encoding)
    assert header == HEADER
    assert data == original


def test_decoding_with_the_wrong_byte_order_is_refused():
    data = dlh.encode(HEADER, MQENC_NORMAL)
    with pytest.raises(MQError) as caught:
        dlh.decode(data, MQENC_REVERSED)
    assert caught.value.reason == 2026


def test_character_fields_are_blank_padded_and_cut_to_their_length():
    header = DeadLetterHeader(
        reason=2085,
        dest_q_name="Q" * 60,
        dest_q_mgr_name="M" * 50,
        encoding=546,
        ccsid=1208,
        format="MQSTR",
        put_appl_type=6,
        put_appl_name="A" * 40,
        put_date="20240101",
        put_time="12000000",
    )
    data = dlh.encode(header, MQENC_REVERSED)
    assert data[12:60] == b"Q" * 48
    assert data[60:108] == b"M" * 48
    assert data[116:124] == b"MQSTR   "
    assert data[128:156] == b"A" * 28
    decoded, rest = dlh.decode(data, MQENC_REVERSED)
    assert decoded.dest_q_name == "Q" * 48
    assert decoded.put_appl_name == "A" * 28
    assert decoded.format == "MQSTR   "
    assert rest == b""


def test_non_ascii_text_is_replaced_not_an_error():
    header = DeadLetterHeader(2085, "QÄ", "QM1", 546, 1208, "MQSTR   ", 6, "appé", "20240101", "12000000")
    decoded, _ = dlh.decode(dlh.encode(header, MQENC_REVERSED), MQENC_REVERSED)
    assert decoded.dest_q_name == "Q?"
    assert decoded.put_appl_name == "app?"


def test_nul_padded_fields_from_other_writers_are_trimmed():
    data = bytearray(dlh.encode(HEADER, MQENC_NORMAL))
    data[12:60] = b"APP.Q".ljust(48, b"\x00")
    decoded, _ = dlh.decode(bytes(data), MQENC_NORMAL)
    assert decoded.dest_q_name == "APP.Q"


@pytest.mark.parametrize("length", [0, 4, 171])
def test_short_data_is_2026(length):
    with pytest.raises(MQError) as caught:
        dlh.decode(dlh.encode(HEADER, MQENC_NORMAL)[:length], MQENC_NORMAL)
    assert caught.value.reason == 2026


def test_wrong_struc_id_is_2026():
    data = b"RFH " + dlh.encode(HEADER, MQENC_NORMAL)[4:]
    with pytest.raises(MQError) as caught:
        dlh.decode(data, MQENC_NORMAL)
    assert caught.value.reason == 2026


def test_wrong_version_is_2026():
    data = dlh.encode(HEADER, MQENC_NORMAL)
    data = data[:4] + (2).to_bytes(4, "big") + data[8:]
    with pytest.raises(MQError) as caught:
        dlh.decode(data, MQENC_NORMAL)
    assert caught.value.reason == 2026


@pytest.mark.parametrize("encoding", [0, 3, 0x110])
def test_encoding_without_an_integer_byte_order_is_2026(encoding):
    with pytest.raises(MQError) as caught:
        dlh.encode(HEADER, encoding)
    assert caught.value.reason == 2026
    with pytest.raises(MQError) as caught:
        dlh.decode(dlh.encode(HEADER, MQENC_NORMAL), encoding)
    assert caught.value.reason == 2026


_visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
_ascii_text = st.text(alphabet=_visible, max_size=48)
_int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@given(
    header=st.builds(
        DeadLetterHeader,
        reason=_int32,
        dest_q_name=_ascii_text,
        dest_q_mgr_name=_ascii_text,
        encoding=_int32,
        ccsid=_int32,
        format=st.text(alphabet=_visible | st.just(" "), min_size=8, max_size=8),
        put_appl_type=_int32,
        put_appl_name=st.text(alphabet=_visible, max_size=28),
        put_date=st.text(alphabet="0123456789", min_size=8, max_size=8),
        put_time=st.text(alphabet="0123456789", min_size=8, max_size=8),
    ),
    encoding=st.sampled_from([MQENC_NORMAL, MQENC_REVERSED]),
    body=st.binary(max_size=64),
)
def test_round_trip_of_any_header(header, encoding, body):
    assert dlh.decode(dlh.encode(header, encoding) + body, encoding) == (header, body)


def test_unwrap_gives_the_carried_message_as_its_header_describes_it():
    dead = Message(
        body=dlh.encode(HEADER, MQENC_REVERSED) + b"original",
        format=MQFMT_DEAD_LETTER_HEADER,
        encoding=MQENC_REVERSED,
        ccsid=1208,
        priority=7,
    )
    header, original = dlh.unwrap(dead)
    assert header == HEADER
    assert (original.body, original.format, original.encoding, original.ccsid) == (
        b"original",
        "MQHRF2  ",
        273,
        819,
    )
    assert original.priority == 7  # the rest of the descriptor is the dead letter's


def test_unwrap_refuses_a_body_without_a_header():
    with pytest.raises(MQError):
        dlh.unwrap(Message(body=b"no header"))
