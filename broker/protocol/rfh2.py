"""The MQRFH2 codec: a message body <-> its chained MQRFH2 version 2 headers and payload.

Every command, response and publication the broker handles starts with MQRFH2 headers
(wmq-psc.md §1), so this module sits on the hot path and stays pure: bytes and ints in,
frozen values out, nothing else touched. Errors are :class:`RFH2Error` with the reason
IBM's queue manager or broker gives for the same fault, and a message that names the
field and its byte offset, because it ends up in a dead-letter header or a ``<pscr>``
that a person has to act on.

Decisions, each tied to the specification:

- Byte order comes from the structure *before* each header (§1.2): the MQMD's Encoding
  for the first, the previous header's Encoding for the next. It is never guessed from
  the data (§1.6 point 4); a Version that only makes sense byte-swapped gets a hint in
  the error message instead.
- Padding (§1.3): trailing blanks *and* NULs are stripped from every folder, since
  IBM's AMQSPR2A sample pads its last folder with NULs and rounds StrucLength to 16.
  Folders that are empty after stripping are skipped: IBM tools only produce them as
  padding, and a folder without an element cannot carry a command. Encoding pads with
  blanks, UTF-16 ones in the header's byte order, as rfhutil, pymqi and the Perl
  MQSeries module do.
- Because padding is stripped, :func:`encode` refuses a folder that is empty or ends
  in a blank or NUL; it would not survive the trip, so ``decode(encode(x)) == x``
  holds for every value ``encode`` accepts.
- StrucId and Format are read as ASCII. :func:`decode` is not told the MQMD's CCSID, so
  an EBCDIC header (z/OS, IBM i) is refused with a message that says so rather than
  being misread.
- A Format naming MQHRF2 is recognised with or without its trailing blanks or NULs
  (C and pymqi callers NUL-pad MQCHAR8 fields); the text is kept as found, so
  encoding writes back the same bytes.
- Flags is read as an unsigned bit set (``MQRFH_INTERNAL`` is 0x80000000); the other
  MQLONG fields are signed, as in cmqc.h (CodedCharSetId -2 is ``MQCCSI_INHERIT``).
- CodedCharSetId 0 and -1 are refused (§1.1); other values, including the negative
  ``MQCCSI_*`` specials, pass through untouched: converting them is not our business.
- The Encoding of the *last* header is only checked when it has to be read, i.e. when
  another header follows; for user data it is passed through.
- A NameValueLength that is a multiple of 4 inside a StrucLength that is a multiple of
  4 can never leave fewer than 4 bytes before StrucLength, so that case needs no check
  of its own.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from queues.errors import MQError
from queues.message import (
    CCSID_UTF8,
    MQENC_INTEGER_MASK,
    MQENC_INTEGER_NORMAL,
    MQENC_INTEGER_REVERSED,
    MQENC_NATIVE,
    MQFMT_NONE,
    MQFMT_RF_HEADER,
    MQFMT_RF_HEADER_2,
)
from queues.reasons import Reason

STRUC_ID = b"RFH "
VERSION_2 = 2
FIXED_LENGTH = 36

_VERSION_1 = 1
_EBCDIC_STRUC_ID = b"\xd9\xc6\xc8\x40"
_FORMAT_LENGTH = 8
_PADDING = " \0"
_RFH2_FORMAT_NAME = MQFMT_RF_HEADER_2.rstrip(_PADDING)
_RFH1_FORMAT_NAME = MQFMT_RF_HEADER.rstrip(_PADDING)

_BIG, _LITTLE = ">", "<"
_ORDER_NAMES = {_BIG: "big-endian", _LITTLE: "little-endian"}
# StrucId, Version, StrucLength, Encoding, CodedCharSetId, Format, Flags, NameValueCCSID.
_FIXED = {order: struct.Struct(order + "4siiii8sIi") for order in (_BIG, _LITTLE)}
_LENGTH = {order: struct.Struct(order + "i") for order in (_BIG, _LITTLE)}

_UTF16_CCSIDS = (1200, 13488, 17584)
_CODECS = {
    _BIG: {CCSID_UTF8: "utf-8", **dict.fromkeys(_UTF16_CCSIDS, "utf-16-be")},
    _LITTLE: {CCSID_UTF8: "utf-8", **dict.fromkeys(_UTF16_CCSIDS, "utf-16-le")},
}
_BLANKS = {codec: " ".encode(codec) for codec in ("utf-8", "utf-16-be", "utf-16-le")}
_INVALID_CCSIDS = {0: "MQCCSI_DEFAULT", -1: "MQCCSI_EMBEDDED"}

# A folder is named by its root element, read after an optional prolog (XML declaration,
# comments, processing instructions, a DOCTYPE): a folder is named by its root even when its
# prolog is one the folder's own parser refuses (a DOCTYPE is a <psc> parameter error, not a
# header error). Every repetition below is possessive and every prolog piece atomic: each piece
# ends where an XML parser ends it, the first "-->" for a comment, and the scan never goes back
# to try another split. So the match is one linear scan, and it reads only the folder's first
# _HEAD_LIMIT characters: naming any folder costs microseconds whatever it holds.
_HEAD_LIMIT = 4096
_LITERAL = r""" "[^"]*+" | '[^']*+' """
_COMMENT_OR_PI = r" <!--.*?--> | <\?.*?\?> "
_DOCTYPE = rf"""
    <!DOCTYPE (?: [^"'\[>]++ | {_LITERAL} )*+
    (?: \[ (?: [^"'\]<]++ | {_LITERAL} | {_COMMENT_OR_PI} | <(?!!--|\?) )*+ \] [^\[>]*+ )?
    >
"""
_FIRST_ELEMENT = re.compile(
    rf"""
    (?: \s*+ (?> {_COMMENT_OR_PI} | {_DOCTYPE} ) )*+
    [\ \t\r\n]*+ < ( (?:[^\W\d]|:) [\w.:\-]*+ ) (?=[\ \t\r\n/>])
    """,
    re.DOTALL | re.VERBOSE,
)


class RFH2Error(MQError):
    """A body, MQMD format or header value that is not a valid MQRFH2 chain.

    Reasons: 2334 MQRC_RFH_ERROR (malformed header), 2421 MQRC_RFH_FORMAT_ERROR (an
    MQRFH version 1 message), 3023 MQRCCF_MD_FORMAT_ERROR (the MQMD announces no RFH2).
    """


@dataclass(frozen=True, slots=True)
class RFH2Header:
    """One MQRFH2 version 2 header. encoding/ccsid/format describe the data that FOLLOWS it.

    StrucId, Version and StrucLength are not kept: they are fixed or derived, and keeping
    them would let a header contradict its own folders.
    """

    encoding: int = MQENC_NATIVE
    ccsid: int = CCSID_UTF8
    format: str = MQFMT_NONE
    flags: int = 0
    name_value_ccsid: int = CCSID_UTF8
    folders: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RFH2Body:
    """A message body that starts with one or more chained MQRFH2 headers.

    The payload properties read the last header because, by the chaining rule (§1.2),
    only it describes the user data; every earlier header describes the next header.
    """

    headers: tuple[RFH2Header, ...]
    payload: bytes

    def __post_init__(self) -> None:
        if not self.headers:
            raise RFH2Error(Reason.MQRC_RFH_ERROR, "an RFH2 body needs at least one header")

    @property
    def payload_format(self) -> str:
        return self.headers[-1].format

    @property
    def payload_encoding(self) -> int:
        return self.headers[-1].encoding

    @property
    def payload_ccsid(self) -> int:
        return self.headers[-1].ccsid

    @property
    def folders(self) -> tuple[str, ...]:
        """All folders of all headers in message order; callers find folders by name, not by header."""
        if len(self.headers) == 1:
            return self.headers[0].folders
        return tuple(folder for header in self.headers for folder in header.folders)


def byte_order(encoding: int) -> str:
    """The struct byte-order character for integers written with ``encoding`` (§1.2)."""
    return _byte_order(encoding, "Encoding")


def folder_name(folder: str) -> str:
    """The element name of a folder, read from its root tag only (after any prolog).

    Finding the ``<psc>`` folder must not cost an XML parse of every folder of every
    message; the full parse happens once, on the folder that matters.
    """
    match = _FIRST_ELEMENT.match(folder[:_HEAD_LIMIT])
    if match is None:
        where = f" within its first {_HEAD_LIMIT} characters" if len(folder) > _HEAD_LIMIT else ""
        raise RFH2Error(
            Reason.MQRC_RFH_ERROR,
            f"folder does not start with an XML element{where}: {folder[:40]!r}",
        )
    return match.group(1)


def find(folders: Sequence[str], name: str, *, strict: bool = True) -> tuple[list[str], list[str]]:
    """(the folders whose root element is ``name``, the others), each in their order: the one
    way every reader finds its folder (``<psc>``, ``<pscr>``, ``<brokerpath>``). ``strict``:
    a folder that is not an XML element is refused (:func:`folder_name`), else counted with
    the others."""
    named: list[str] = []
    others: list[str] = []
    for folder in folders:
        found: str | None
        if strict:
            found = folder_name(folder)
        else:
            match = _FIRST_ELEMENT.match(folder[:_HEAD_LIMIT])
            found = match.group(1) if match else None
        (named if found == name else others).append(folder)
    return named, others


def decode(body: bytes, encoding: int, format: str) -> RFH2Body:
    """Split ``body`` into its MQRFH2 headers and payload.

    ``encoding`` and ``format`` are the MQMD's: the MQMD is the structure that precedes
    the first header, so its Encoding sets that header's byte order.
    """
    _check_mqmd_format(format)
    order = _byte_order(encoding, "MQMD Encoding")
    view = memoryview(body)
    headers: list[RFH2Header] = []
    offset = 0
    while True:
        header, end = _decode_header(view, offset, order)
        headers.append(header)
        if not _names_rfh2(header.format):
            return RFH2Body(tuple(headers), bytes(view[end:]))
        order = _byte_order(header.encoding, f"Encoding of the MQRFH2 at offset {offset}")
        offset = end


def encode(rfh2: RFH2Body, encoding: int) -> bytes:
    """Write ``rfh2`` in IBM's layout; ``encoding`` is the MQMD's (first header's byte order).

    Each later header is written in the byte order of the previous header's Encoding,
    exactly as :func:`decode` will read it.
    """
    order = _byte_order(encoding, "MQMD Encoding")
    last = len(rfh2.headers) - 1
    chunks: list[bytes] = []
    for index, header in enumerate(rfh2.headers):
        where = f"MQRFH2 header {index}"
        if _names_rfh2(header.format) != (index < last):
            raise RFH2Error(
                Reason.MQRC_RFH_ERROR,
                f"{where}: Format {header.format!r} must be {MQFMT_RF_HEADER_2!r} exactly when "
                "another MQRFH2 header follows it",
            )
        chunks.append(_encode_header(header, order, where))
        if index < last:
            order = _byte_order(header.encoding, f"{where} Encoding")
    chunks.append(rfh2.payload)
    return b"".join(chunks)


def _decode_header(view: memoryview, offset: int, order: str) -> tuple[RFH2Header, int]:
    """One header at ``offset`` and the offset just past it (StrucLength, §1.1)."""
    where = f"MQRFH2 at offset {offset}"
    available = len(view) - offset
    if available < FIXED_LENGTH:
        raise _rfh_error(where, f"only {available} bytes left; an MQRFH2 needs at least {FIXED_LENGTH}")
    fields = _FIXED[order].unpack_from(view, offset)
    struc_id, version, struc_length, encoding, ccsid, format_id, flags, name_value_ccsid = fields
    _check_struc_id(struc_id, where)
    if version != VERSION_2:
        raise _rfh_error(where, _version_problem(version, view, offset, order))
    _check_struc_length(struc_length, available, where)
    _check_ccsid(ccsid, where)
    format_text = _format_text(format_id, where)
    codec = _codec(name_value_ccsid, order, where)
    header = RFH2Header(
        encoding=encoding,
        ccsid=ccsid,
        format=format_text,
        flags=flags,
        name_value_ccsid=name_value_ccsid,
        folders=_decode_folders(view, offset, offset + struc_length, order, codec, where),
    )
    return header, offset + struc_length


def _decode_folders(
    view: memoryview, header_offset: int, end: int, order: str, codec: str, where: str
) -> tuple[str, ...]:
    """The NameValueLength/NameValueData pairs between the fixed part and ``end`` (§1.1, §1.3)."""
    unpack_length = _LENGTH[order].unpack_from
    folders: list[str] = []
    offset = header_offset + FIXED_LENGTH
    while offset < end:
        (length,) = unpack_length(view, offset)
        data = offset + 4
        if length < 0 or length % 4 or length > end - data:
            raise _rfh_error(
                where,
                f"NameValueLength {length} at offset {offset} " + _length_problem(length, end - data),
            )
        try:
            text = str(view[data : data + length], codec)
        except UnicodeDecodeError as exc:
            raise _rfh_error(
                where,
                f"NameValueData at offset {data} is not valid {codec}: {exc.reason} "
                f"at offset {data + exc.start}",
            ) from None
        text = text.rstrip(_PADDING)
        if text:
            folders.append(text)
        offset = data + length
    return tuple(folders)


def _encode_header(header: RFH2Header, order: str, where: str) -> bytes:
    """One header's bytes: fixed part, then each folder blank-padded to a multiple of 4."""
    _check_ccsid(header.ccsid, where)
    codec = _codec(header.name_value_ccsid, order, where)
    format_id = _format_bytes(header.format, where)
    blank = _BLANKS[codec]
    padded = []
    for index, folder in enumerate(header.folders):
        data = _folder_bytes(folder, codec, f"{where} folder {index}")
        padded.append(data + blank * (-len(data) % 4 // len(blank)))
    pack_length = _LENGTH[order].pack
    struc_length = FIXED_LENGTH + sum(4 + len(data) for data in padded)
    try:
        parts = [
            _FIXED[order].pack(
                STRUC_ID,
                VERSION_2,
                struc_length,
                header.encoding,
                header.ccsid,
                format_id,
                header.flags,
                header.name_value_ccsid,
            )
        ]
        for data in padded:
            parts += (pack_length(len(data)), data)
    except struct.error as exc:
        raise _rfh_error(where, f"a value does not fit its 32-bit field: {exc}") from None
    return b"".join(parts)


def _folder_bytes(folder: str, codec: str, where: str) -> bytes:
    """A folder's NameValueData before padding; refuses text that would not decode back."""
    if not folder or folder[-1] in _PADDING:
        raise _rfh_error(
            where,
            f"{folder[-40:]!r} is empty or ends in a blank or NUL, which reads back as padding",
        )
    try:
        return folder.encode(codec)
    except UnicodeEncodeError as exc:
        raise _rfh_error(where, f"cannot be written as {codec}: {exc.reason}") from None


def _check_mqmd_format(format: str) -> None:
    """2421 for an MQRFH v1 message, 3023 when the MQMD announces no MQRFH2 at all."""
    if _names_rfh2(format):
        return
    if format.rstrip(_PADDING) == _RFH1_FORMAT_NAME:
        raise RFH2Error(
            Reason.MQRC_RFH_FORMAT_ERROR,
            f"MQMD Format {format!r}: RFH version 1 is not supported (use MQRFH2, "
            f"Format {MQFMT_RF_HEADER_2!r})",
        )
    raise RFH2Error(
        Reason.MQRCCF_MD_FORMAT_ERROR,
        f"MQMD Format {format!r} is not {MQFMT_RF_HEADER_2!r}: the message has no MQRFH2 header",
    )


def _names_rfh2(format: str) -> bool:
    return format.rstrip(_PADDING) == _RFH2_FORMAT_NAME


def _byte_order(encoding: int, what: str) -> str:
    integers = encoding & MQENC_INTEGER_MASK
    if integers == MQENC_INTEGER_NORMAL:
        return _BIG
    if integers == MQENC_INTEGER_REVERSED:
        return _LITTLE
    raise RFH2Error(
        Reason.MQRC_RFH_ERROR,
        f"{what} is {encoding}, whose integer encoding {integers} is neither "
        f"{MQENC_INTEGER_NORMAL} (MQENC_INTEGER_NORMAL) nor {MQENC_INTEGER_REVERSED} "
        "(MQENC_INTEGER_REVERSED)",
    )


def _check_struc_id(struc_id: bytes, where: str) -> None:
    if struc_id == STRUC_ID:
        return
    if struc_id == _EBCDIC_STRUC_ID:
        raise _rfh_error(where, "StrucId is 'RFH ' in EBCDIC; only ASCII-based header fields are supported")
    raise _rfh_error(where, f"StrucId {struc_id!r} is not {STRUC_ID!r}")


def _version_problem(version: int, view: memoryview, offset: int, order: str) -> str:
    if version == _VERSION_1:
        return "Version 1: an MQRFH version 1 structure where the format announces an MQRFH2 (version 2)"
    other = _LITTLE if order == _BIG else _BIG
    (swapped,) = _LENGTH[other].unpack_from(view, offset + 4)
    hint = ""
    if swapped in (_VERSION_1, VERSION_2):
        hint = (
            f" (it reads as {swapped} {_ORDER_NAMES[other]}: the Encoding of the preceding "
            f"structure says {_ORDER_NAMES[order]}; check the MQMD or previous header)"
        )
    return f"Version {version} is not {VERSION_2}{hint}"


def _check_struc_length(struc_length: int, available: int, where: str) -> None:
    if struc_length < FIXED_LENGTH:
        problem = f"is less than the fixed length {FIXED_LENGTH}"
    elif struc_length % 4:
        problem = "is not a multiple of 4"
    elif struc_length > available:
        problem = f"runs past the end of the body ({available} bytes from this header on)"
    else:
        return
    raise _rfh_error(where, f"StrucLength {struc_length} {problem}")


def _length_problem(length: int, room: int) -> str:
    if length < 0:
        return "is negative"
    if length % 4:
        return "is not a multiple of 4"
    return f"runs past StrucLength ({room} bytes left in the header)"


def _check_ccsid(ccsid: int, where: str) -> None:
    if ccsid in _INVALID_CCSIDS:
        raise _rfh_error(
            where,
            f"CodedCharSetId {ccsid} ({_INVALID_CCSIDS[ccsid]}) is not valid in an MQRFH2; "
            "use -2 (MQCCSI_INHERIT) or a real CCSID",
        )


def _codec(name_value_ccsid: int, order: str, where: str) -> str:
    """The Python codec for NameValueData; UTF-16 follows the header's integer order (§1.2)."""
    try:
        return _CODECS[order][name_value_ccsid]
    except KeyError:
        raise _rfh_error(
            where,
            f"NameValueCCSID {name_value_ccsid} is not one of 1208, 1200, 13488 or 17584",
        ) from None


def _format_text(format_id: bytes, where: str) -> str:
    try:
        return format_id.decode("ascii")
    except UnicodeDecodeError:
        raise _rfh_error(where, f"Format {format_id!r} is not ASCII") from None


def _format_bytes(format: str, where: str) -> bytes:
    if len(format) != _FORMAT_LENGTH or not format.isascii():
        raise _rfh_error(where, f"Format {format!r} is not {_FORMAT_LENGTH} ASCII characters")
    return format.encode("ascii")


def _rfh_error(where: str, problem: str) -> RFH2Error:
    return RFH2Error(Reason.MQRC_RFH_ERROR, f"{where}: {problem}")
