"""MQTT 3.1 and 3.1.1: packets, and one connection's protocol rules (``session``)."""

from __future__ import annotations

from broker.protocol.mqtt import packets, session

__all__ = ["packets", "session"]
