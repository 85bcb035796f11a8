"""The ``<brokerpath>`` folder: where a forwarded publication has been.

Every publication or DeletePub a broker forwards to a neighbour carries the
queue managers it has passed through (origin first) and the MsgId it had at its
origin. A broker that finds its own name in the path drops the message as a
looping publication (MQRC_LOOPING_PUBLICATION, 2541) instead of circulating it,
whatever the link configuration; the origin MsgId lets a broker recognise a
retained publication it already holds when a neighbour sends it again.

The folder is this product's own (IBM's brokers used internal PCF for this);
applications never see it: deliveries to subscribers do not carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.psc import PscError, escape_text, load_folder
from queues.reasons import Reason

FOLDER = "brokerpath"
MAX_HOPS = 64


@dataclass(frozen=True, slots=True)
class BrokerPath:
    origin_msg_id: bytes
    hops: tuple[str, ...]  # queue managers passed through, origin first

    @property
    def last_hop(self) -> str:
        return self.hops[-1]

    def through(self, qmgr: str) -> BrokerPath:
        return BrokerPath(self.origin_msg_id, (*self.hops, qmgr))


def render(path: BrokerPath) -> str:
    hops = "".join(f"<QMgr>{escape_text(hop)}</QMgr>" for hop in path.hops)
    return f"<{FOLDER}><OrigMsgId>{path.origin_msg_id.hex()}</OrigMsgId>{hops}</{FOLDER}>"


def parse(folder: str) -> BrokerPath:
    """Read a path; anything malformed is 2337 (it came from a broker, or was forged)."""
    root = load_folder(folder, FOLDER)
    origin = b""
    hops: list[str] = []
    for child in root:
        text = (child.text or "").strip()
        if child.tag == "OrigMsgId":
            try:
                origin = bytes.fromhex(text)
            except ValueError:
                raise _bad("OrigMsgId is not hexadecimal") from None
        elif child.tag == "QMgr":
            if not text:
                raise _bad("an empty <QMgr>")
            hops.append(text)
        else:
            raise _bad(f"unexpected <{child.tag}>")
    if not hops or len(hops) > MAX_HOPS or len(origin) != 24:
        raise _bad("a path needs an OrigMsgId of 24 bytes and 1 to 64 QMgr elements")
    return BrokerPath(origin, tuple(hops))


def _bad(message: str) -> PscError:
    return PscError(Reason.MQRC_RFH_PARM_ERROR, f"<{FOLDER}> folder: {message}", parameter=FOLDER)
