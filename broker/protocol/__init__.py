"""Wire formats, pure: MQRFH2 headers, the ``<psc>`` command folder, ``<pscr>`` responses,
command options, ``<brokerpath>`` and MQTT 3.1 / 3.1.1 (the ``mqtt`` package). Bytes in,
typed values out, and back; nothing here touches a database, a socket or a clock."""

from __future__ import annotations

from broker.protocol import brokerpath, mqtt, options, psc, pscr, rfh2
from broker.protocol.brokerpath import BrokerPath
from broker.protocol.options import DelOpt, OptionError, PubOpt, RegOpt
from broker.protocol.psc import Command, DeletePub, DeregSub, PscError, Publish, RegSub, ReqUpdate
from broker.protocol.pscr import PscrError, Response, ResponseItem
from broker.protocol.rfh2 import RFH2Body, RFH2Error, RFH2Header

__all__ = [
    "BrokerPath",
    "Command",
    "DelOpt",
    "DeletePub",
    "DeregSub",
    "OptionError",
    "PscError",
    "PscrError",
    "PubOpt",
    "Publish",
    "RFH2Body",
    "RFH2Error",
    "RFH2Header",
    "RegOpt",
    "RegSub",
    "ReqUpdate",
    "Response",
    "ResponseItem",
    "brokerpath",
    "mqtt",
    "options",
    "psc",
    "pscr",
    "rfh2",
]
