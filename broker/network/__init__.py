"""Broker networks: neighbouring broker instances linked by channels (reference section 5).

Each broker is its own queue manager with its own database. A message bound for
a neighbour waits on a transmission queue named after it (MQXQH-wrapped, as in
MQ); the channel agent moves it over HTTP in numbered batches that the receiver
records in the same transaction as its puts, so every message crosses exactly
once; proxy subscriptions (``broker.core.neighbours``) make publications flow only
where subscribers are; ``<brokerpath>`` and a tree topology keep them from looping.
"""
