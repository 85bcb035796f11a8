"""Wire formats, pure: MQRFH2 headers (``rfh2``), the ``<psc>`` command folder (``psc``),
``<pscr>`` responses (``pscr``), command options, ``<brokerpath>``, command messages
(``messages``) and MQTT 3.1, 3.1.1 and 5.0 (the ``mqtt`` package). Bytes in, typed values out,
and back; nothing here touches a database, a socket or a clock.

Nothing is re-exported: a command is ``psc.Publish`` and an MQTT packet ``packets.Publish``
wherever both could be meant, and importing one format loads no other.
"""
