"""The PROXY protocol header (versions 1 and 2) a TCP load balancer puts before a client's bytes.

HAProxy in TCP mode (``send-proxy`` / ``send-proxy-v2`` on a server line) connects to a node
from its own address; the header it sends first names the client's, which the sign-in throttle,
the sessions list and the logs need. Pure: bytes in, a :class:`ProxyHeader` (or a need for more
bytes, or :class:`ProxyProtocolError`) out. The format is HAProxy's specification
("The PROXY protocol", versions 1 and 2); a node reads it only from the addresses it is told to
trust (``mqtt_proxy_from``), since anyone else could name any address.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest version 1 header, CRLF included (the specification's bound)
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16  # signature, version and command, family and protocol, length
V2_LOCAL, V2_PROXY = 0x20, 0x21  # version 2 in the high nibble, the command in the low one
V2_TCP4, V2_TCP6 = 0x11, 0x21  # the families a TCP client is named by
V2_MAX = V2_FIXED + 4096  # addresses and TLVs: HAProxy sends a few hundred bytes at most
_V2_HEADER = struct.Struct(">12sBBH")
_V2_TCP4 = struct.Struct(">4s4sHH")
_V2_TCP6 = struct.Struct(">16s16sHH")


class ProxyProtocolError(ValueError):
    """What came is not a PROXY protocol header (or not one this node takes)."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A whole header: ``length`` bytes, naming the client as ``source`` (host, port), or None
    for a connection the balancer makes on its own behalf (version 2's LOCAL command, its health
    checks; version 1's UNKNOWN), whose address is the balancer's own."""

    length: int
    source: tuple[str, int] | None

    @property
    def address(self) -> str | None:
        """The client's ``host:port`` (None: the connection's own)."""
        if self.source is None:
            return None
        host, port = self.source
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse(data: bytes) -> ProxyHeader | None:
    """The header at the start of ``data``; None while ``data`` is the start of one and more
    bytes are needed. Raises :class:`ProxyProtocolError` for anything else."""
    if not data:
        return None
    if data[:1] == b"\r":
        if not V2_SIGNATURE.startswith(data[:12]):
            raise ProxyProtocolError("no PROXY protocol header")
        return _v2(data)
    if not V1_PREFIX.startswith(data[:6]):
        raise ProxyProtocolError("no PROXY protocol header")
    return _v1(data)


def _v1(data: bytes) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise ProxyProtocolError(f"a version 1 header longer than {V1_MAX} bytes")
        return None
    try:
        fields = data[:end].decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ProxyProtocolError("a version 1 header that is not ASCII") from None
    if len(fields) < 2:
        raise ProxyProtocolError("a malformed version 1 header")
    family = fields[1]
    if family == "UNKNOWN":
        return ProxyHeader(end + 2, None)
    if family not in ("TCP4", "TCP6") or len(fields) != 6:
        raise ProxyProtocolError(f"a version 1 header of family {family[:8]!r}")
    source, _, source_port, _ = fields[2:]
    version = 4 if family == "TCP4" else 6
    try:
        host = ipaddress.ip_address(source)
        port = int(source_port)
    except ValueError:
        raise ProxyProtocolError("a version 1 header with a malformed address") from None
    if host.version != version or not source_port.isdigit() or not 0 <= port <= 65535:
        raise ProxyProtocolError("a version 1 header with a malformed address")
    return ProxyHeader(end + 2, (str(host), port))


def _v2(data: bytes) -> ProxyHeader | None:
    if len(data) < V2_FIXED:
        return None
    signature, command, family, size = _V2_HEADER.unpack_from(data)
    if signature != V2_SIGNATURE:
        raise ProxyProtocolError("no PROXY protocol header")
    if command not in (V2_LOCAL, V2_PROXY):
        raise ProxyProtocolError(f"a version 2 header with version and command {command:#04x}")
    length = V2_FIXED + size
    if length > V2_MAX:
        raise ProxyProtocolError(f"a version 2 header longer than {V2_MAX} bytes")
    if len(data) < length:
        return None
    if command == V2_LOCAL or family not in (V2_TCP4, V2_TCP6):
        return ProxyHeader(length, None)  # a health check, or a client not on TCP: its own address
    layout = _V2_TCP4 if family == V2_TCP4 else _V2_TCP6
    if size < layout.size:
        raise ProxyProtocolError("a version 2 header too short for its addresses")
    source, _, port, _ = layout.unpack_from(data, V2_FIXED)
    return ProxyHeader(length, (str(ipaddress.ip_address(source)), port))
