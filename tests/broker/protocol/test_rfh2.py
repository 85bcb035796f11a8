"""Tests for broker.protocol.rfh2: golden bytes written by hand from wmq-psc.md §1, then properties."""

from __future__ import annotations

import re
import struct
import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from broker.protocol.rfh2 import (
    FIXED_LENGTH,
    STRUC_ID,
    VERSION_2,
    RFH2Body,
    RFH2Error,
    RFH2Header,
    byte_order,
    decode,
    encode,
    find,
    folder_name,
)
from queues.errors import MQError
from queues.message import (
    MQCCSI_INHERIT,
    MQENC_NORMAL,
    MQENC_REVERSED,
    MQFMT_NONE,
    MQFMT_RF_HEADER,
    MQFMT_RF_HEADER_2,
    MQFMT_STRING,
)
from queues.reasons import Reason

RFH_ERROR = Reason.MQRC_RFH_ERROR

# ---------------------------------------------------------------------------------------------
# §1.4 worked example (pymqi single_rfh2.dat), byte by byte.

PSC = (
    "<psc><Command>RegSub</Command><Topic>$topictree/topiccat/topic</Topic>"
    "<QMgrName>DebugQM</QMgrName><QName>PUBOUT</QName><RegOpt>PersAsPub</RegOpt></psc>"
)
TEST_FOLDER = "<testFolder><testVar>testValue</testVar></testFolder>"
MCD = "<mcd><Msd>xmlnsc</Msd></mcd>"
PAYLOAD = b"Hello, subscribers: MQSTR user data after the header"

EXAMPLE_BE = (
    b"RFH "  # StrucId
    + bytes.fromhex("00000002")  # Version 2
    + bytes.fromhex("0000011c")  # StrucLength 284
    + bytes.fromhex("00000111")  # Encoding 273
    + bytes.fromhex("000004b8")  # CodedCharSetId 1208
    + b"MQSTR   "  # Format
    + bytes.fromhex("00000000")  # Flags
    + bytes.fromhex("000004b8")  # NameValueCCSID 1208
    + bytes.fromhex("00000098")  # 152 = 151 + 1 blank
    + PSC.encode()
    + b" "
    + bytes.fromhex("00000038")  # 56 = 53 + 3 blanks
    + TEST_FOLDER.encode()
    + b"   "
    + bytes.fromhex("0000001c")  # 28, no padding
    + MCD.encode()
    + PAYLOAD
)

# The same header written on a little-endian machine, whose user data is little-endian too.
EXAMPLE_LE = (
    b"RFH "
    + bytes.fromhex("02000000")
    + bytes.fromhex("1c010000")
    + bytes.fromhex("22020000")  # Encoding 546
    + bytes.fromhex("b8040000")
    + b"MQSTR   "
    + bytes.fromhex("00000000")
    + bytes.fromhex("b8040000")
    + bytes.fromhex("98000000")
    + PSC.encode()
    + b" "
    + bytes.fromhex("38000000")
    + TEST_FOLDER.encode()
    + b"   "
    + bytes.fromhex("1c000000")
    + MCD.encode()
    + PAYLOAD
)

EXAMPLE_HEADER = RFH2Header(
    encoding=273,
    ccsid=1208,
    format="MQSTR   ",
    flags=0,
    name_value_ccsid=1208,
    folders=(PSC, TEST_FOLDER, MCD),
)


def patched(body: bytes, offset: int, value: int, order: str = ">") -> bytes:
    """``body`` with the MQLONG at ``offset`` replaced."""
    buffer = bytearray(body)
    struct.pack_into(order + "i", buffer, offset, value)
    return bytes(buffer)


def rfh_error(body: bytes, encoding: int = MQENC_NORMAL) -> RFH2Error:
    with pytest.raises(RFH2Error) as caught:
        decode(body, encoding, MQFMT_RF_HEADER_2)
    assert caught.value.reason == RFH_ERROR
    return caught.value


def test_example_is_284_bytes_of_header_then_payload() -> None:
    assert len(EXAMPLE_BE) == 284 + len(PAYLOAD)
    assert EXAMPLE_BE[284:] == PAYLOAD


def test_decode_worked_example_big_endian() -> None:
    body = decode(EXAMPLE_BE, MQENC_NORMAL, MQFMT_RF_HEADER_2)

    assert body.headers == (EXAMPLE_HEADER,)
    header = body.headers[0]
    assert header.encoding == 273
    assert header.ccsid == 1208
    assert header.format == "MQSTR   "
    assert header.flags == 0
    assert header.name_value_ccsid == 1208
    assert header.folders == (PSC, TEST_FOLDER, MCD)
    assert body.payload == PAYLOAD
    assert type(body.payload) is bytes
    assert body.payload_format == MQFMT_STRING
    assert body.payload_encoding == 273
    assert body.payload_ccsid == 1208
    assert body.folders == (PSC, TEST_FOLDER, MCD)


def test_encode_worked_example_byte_for_byte() -> None:
    decoded = decode(EXAMPLE_BE, MQENC_NORMAL, MQFMT_RF_HEADER_2)
    assert encode(decoded, MQENC_NORMAL) == EXAMPLE_BE
    assert encode(RFH2Body((EXAMPLE_HEADER,), PAYLOAD), 273) == EXAMPLE_BE


def test_worked_example_little_endian_both_ways() -> None:
    expected = RFH2Body((RFH2Header(546, 1208, "MQSTR   ", 0, 1208, (PSC, TEST_FOLDER, MCD)),), PAYLOAD)
    assert decode(EXAMPLE_LE, MQENC_REVERSED, MQFMT_RF_HEADER_2) == expected
    assert encode(expected, MQENC_REVERSED) == EXAMPLE_LE


def test_big_endian_example_read_as_little_endian_fails_with_a_hint() -> None:
    error = rfh_error(EXAMPLE_BE, MQENC_REVERSED)
    assert error.detail == (
        "MQRFH2 at offset 0: Version 33554432 is not 2 (it reads as 2 big-endian: the Encoding "
        "of the preceding structure says little-endian; check the MQMD or previous header)"
    )


def test_only_the_integer_mask_of_the_mqmd_encoding_matters() -> None:
    # 785 is MQENC_S390: big-endian integers, S/390 floats.
    assert decode(EXAMPLE_BE, 785, MQFMT_RF_HEADER_2).headers == (EXAMPLE_HEADER,)


# ---------------------------------------------------------------------------------------------
# Chained headers (§1.2): each header is read in the byte order of the structure before it.

USR = "<usr><Colour>blue</Colour></usr>"  # 32 bytes, no padding
JMS = "<jms><Dst>topic://a/b</Dst></jms>"  # 33 bytes, 3 blanks

CHAINED = (
    # Header 1: big-endian because the MQMD says 273; announces a little-endian RFH2.
    b"RFH "
    + bytes.fromhex("00000002")
    + bytes.fromhex("00000048")  # StrucLength 72 = 36 + 4 + 32
    + bytes.fromhex("00000222")  # Encoding 546 for the next header
    + bytes.fromhex("fffffffe")  # CodedCharSetId -2 (MQCCSI_INHERIT)
    + b"MQHRF2  "
    + bytes.fromhex("00000000")
    + bytes.fromhex("000004b8")
    + bytes.fromhex("00000020")
    + USR.encode()
    # Header 2 at offset 72: little-endian, describes a big-endian MQSTR payload.
    + b"RFH "
    + bytes.fromhex("02000000")
    + bytes.fromhex("4c000000")  # StrucLength 76 = 36 + 4 + 36
    + bytes.fromhex("11010000")  # Encoding 273
    + bytes.fromhex("b8040000")
    + b"MQSTR   "
    + bytes.fromhex("00000080")  # Flags 0x80000000 (MQRFH_INTERNAL)
    + bytes.fromhex("b8040000")
    + bytes.fromhex("24000000")
    + JMS.encode()
    + b"   "
    + b"payload"
)

CHAINED_VALUE = RFH2Body(
    (
        RFH2Header(546, MQCCSI_INHERIT, MQFMT_RF_HEADER_2, 0, 1208, (USR,)),
        RFH2Header(273, 1208, MQFMT_STRING, 0x80000000, 1208, (JMS,)),
    ),
    b"payload",
)


def test_decode_two_chained_headers_with_different_byte_orders() -> None:
    body = decode(CHAINED, MQENC_NORMAL, MQFMT_RF_HEADER_2)
    assert body == CHAINED_VALUE
    assert body.folders == (USR, JMS)
    assert body.payload_format == MQFMT_STRING
    assert body.payload_encoding == 273
    assert body.payload_ccsid == 1208


def test_encode_two_chained_headers_byte_for_byte() -> None:
    assert encode(CHAINED_VALUE, MQENC_NORMAL) == CHAINED


def test_chained_header_read_with_the_wrong_byte_order_fails_at_its_offset() -> None:
    wrong = patched(CHAINED, 12, MQENC_NORMAL)  # header 1 now claims header 2 is big-endian
    assert rfh_error(wrong).detail.startswith("MQRFH2 at offset 72: Version 33554432 is not 2")


def test_chained_header_whose_encoding_has_no_integer_order() -> None:
    assert rfh_error(patched(CHAINED, 12, 0x100)).detail == (
        "Encoding of the MQRFH2 at offset 0 is 256, whose integer encoding 0 is neither "
        "1 (MQENC_INTEGER_NORMAL) nor 2 (MQENC_INTEGER_REVERSED)"
    )


def test_chained_header_missing_after_an_mqhrf2_format() -> None:
    assert rfh_error(CHAINED[:72]).detail == (
        "MQRFH2 at offset 72: only 0 bytes left; an MQRFH2 needs at least 36"
    )


# ---------------------------------------------------------------------------------------------
# UTF-16 NameValueData (§1.2): same byte order as the header's integers, blank-padded in it.

TOPIC_FOLDER = "<psc><Topic>Météo/Zürich/€1</Topic></psc>"  # 41 characters, 82 bytes


def utf16_header(order: str, name_value_ccsid: int, padding: bytes) -> bytes:
    data = TOPIC_FOLDER.encode("utf-16-be" if order == ">" else "utf-16-le") + padding
    return (
        b"RFH "
        + struct.pack(order + "iiii", 2, 36 + 4 + len(data), 273, 1208)
        + b"MQSTR   "
        + struct.pack(order + "iii", 0, name_value_ccsid, len(data))
        + data
    )


@pytest.mark.parametrize(
    ("order", "encoding", "blank"),
    [(">", MQENC_NORMAL, b"\x00\x20"), ("<", MQENC_REVERSED, b"\x20\x00")],
)
def test_utf16_folder_round_trips_with_a_utf16_blank(order: str, encoding: int, blank: bytes) -> None:
    raw = utf16_header(order, 1200, blank)
    assert len(raw) == 36 + 4 + 84
    body = decode(raw, encoding, MQFMT_RF_HEADER_2)
    assert body.headers == (RFH2Header(273, 1208, MQFMT_STRING, 0, 1200, (TOPIC_FOLDER,)),)
    assert encode(body, encoding) == raw


@pytest.mark.parametrize("name_value_ccsid", [13488, 17584])
def test_other_unicode_name_value_ccsids_are_utf16(name_value_ccsid: int) -> None:
    raw = utf16_header("<", name_value_ccsid, b"\x00\x00")  # a UTF-16 NUL pads too
    assert decode(raw, MQENC_REVERSED, MQFMT_RF_HEADER_2).folders == (TOPIC_FOLDER,)


def test_utf16_folder_with_a_lone_surrogate_is_refused() -> None:
    raw = bytearray(utf16_header(">", 1200, b"\x00\x20"))
    raw[40:42] = b"\xd8\x00"  # a high surrogate where "<" was
    assert rfh_error(bytes(raw)).detail.startswith(
        "MQRFH2 at offset 0: NameValueData at offset 40 is not valid utf-16-be:"
    )


def test_utf8_folder_with_an_invalid_byte_is_refused() -> None:
    raw = bytearray(EXAMPLE_BE)
    raw[45] = 0xFF  # inside "<Command>"
    assert rfh_error(bytes(raw)).detail == (
        "MQRFH2 at offset 0: NameValueData at offset 40 is not valid utf-8: invalid start byte at offset 45"
    )


# ---------------------------------------------------------------------------------------------
# Padding (§1.3): blanks and NULs are both stripped; empty folders are skipped.

AMQSPR2A_FOLDER = "<psc><Command>Publish</Command><Topic>Sport/Soccer/State/LatestScore</Topic></psc>"


@pytest.mark.parametrize(("order", "encoding"), [(">", MQENC_NORMAL), ("<", MQENC_REVERSED)])
def test_amqspr2a_nul_padding_to_a_sixteen_byte_struc_length(order: str, encoding: int) -> None:
    # 82 characters + NUL terminator + 5 NULs: NameValueLength 88, StrucLength 128.
    raw = (
        b"RFH "
        + struct.pack(order + "iiii", 2, 128, encoding, 1208)
        + b"MQSTR   "
        + struct.pack(order + "iii", 0, 1208, 88)
        + AMQSPR2A_FOLDER.encode()
        + b"\x00" * 6
        + b"Chelsea 4 Sotton 1"
    )
    body = decode(raw, encoding, MQFMT_RF_HEADER_2)
    assert body.folders == (AMQSPR2A_FOLDER,)
    assert body.payload == b"Chelsea 4 Sotton 1"


def test_mixed_blank_and_nul_padding_and_empty_folders() -> None:
    raw = (
        b"RFH "
        + struct.pack(">iiii", 2, 36 + (4 + 4) + (4 + 8) + (4 + 0), 273, 1208)
        + b"        "
        + struct.pack(">iii", 0, 1208, 4)
        + b"<a/>"
        + struct.pack(">i", 8)
        + b"  \x00 \x00\x00  "  # nothing but padding
        + struct.pack(">i", 0)  # an empty pair
    )
    body = decode(raw, MQENC_NORMAL, MQFMT_RF_HEADER_2)
    assert body.headers == (RFH2Header(273, 1208, MQFMT_NONE, 0, 1208, ("<a/>",)),)
    assert body.payload == b""


def test_header_without_folders() -> None:
    raw = b"RFH " + struct.pack("<iiii", 2, 36, 546, 1208) + b"MQSTR   " + struct.pack("<ii", 0, 1208)
    body = decode(raw + b"x", MQENC_REVERSED, MQFMT_RF_HEADER_2)
    assert body.headers == (RFH2Header(546, 1208, MQFMT_STRING, 0, 1208, ()),)
    assert body.folders == ()
    assert encode(body, MQENC_REVERSED) == raw + b"x"


# ---------------------------------------------------------------------------------------------
# MQMD format.


def test_rfh_version_1_format_is_2421() -> None:
    with pytest.raises(RFH2Error) as caught:
        decode(EXAMPLE_BE, MQENC_NORMAL, MQFMT_RF_HEADER)
    assert caught.value.reason == Reason.MQRC_RFH_FORMAT_ERROR
    assert caught.value.detail == (
        "MQMD Format 'MQHRF   ': RFH version 1 is not supported (use MQRFH2, Format 'MQHRF2  ')"
    )


@pytest.mark.parametrize("mqmd_format", [MQFMT_STRING, MQFMT_NONE, "MQHRF2X ", "", "MQADMIN "])
def test_other_mqmd_formats_are_3023(mqmd_format: str) -> None:
    with pytest.raises(RFH2Error) as caught:
        decode(EXAMPLE_BE, MQENC_NORMAL, mqmd_format)
    assert caught.value.reason == Reason.MQRCCF_MD_FORMAT_ERROR
    assert caught.value.detail == (
        f"MQMD Format {mqmd_format!r} is not 'MQHRF2  ': the message has no MQRFH2 header"
    )


@pytest.mark.parametrize("mqmd_format", ["MQHRF2", "MQHRF2\x00\x00"])
def test_mqmd_format_without_blank_padding_is_recognised(mqmd_format: str) -> None:
    assert decode(EXAMPLE_BE, MQENC_NORMAL, mqmd_format).headers == (EXAMPLE_HEADER,)


def test_mqmd_encoding_without_integer_order() -> None:
    assert rfh_error(EXAMPLE_BE, 0x111 & ~0xF).detail == (
        "MQMD Encoding is 272, whose integer encoding 0 is neither 1 (MQENC_INTEGER_NORMAL) "
        "nor 2 (MQENC_INTEGER_REVERSED)"
    )


# ---------------------------------------------------------------------------------------------
# Malformed headers: each one a 2334 that says what is wrong and where.


def with_bytes(offset: int, data: bytes) -> bytes:
    return EXAMPLE_BE[:offset] + data + EXAMPLE_BE[offset + len(data) :]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"", "MQRFH2 at offset 0: only 0 bytes left; an MQRFH2 needs at least 36"),
        (EXAMPLE_BE[:35], "MQRFH2 at offset 0: only 35 bytes left; an MQRFH2 needs at least 36"),
        (with_bytes(0, b"RFX "), "MQRFH2 at offset 0: StrucId b'RFX ' is not b'RFH '"),
        (
            with_bytes(0, b"\xd9\xc6\xc8\x40"),
            "MQRFH2 at offset 0: StrucId is 'RFH ' in EBCDIC; only ASCII-based header fields are supported",
        ),
        (
            patched(EXAMPLE_BE, 4, 1),
            "MQRFH2 at offset 0: Version 1: an MQRFH version 1 structure where the format "
            "announces an MQRFH2 (version 2)",
        ),
        (patched(EXAMPLE_BE, 4, 3), "MQRFH2 at offset 0: Version 3 is not 2"),
        (
            patched(EXAMPLE_BE, 8, 32),
            "MQRFH2 at offset 0: StrucLength 32 is less than the fixed length 36",
        ),
        (
            patched(EXAMPLE_BE, 8, -4),
            "MQRFH2 at offset 0: StrucLength -4 is less than the fixed length 36",
        ),
        (patched(EXAMPLE_BE, 8, 286), "MQRFH2 at offset 0: StrucLength 286 is not a multiple of 4"),
        (
            patched(EXAMPLE_BE, 8, 284 + len(PAYLOAD) + 4),
            f"MQRFH2 at offset 0: StrucLength {288 + len(PAYLOAD)} runs past the end of the body "
            f"({284 + len(PAYLOAD)} bytes from this header on)",
        ),
        (
            patched(EXAMPLE_BE, 16, 0),
            "MQRFH2 at offset 0: CodedCharSetId 0 (MQCCSI_DEFAULT) is not valid in an MQRFH2; "
            "use -2 (MQCCSI_INHERIT) or a real CCSID",
        ),
        (
            patched(EXAMPLE_BE, 16, -1),
            "MQRFH2 at offset 0: CodedCharSetId -1 (MQCCSI_EMBEDDED) is not valid in an MQRFH2; "
            "use -2 (MQCCSI_INHERIT) or a real CCSID",
        ),
        (with_bytes(20, b"MQ\xe7TR   "), "MQRFH2 at offset 0: Format b'MQ\\xe7TR   ' is not ASCII"),
        (
            patched(EXAMPLE_BE, 32, 819),
            "MQRFH2 at offset 0: NameValueCCSID 819 is not one of 1208, 1200, 13488 or 17584",
        ),
        (
            patched(EXAMPLE_BE, 36, -4),
            "MQRFH2 at offset 0: NameValueLength -4 at offset 36 is negative",
        ),
        (
            patched(EXAMPLE_BE, 36, 151),
            "MQRFH2 at offset 0: NameValueLength 151 at offset 36 is not a multiple of 4",
        ),
        (
            patched(EXAMPLE_BE, 192, 92),
            "MQRFH2 at offset 0: NameValueLength 92 at offset 192 runs past StrucLength "
            "(88 bytes left in the header)",
        ),
        (
            patched(EXAMPLE_BE, 252, 2**31 - 4),
            "MQRFH2 at offset 0: NameValueLength 2147483644 at offset 252 runs past StrucLength "
            "(28 bytes left in the header)",
        ),
    ],
    ids=[
        "empty",
        "short",
        "struc-id",
        "ebcdic",
        "version-1",
        "version-3",
        "struc-length-small",
        "struc-length-negative",
        "struc-length-unaligned",
        "struc-length-beyond-body",
        "ccsid-0",
        "ccsid-minus-1",
        "format-not-ascii",
        "name-value-ccsid",
        "name-value-length-negative",
        "name-value-length-unaligned",
        "name-value-length-overrun",
        "name-value-length-huge",
    ],
)
def test_malformed_header_is_2334(body: bytes, detail: str) -> None:
    assert rfh_error(body).detail == detail


def test_absurd_struc_length_fails_without_allocating() -> None:
    body = (
        b"RFH "
        + struct.pack(">iiii", 2, 2**31 - 4, 273, 1208)
        + b"MQSTR   "
        + struct.pack(">ii", 0, 1208)
        + bytes(14)
    )
    tracemalloc.start()
    try:
        error = rfh_error(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.detail == (
        "MQRFH2 at offset 0: StrucLength 2147483644 runs past the end of the body "
        "(50 bytes from this header on)"
    )
    assert peak < 64 * 1024


def test_rfh2_error_is_an_mq_error_with_ibm_names() -> None:
    error = rfh_error(b"")
    assert isinstance(error, MQError)
    assert error.reason == 2334
    assert error.reason_name == "MQRC_RFH_ERROR"
    assert str(error) == "MQRC_RFH_ERROR (2334): " + error.detail


# ---------------------------------------------------------------------------------------------
# Values encode refuses (they would not decode back to themselves).


def encode_error(header: RFH2Header, *more: RFH2Header, encoding: int = MQENC_NORMAL) -> str:
    with pytest.raises(RFH2Error) as caught:
        encode(RFH2Body((header, *more), b""), encoding)
    assert caught.value.reason == RFH_ERROR
    return caught.value.detail


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (
            RFH2Header(folders=("<a/>", "<b/> ")),
            "MQRFH2 header 0 folder 1: '<b/> ' is empty or ends in a blank or NUL, which reads "
            "back as padding",
        ),
        (
            RFH2Header(folders=("",)),
            "MQRFH2 header 0 folder 0: '' is empty or ends in a blank or NUL, which reads back as padding",
        ),
        (
            RFH2Header(folders=("<a>\ud800</a>",)),
            "MQRFH2 header 0 folder 0: cannot be written as utf-8: surrogates not allowed",
        ),
        (
            RFH2Header(format="MQSTR"),
            "MQRFH2 header 0: Format 'MQSTR' is not 8 ASCII characters",
        ),
        (
            RFH2Header(format="MQSTRé  "),
            "MQRFH2 header 0: Format 'MQSTRé  ' is not 8 ASCII characters",
        ),
        (
            RFH2Header(ccsid=0),
            "MQRFH2 header 0: CodedCharSetId 0 (MQCCSI_DEFAULT) is not valid in an MQRFH2; "
            "use -2 (MQCCSI_INHERIT) or a real CCSID",
        ),
        (
            RFH2Header(name_value_ccsid=437),
            "MQRFH2 header 0: NameValueCCSID 437 is not one of 1208, 1200, 13488 or 17584",
        ),
        (
            RFH2Header(format=MQFMT_RF_HEADER_2),
            "MQRFH2 header 0: Format 'MQHRF2  ' must be 'MQHRF2  ' exactly when another "
            "MQRFH2 header follows it",
        ),
    ],
    ids=[
        "trailing-blank",
        "empty-folder",
        "surrogate",
        "short-format",
        "non-ascii-format",
        "ccsid-0",
        "name-value-ccsid",
        "last-header-announces-another",
    ],
)
def test_encode_refuses(header: RFH2Header, detail: str) -> None:
    assert encode_error(header) == detail


def test_encode_refuses_a_chained_header_not_announced() -> None:
    assert encode_error(RFH2Header(), RFH2Header()) == (
        "MQRFH2 header 0: Format '        ' must be 'MQHRF2  ' exactly when another MQRFH2 header follows it"
    )


def test_encode_refuses_a_chain_whose_encoding_has_no_integer_order() -> None:
    first = RFH2Header(encoding=0, format=MQFMT_RF_HEADER_2)
    assert encode_error(first, RFH2Header()) == (
        "MQRFH2 header 0 Encoding is 0, whose integer encoding 0 is neither "
        "1 (MQENC_INTEGER_NORMAL) nor 2 (MQENC_INTEGER_REVERSED)"
    )


@pytest.mark.parametrize(
    "header", [RFH2Header(flags=2**32), RFH2Header(flags=-1), RFH2Header(encoding=2**31)]
)
def test_encode_refuses_values_outside_their_field(header: RFH2Header) -> None:
    assert encode_error(header).startswith("MQRFH2 header 0: a value does not fit its 32-bit field:")


def test_body_without_headers_is_refused() -> None:
    with pytest.raises(RFH2Error) as caught:
        RFH2Body((), b"")
    assert caught.value.reason == RFH_ERROR
    assert caught.value.detail == "an RFH2 body needs at least one header"


def test_defaults_encode_to_the_bare_native_header() -> None:
    assert encode(RFH2Body((RFH2Header(),), b""), MQENC_REVERSED) == (
        b"RFH "
        + bytes.fromhex("020000002400000022020000b8040000")
        + b"        "
        + bytes.fromhex("00000000b8040000")
    )


def test_public_constants() -> None:
    assert (STRUC_ID, VERSION_2, FIXED_LENGTH) == (b"RFH ", 2, 36)


# ---------------------------------------------------------------------------------------------
# byte_order and folder_name.


@pytest.mark.parametrize(
    ("encoding", "order"),
    [(273, ">"), (546, "<"), (785, ">"), (1, ">"), (2, "<"), (17, ">"), (0x222, "<")],
)
def test_byte_order(encoding: int, order: str) -> None:
    assert byte_order(encoding) == order


@pytest.mark.parametrize("encoding", [0, 3, 15, 0x110, -1])
def test_byte_order_refuses_other_integer_encodings(encoding: int) -> None:
    with pytest.raises(RFH2Error) as caught:
        byte_order(encoding)
    assert caught.value.reason == RFH_ERROR
    assert caught.value.detail == (
        f"Encoding is {encoding}, whose integer encoding {encoding & 0xF} is neither "
        "1 (MQENC_INTEGER_NORMAL) nor 2 (MQENC_INTEGER_REVERSED)"
    )


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        (PSC, "psc"),
        ("<pscr><Completion>ok</Completion></pscr>", "pscr"),
        (MCD, "mcd"),
        ("<usr/>", "usr"),
        ("<jms >", "jms"),
        (" \t\r\n<mq>", "mq"),
        ("<psc\n><Command>Publish</Command></psc>", "psc"),
        ('<usr dt="string">', "usr"),
        ("<ns:psc>", "ns:psc"),
        ("<_x-1.2>", "_x-1.2"),
        ("<Zürich>", "Zürich"),
        # A prolog is skipped: the folder is named by its root element, so that a
        # <psc> with a DOCTYPE reaches the <psc> parser, which refuses it (2337).
        ("<?xml version='1.0'?><psc/>", "psc"),
        ("<!-- c --><psc/>", "psc"),
        ('<!DOCTYPE l [<!ENTITY a "x">]><psc>&a;</psc>', "psc"),
        ('<!DOCTYPE x SYSTEM "file:///etc/passwd"> <usr/>', "usr"),
    ],
)
def test_folder_name(folder: str, name: str) -> None:
    assert folder_name(folder) == name


@pytest.mark.parametrize(
    "folder",
    [
        "",
        "psc",
        "   ",
        "<psc",
        "< psc>",
        "<1psc>",
        "<?xml version='1.0'?>",
        "<!-- c -->text",
    ],
)
def test_folder_name_refuses_text_that_does_not_start_with_an_element(folder: str) -> None:
    with pytest.raises(RFH2Error) as caught:
        folder_name(folder)
    assert caught.value.reason == RFH_ERROR
    assert caught.value.detail == f"folder does not start with an XML element: {folder[:40]!r}"


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        # Literals and the internal subset are read as XML reads them: a ">" or "]" inside
        # them does not end the DOCTYPE.
        ('<!DOCTYPE a SYSTEM "a>b[c"><psc/>', "psc"),
        ("<!DOCTYPE a [<!ENTITY x ']>'>]><psc/>", "psc"),
        ("<!DOCTYPE a [<!-- ] > --><?p ]>?>] ><psc/>", "psc"),
        ("<!DOCTYPE a [<!ELEMENT a ANY>]><!-- c --><?p?>\n<psc/>", "psc"),
        # The root element may start anywhere in the folder's first 4,096 characters.
        ("<!--" + "c" * 4083 + "--><psc/>", "psc"),
    ],
)
def test_folder_name_reads_a_prolog_as_xml_does(folder: str, name: str) -> None:
    assert folder_name(folder) == name


def test_folder_name_refuses_a_root_element_beyond_the_first_4096_characters() -> None:
    folder = "<!--" + "c" * 4086 + "--><psc/>"
    with pytest.raises(RFH2Error) as caught:
        folder_name(folder)
    assert caught.value.reason == RFH_ERROR
    assert caught.value.detail == (
        f"folder does not start with an XML element within its first 4096 characters: {folder[:40]!r}"
    )


HOSTILE_PROLOGS = {
    "comments": "<!---->",
    "instructions": "<?a?>",
    "doctypes": "<!DOCTYPE a[]>",
    "subsets": "[]",
    "literals": "''",
    "declarations": "<!",
}


def hostile_folder(kind: str, repeats: int, root: str) -> str:
    """A prolog that a backtracking scan splits in 2**repeats ways before it gives up."""
    piece = HOSTILE_PROLOGS[kind]
    opening = {"subsets": "<!DOCTYPE a", "literals": "<!DOCTYPE a [", "declarations": "<!DOCTYPE a ["}
    return opening.get(kind, "") + piece * repeats + root


@pytest.mark.parametrize("repeats", [26, 40, 1_000_000])
@pytest.mark.parametrize("kind", list(HOSTILE_PROLOGS))
def test_folder_name_of_a_hostile_prolog_takes_microseconds(kind: str, repeats: int) -> None:
    """Each is refused (or named) at once: a 276-byte message must not stall a stream."""
    folder = hostile_folder(kind, repeats, "x")
    started = time.perf_counter()
    with pytest.raises(RFH2Error) as caught:
        folder_name(folder)
    elapsed = time.perf_counter() - started
    assert caught.value.reason == RFH_ERROR
    assert elapsed < 0.05, f"{elapsed:.3f} s"


@pytest.mark.parametrize("kind", ["comments", "instructions"])
def test_folder_name_of_many_prolog_pieces_before_the_root(kind: str) -> None:
    started = time.perf_counter()
    assert folder_name(hostile_folder(kind, 500, "<psc/>")) == "psc"
    assert time.perf_counter() - started < 0.05


# The backtracking expression folder_name used before its scan was made linear: on every
# well-formed folder it must still agree with it, and with an XML parser.
BACKTRACKING_FIRST_ELEMENT = re.compile(
    r"(?:\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[.*?\])*>))*"
    r"[ \t\r\n]*<((?:[^\W\d]|:)[\w.:\-]*)(?=[ \t\r\n/>])",
    re.DOTALL,
)
XML_SPACE = st.text(" \t\r\n", max_size=3)
XML_NAMES = st.builds(
    str.__add__,
    st.sampled_from("apsxzAPZ_ü"),
    st.text(st.sampled_from("apsxz09_.-üé"), max_size=6),
)
XML_TEXT = st.text(
    st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Zs"), exclude_characters="<&"),
    max_size=12,
)
COMMENTS = XML_TEXT.filter(lambda text: "--" not in text and not text.endswith("-")).map(
    lambda text: f"<!--{text}-->"
)
INSTRUCTIONS = st.builds(
    lambda target, data: f"<?{target} {data}?>",
    XML_NAMES.filter(lambda name: name.lower() != "xml"),
    XML_TEXT.filter(lambda text: "?>" not in text),
)
ENTITIES = st.builds(
    lambda name, value: f'<!ENTITY {name} "{value}">',
    XML_NAMES,
    # In an entity value, % begins a parameter-entity reference (not allowed in the internal subset).
    XML_TEXT.filter(lambda text: '"' not in text and "%" not in text),
)
SUBSETS = st.lists(st.one_of(ENTITIES, COMMENTS, INSTRUCTIONS), max_size=3).map(
    lambda items: f"[{''.join(items)}]"
)
DOCTYPES = st.builds(
    lambda name, external, subset: f"<!DOCTYPE {name}{external}{subset}>",
    XML_NAMES,
    st.sampled_from(["", ' SYSTEM "a.dtd"', " PUBLIC '-//A//B' 'c.dtd'"]),
    st.one_of(st.just(""), SUBSETS),
)


@st.composite
def well_formed_folders(draw: st.DrawFn) -> tuple[str, str]:
    """A well-formed folder (declaration, comments, instructions, a DOCTYPE, the root) and its root's name."""
    prolog = [draw(st.sampled_from(["", '<?xml version="1.0"?>']))]
    misc = st.lists(
        st.one_of(COMMENTS, INSTRUCTIONS).flatmap(lambda piece: XML_SPACE.map(piece.__add__)), max_size=3
    )
    prolog += draw(misc)
    if draw(st.booleans()):
        prolog += [draw(DOCTYPES), *draw(misc)]
    local = draw(XML_NAMES)
    prefix = draw(st.one_of(st.just(""), XML_NAMES))
    name = f"{prefix}:{local}" if prefix else local
    namespace = f' xmlns:{prefix}="urn:x"' if prefix else ""
    tag = draw(st.sampled_from([f"<{name}{namespace}/>", f"<{name}{namespace}\n>x</{name}>"]))
    return "".join(prolog) + draw(XML_SPACE) + tag, name


@given(well_formed_folders())
def test_folder_name_names_every_well_formed_folder_as_before(folder_and_name: tuple[str, str]) -> None:
    folder, name = folder_and_name
    root = etree.fromstring(folder.encode(), etree.XMLParser(resolve_entities=False, no_network=True))
    assert (f"{root.prefix}:" if root.prefix else "") + etree.QName(root).localname == name
    assert BACKTRACKING_FIRST_ELEMENT.match(folder).group(1) == name
    assert folder_name(folder) == name


# ---------------------------------------------------------------------------------------------
# Properties.

INTEGER_ENCODINGS = st.sampled_from([273, 546, 785, 1, 2, 17, 34])
MQLONGS = st.integers(-(2**31), 2**31 - 1)
NAME_VALUE_CCSIDS = st.sampled_from([1208, 1200, 13488, 17584])
NAME_STARTS = st.sampled_from("abcmpsuxzABCXYZ_")
ELEMENT_NAMES = st.builds(str.__add__, NAME_STARTS, st.text("abcmpsuxz0129_.-", max_size=8))
ELEMENTS = st.builds(lambda name, text: f"<{name}>{text}</{name}>", ELEMENT_NAMES, st.text(max_size=20))
TEXTS = st.text(min_size=1, max_size=20).filter(lambda text: text[-1] not in " \0")
FOLDERS = st.lists(st.one_of(ELEMENTS, TEXTS), max_size=4).map(tuple)
PAYLOAD_FORMATS = st.text(st.characters(max_codepoint=127), min_size=8, max_size=8).filter(
    lambda text: text.rstrip(" \0") != "MQHRF2"
)


def headers(
    encodings: st.SearchStrategy[int], formats: st.SearchStrategy[str]
) -> st.SearchStrategy[RFH2Header]:
    return st.builds(
        RFH2Header,
        encoding=encodings,
        ccsid=MQLONGS.filter(lambda ccsid: ccsid not in (0, -1)),
        format=formats,
        flags=st.integers(0, 2**32 - 1),
        name_value_ccsid=NAME_VALUE_CCSIDS,
        folders=FOLDERS,
    )


BODIES = st.builds(
    lambda chained, last, payload: RFH2Body((*chained, last), payload),
    st.lists(headers(INTEGER_ENCODINGS, st.just(MQFMT_RF_HEADER_2)), max_size=2),
    headers(MQLONGS, PAYLOAD_FORMATS),
    st.binary(max_size=40),
)


@given(BODIES, INTEGER_ENCODINGS)
def test_decode_inverts_encode(body: RFH2Body, encoding: int) -> None:
    raw = encode(body, encoding)
    assert decode(raw, encoding, MQFMT_RF_HEADER_2) == body
    assert raw.endswith(body.payload)


def assert_decodes_or_refuses(raw: bytes, encoding: int) -> None:
    """decode either refuses with RFH2Error or returns a value that encodes back canonically."""
    try:
        body = decode(raw, encoding, MQFMT_RF_HEADER_2)
    except RFH2Error as error:
        assert error.reason == RFH_ERROR
        return
    assert decode(encode(body, encoding), encoding, MQFMT_RF_HEADER_2) == body


@given(st.binary(max_size=120), st.sampled_from([MQENC_NORMAL, MQENC_REVERSED]))
def test_random_bytes_decode_or_raise_rfh2_error(raw: bytes, encoding: int) -> None:
    assert_decodes_or_refuses(raw, encoding)


@given(
    st.sampled_from([">", "<"]),
    st.integers(36, 160),
    st.binary(max_size=24),
    st.binary(max_size=120),
)
def test_random_bytes_behind_a_plausible_fixed_part(
    order: str, struc_length: int, fixed_tail: bytes, rest: bytes
) -> None:
    raw = b"RFH " + struct.pack(order + "ii", 2, struc_length) + fixed_tail + rest
    assert_decodes_or_refuses(raw, MQENC_NORMAL if order == ">" else MQENC_REVERSED)


@given(BODIES, INTEGER_ENCODINGS, st.data())
def test_mutated_valid_bodies_decode_or_raise_rfh2_error(
    body: RFH2Body, encoding: int, data: st.DataObject
) -> None:
    raw = bytearray(encode(body, encoding))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    assert_decodes_or_refuses(bytes(raw[:cut]), encoding)


def test_find_splits_folders_by_their_root_element_keeping_their_order() -> None:
    folders = ["<mcd><Msd>jms_text</Msd></mcd>", "<psc><Command>Publish</Command></psc>", "<usr/>", "<psc/>"]
    assert find(folders, "psc") == ([folders[1], folders[3]], [folders[0], folders[2]])
    assert find(folders, "pscr") == ([], folders)


def test_find_refuses_a_folder_that_is_not_an_element_unless_told_to_pass_it_over() -> None:
    folders = ["not xml", "<pscr/>"]
    with pytest.raises(RFH2Error):
        find(folders, "pscr")
    assert find(folders, "pscr", strict=False) == (["<pscr/>"], ["not xml"])
