"""What the codec raises: input that is not MQTT, after which the connection must be closed
(every level says a malformed packet ends the connection). MQTT 5.0 first answers with the
error's reason code, in a CONNACK before the connection is open and a DISCONNECT after."""

from __future__ import annotations

from broker.protocol.mqtt.packets import CONNACK_UNACCEPTABLE_VERSION, Packet
from broker.protocol.mqtt.v5.reasons import ReasonCode


class MqttProtocolError(Exception):
    """Malformed input: the connection must be closed. ``reason`` says what was wrong, for the
    log line that records why a client was dropped; ``reason_code``, the MQTT 5.0 reason code
    to answer with (Malformed Packet unless the specification names another).

    ``packets``: the whole packets the same read held before the malformed one, in order (the
    decoder fills it in). A server that read the stream a byte at a time would have acted on
    them before seeing the error; they are handed over so that what a client's packet does
    never depends on how TCP cut the stream into reads.
    """

    def __init__(self, reason: str, reason_code: ReasonCode = ReasonCode.MALFORMED_PACKET) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reason_code = reason_code
        self.packets: list[Packet] = []


class UnacceptableProtocol(MqttProtocolError):
    """A CONNECT naming MQTT ("MQTT" or "MQIsdp") at a level the decoder does not accept (an MQTT
    5 client where 5.0 is not enabled, say). Unlike other malformed input the specifications ask
    for an answer first: CONNACK with ``return_code`` (1, unacceptable protocol version, in the
    3.1.1 layout every level's client reads), then the close."""

    def __init__(self, reason: str, return_code: int = CONNACK_UNACCEPTABLE_VERSION) -> None:
        super().__init__(reason, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION)
        self.return_code = return_code
