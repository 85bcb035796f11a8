"""The PROXY protocol header, versions 1 and 2, as HAProxy sends it (and what it must not be)."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from broker.protocol.proxy import V1_MAX, V2_SIGNATURE, ProxyHeader, ProxyProtocolError, parse

CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"  # what the client sends after the header


def v2(command: int, family: int, body: bytes) -> bytes:
    return V2_SIGNATURE + bytes([command, family]) + struct.pack(">H", len(body)) + body


def addresses(source: str, destination: str, sport: int, dport: int) -> bytes:
    packed = ipaddress.ip_address(source).packed + ipaddress.ip_address(destination).packed
    return packed + struct.pack(">HH", sport, dport)


V1_TCP4 = b"PROXY TCP4 203.0.113.7 10.0.0.1 51234 1883\r\n"
V1_TCP6 = b"PROXY TCP6 2001:db8::7 2001:db8::1 4242 1883\r\n"
V2_TCP4 = v2(0x21, 0x11, addresses("198.51.100.9", "10.0.0.1", 60000, 1883))
V2_TCP6 = v2(0x21, 0x21, addresses("2001:db8::9", "2001:db8::1", 1, 1883))
V2_TLVS = v2(0x21, 0x11, addresses("198.51.100.9", "10.0.0.1", 60000, 1883) + b"\x04\x00\x02ab")


@pytest.mark.parametrize(
    ("header", "address"),
    [
        (V1_TCP4, "203.0.113.7:51234"),
        (V1_TCP6, "[2001:db8::7]:4242"),
        (b"PROXY UNKNOWN\r\n", None),
        (b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", None),
        (V2_TCP4, "198.51.100.9:60000"),
        (V2_TCP6, "[2001:db8::9]:1"),
        (V2_TLVS, "198.51.100.9:60000"),  # TLVs after the addresses are skipped
        (v2(0x20, 0x00, b""), None),  # LOCAL: HAProxy's own health check
        (v2(0x20, 0x11, addresses("1.2.3.4", "5.6.7.8", 1, 2)), None),  # LOCAL ignores addresses
        (v2(0x21, 0x31, b"\x00" * 216), None),  # a client on a UNIX socket: no address to take
    ],
)
def test_a_whole_header_is_its_length_and_the_client_it_names(header: bytes, address: str | None) -> None:
    found = parse(header + CONNECT)
    assert found == ProxyHeader(len(header), found.source if found else None)
    assert found is not None and found.address == address


@pytest.mark.parametrize("header", [V1_TCP4, V1_TCP6, V2_TCP4, V2_TCP6, V2_TLVS, b"PROXY UNKNOWN\r\n"])
def test_every_prefix_of_a_header_asks_for_more(header: bytes) -> None:
    assert all(parse(header[:end]) is None for end in range(len(header)))
    assert parse(header) is not None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (CONNECT, "no PROXY protocol header"),  # an MQTT client that did not come through the proxy
        (b"GET / HTTP/1.1\r\n", "no PROXY protocol header"),
        (b"PROXI TCP4", "no PROXY protocol header"),
        (b"\r\n\r\n\x00\r\nQUIX\n", "no PROXY protocol header"),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "family"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "family"),
        (b"PROXY TCP4 2001:db8::1 5.6.7.8 1 2\r\n", "malformed address"),
        (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", "malformed address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "malformed address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "malformed address"),
        (b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\n", "malformed address"),
        (b"PROXY TCP4 \xff.2.3.4 5.6.7.8 1 2\r\n", "not ASCII"),
        (b"PROXY TCP4 " + b"1" * V1_MAX, "longer than"),
        (v2(0x11, 0x11, addresses("1.2.3.4", "5.6.7.8", 1, 2)), "version and command"),
        (v2(0x22, 0x11, addresses("1.2.3.4", "5.6.7.8", 1, 2)), "version and command"),
        (v2(0x21, 0x11, b"\x00" * 8), "too short"),
        (v2(0x21, 0x21, addresses("1.2.3.4", "5.6.7.8", 1, 2)), "too short"),
        (V2_SIGNATURE + b"\x21\x11\xff\xff", "longer than"),
    ],
)
def test_anything_else_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ProxyProtocolError, match=why):
        parse(data)


def test_nothing_yet_asks_for_more() -> None:
    assert parse(b"") is None
