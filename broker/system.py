"""The broker's system queues, named as in WebSphere MQ."""

from __future__ import annotations

from queues.names import DEAD_LETTER_QUEUE

DEFAULT_STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
INTER_BROKER_QUEUE = "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS"

SYSTEM_QUEUE_DESCRIPTIONS = {
    DEFAULT_STREAM: "Default publication stream",
    CONTROL_QUEUE: "Broker control commands",
    INTER_BROKER_QUEUE: "Publications and commands from neighbouring brokers",
    DEAD_LETTER_QUEUE: "Dead-letter queue",
}
