"""What MQTT 5.0 adds to the wire: reason codes (``reasons``), properties (``properties``) and the
packet bodies that carry them (``codec``). :mod:`broker.protocol.mqtt.codec` is the entry point
for every level; nothing here is imported on its own."""
