"""Commands this broker sends to neighbouring brokers (reference section 5).

Proxy subscriptions: a broker holds one proxy subscription at each neighbour
for every (subscription point, topic) on which some *other* party (its own
applications, or another neighbour) has a global subscription, so publications
flow towards subscribers and nowhere else; it registers the proxy when the first
such subscription appears and deregisters it when the last goes (V6
"consolidation"). Proxies are ordinary RegSub/DeregSub commands put on the
neighbour's control queue under the broker's own user ID, always PersAsPub and
never with a filter; their identity is (this queue manager, its inter-broker
queue), which is how the neighbour recognises them.

Network-wide DeletePub travels to every neighbour except the ones it has
already passed through, carrying the ``<brokerpath>``.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.core.effects import FORWARD, PROXY, Effect, Put, RemoveSubscription
from broker.core.state import BrokerState
from broker.core.subscription import Subscription
from broker.protocol import brokerpath, psc, rfh2
from broker.protocol.options import RegOpt
from queues import xqh
from queues.ids import derived_id, mq_date_time
from queues.message import (
    CCSID_UTF8,
    MQAT_BROKER,
    MQENC_NATIVE,
    MQENC_NORMAL,
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQFMT_XMIT_Q_HEADER,
    MQMT_DATAGRAM,
    MQPER_PERSISTENT,
    MQRO_NAN,
    USER_ID_LENGTH,
    Message,
    derive,
)


def command_message(state: BrokerState, folders: tuple[str, ...], msg_id: bytes, now: int) -> Message:
    """A broker-to-broker command: persistent datagram, errors reported (NAN) to our
    inter-broker queue, where the engine logs them."""
    date, time = mq_date_time(now)
    header = rfh2.RFH2Header(encoding=MQENC_NATIVE, ccsid=CCSID_UTF8, format=MQFMT_NONE, folders=folders)
    return Message(
        body=rfh2.encode(rfh2.RFH2Body((header,), b""), MQENC_NATIVE),
        msg_id=msg_id,
        format=MQFMT_RF_HEADER_2,
        encoding=MQENC_NATIVE,
        ccsid=CCSID_UTF8,
        msg_type=MQMT_DATAGRAM,
        report=MQRO_NAN,
        reply_to_q=state.config.inter_broker_queue,
        reply_to_qmgr=state.qmgr,
        user_id=state.config.user_id[:USER_ID_LENGTH],
        persistence=MQPER_PERSISTENT,
        priority=5,
        put_appl_type=MQAT_BROKER,
        put_appl_name=state.qmgr[:28],
        put_date=date,
        put_time=time,
    )


def proxy_command(
    state: BrokerState, neighbour: str, sub_point: str, topic: str, *, register: bool, cause: bytes, now: int
) -> Put:
    """RegSub (or DeregSub) of this broker's proxy for (sub_point, topic) at ``neighbour``."""
    kind = psc.RegSub if register else psc.DeregSub
    command = kind(
        topics=(topic,),
        sub_point=sub_point or None,
        q_mgr_name=state.qmgr,
        q_name=state.config.inter_broker_queue,
        options=RegOpt.PersAsPub if register else RegOpt(0),
    )
    msg_id = derived_id(
        b"proxy", cause, neighbour.encode(), sub_point.encode(), topic.encode(), b"R" if register else b"D"
    )
    message = command_message(state, (psc.render(command),), msg_id, now)
    return Put(state.config.control_queue, message, neighbour, PROXY, topic)


def proxy_changes(
    state: BrokerState,
    added: Iterable[Subscription],
    removed: Iterable[Subscription],
    *,
    cause: bytes,
    now: int,
) -> list[Put]:
    """Proxy registrations and deregistrations caused by adding and removing
    subscriptions (a changed subscription is removed then added), judged against
    the state before the change."""
    if not state.neighbours:  # a broker alone proxies nothing (every MQTT SUBSCRIBE comes here)
        return []
    deltas: dict[tuple[str, str], dict[str | None, int]] = {}
    for sign, subscriptions in ((1, added), (-1, removed)):
        for sub in subscriptions:
            if sub.is_local:
                continue
            slot = deltas.setdefault((sub.key.sub_point, sub.key.topic), {})
            slot[sub.origin] = slot.get(sub.origin, 0) + sign
    puts = []
    for (sub_point, topic), delta in deltas.items():
        before = state.global_origins(sub_point, topic)
        after = {o: before.get(o, 0) + delta.get(o, 0) for o in before.keys() | delta.keys()}
        for neighbour in sorted(state.neighbours):
            had = any(count > 0 for origin, count in before.items() if origin != neighbour)
            has = any(count > 0 for origin, count in after.items() if origin != neighbour)
            if had != has:
                puts.append(
                    proxy_command(state, neighbour, sub_point, topic, register=has, cause=cause, now=now)
                )
    return puts


def proxies_for(state: BrokerState, neighbour: str, now: int) -> list[Put]:
    """Every proxy a newly linked neighbour must hold for this broker."""
    cause = derived_id(b"join", neighbour.encode(), str(now).encode())
    return [
        proxy_command(state, neighbour, sub_point, topic, register=True, cause=cause, now=now)
        for sub_point, topic in state.proxied_to(neighbour)
    ]


def forget(state: BrokerState, neighbour: str, now: int) -> list[Effect]:
    """A neighbour is unlinked: drop the proxies it held here, and the proxies this
    broker held elsewhere on its behalf alone."""
    gone = [sub for sub in state.subscriptions() if sub.origin == neighbour]
    cause = derived_id(b"unlink", neighbour.encode(), str(now).encode())
    effects: list[Effect] = [RemoveSubscription(sub.key) for sub in gone]
    effects.extend(proxy_changes(state, (), gone, cause=cause, now=now))
    return effects


def forwarded_delete(
    state: BrokerState,
    neighbour: str,
    topics: tuple[str, ...],
    sub_point: str,
    path: brokerpath.BrokerPath,
    now: int,
) -> Put:
    """A network-wide DeletePub passed on to ``neighbour``."""
    command = psc.DeletePub(topics, sub_point=sub_point or None)
    msg_id = derived_id(b"delete", path.origin_msg_id, neighbour.encode())
    message = command_message(state, (psc.render(command), brokerpath.render(path)), msg_id, now)
    return Put(state.config.inter_broker_queue, message, neighbour, FORWARD)


def transmission(put: Put) -> tuple[str, Message]:
    """A put for a neighbour's queue, as MQ does it: onto the transmission queue named
    after that queue manager, wrapped in an MQXQH that says where it is going."""
    m = put.message
    wrapped = derive(
        m,
        body=xqh.encode(put.queue, put.q_mgr, m),
        format=MQFMT_XMIT_Q_HEADER,
        encoding=MQENC_NORMAL,  # the MQXQH's integers are big-endian
        ccsid=CCSID_UTF8,
    )
    return put.q_mgr, wrapped
