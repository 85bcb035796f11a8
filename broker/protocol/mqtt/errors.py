"""What the codec raises: input that is not MQTT 3.1 or 3.1.1, after which the connection
must be closed (both specifications say a malformed packet ends the connection; there is no
error packet to answer with)."""

from __future__ import annotations

from broker.protocol.mqtt.packets import CONNACK_UNACCEPTABLE_VERSION, Packet


class MqttProtocolError(Exception):
    """Malformed input: the connection must be closed. ``reason`` says what was wrong, for the
    log line that records why a client was dropped.

    ``packets``: the whole packets the same read held before the malformed one, in order (the
    decoder fills it in). A server that read the stream a byte at a time would have acted on
    them before seeing the error; they are handed over so that what a client's packet does
    never depends on how TCP cut the stream into reads.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.packets: list[Packet] = []


class UnacceptableProtocol(MqttProtocolError):
    """A CONNECT naming MQTT ("MQTT" or "MQIsdp") at a level other than 3.1 or 3.1.1 (an MQTT 5
    client, say). Unlike other malformed input the specifications ask for an answer first:
    CONNACK with ``return_code`` (1, unacceptable protocol version), then the close."""

    def __init__(self, reason: str, return_code: int = CONNACK_UNACCEPTABLE_VERSION) -> None:
        super().__init__(reason)
        self.return_code = return_code
