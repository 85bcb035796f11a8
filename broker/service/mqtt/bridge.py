"""MQTT packets as the broker's MQRFH2 command messages, and deliveries back as PUBLISH.

An MQTT client's PUBLISH becomes the Publish command an MQRFH2 application would put on
the default stream: ``<psc>`` with the topic (RetainPub for RETAIN=1), the payload as the
body, the client's principal as UserIdentifier; so the one engine authorises, matches,
retains and forwards it, and MQRFH2 subscribers receive an ordinary publication. Its QoS
travels in an ``<mqtt>`` folder (passed through to subscribers like ``<usr>``) and in the
persistence (QoS 0 non-persistent). A publication without that folder (an MQRFH2
application's) counts as QoS 2 when persistent and 0 otherwise; an MQTT subscriber gets
it at the lower of that and the QoS it was granted.

SUBSCRIBE and UNSUBSCRIBE become RegSub and DeregSub of the session's queue, with
InformIfRet so that retained publications sent for a new subscription carry
IsRetainedPub, which becomes RETAIN=1 (live ones carry RETAIN=0).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from broker.client import command_message, decode_publication
from broker.protocol import psc
from broker.protocol.mqtt.packets import Publish
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from queues import Message
from queues.ids import mq_date_time, now_ms
from queues.message import MQFMT_NONE, MQPER_NOT_PERSISTENT, MQPER_PERSISTENT, derive

QOS_FOLDER = "mqtt"
CACHED_BODY = 64 * 1024
_QOS = re.compile(r"<qos>([0-2])</qos>")
SUBSCRIPTION_OPTIONS = RegOpt.InformIfRet
# A session's subscriptions go when it does, whoever registered them: the broker's own act.
DISCARD_OPTIONS = RegOpt.DeregAll | RegOpt.VariableUserId


def _stamped(message: Message) -> Message:
    """A unique MsgId and a put time: the ids of the deliveries are derived from them."""
    date, time = mq_date_time(now_ms())
    return derive(message, msg_id=os.urandom(24), put_date=date, put_time=time)


def publication(publish: Publish, user_id: str) -> Message:
    """The Publish command for an MQTT PUBLISH (a zero-length retained one retains nothing:
    :func:`retained_deletion` goes with it)."""
    options = PubOpt.RetainPub if publish.retain and publish.payload else PubOpt(0)
    command = psc.Publish(
        topics=(publish.topic,),
        sub_point=None,
        options=options,
        pub_time=None,
        seq_num=None,
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    return _stamped(
        command_message(
            command,
            payload=publish.payload,
            payload_format=MQFMT_NONE,
            folders=(f"<{QOS_FOLDER}><qos>{publish.qos}</qos></{QOS_FOLDER}>",),
            request=False,
            user_id=user_id,
            persistence=MQPER_PERSISTENT if publish.qos else MQPER_NOT_PERSISTENT,
        )
    )


def retained_deletion(topic: str, user_id: str) -> Message:
    """A zero-length retained PUBLISH deletes the topic's retained publication, here and at
    the neighbours, as DeletePub does."""
    command = psc.DeletePub(
        topics=(topic,), sub_point=None, options=DelOpt(0), q_mgr_name=None, q_name=None, folder=""
    )
    return _stamped(command_message(command, request=False, user_id=user_id))


def registration(
    filters: tuple[str, ...],
    queue: str,
    user_id: str,
    *,
    remove: bool = False,
    options: RegOpt = SUBSCRIPTION_OPTIONS,
) -> Message:
    """RegSub (or DeregSub) of ``filters`` for the session queue ``queue``."""
    kind = psc.DeregSub if remove else psc.RegSub
    command = kind(
        topics=filters,
        sub_point=None,
        filter=None,
        q_mgr_name=None,
        q_name=queue,
        options=options,
        sub_name=None,
        sub_identity=None,
        sub_user_data=None,
        correl_id=None,
        folder="",
    )
    return _stamped(command_message(command, request=False, user_id=user_id))


def discard(queue: str, admin: str) -> Message:
    """The DeregSub that removes every subscription of a session's queue."""
    return registration((), queue, admin, remove=True, options=DISCARD_OPTIONS)


def delivery(message: Message) -> Publish:
    """A publication from a session queue as the PUBLISH to send (QoS as published, RETAIN
    from IsRetainedPub; the listener lowers the QoS to the one granted and numbers it)."""
    decode = _decoded if len(message.body) <= CACHED_BODY else _decode
    return decode(message.body, message.encoding, message.format, message.persistence)


def _decode(body: bytes, encoding: int, format: str, persistence: int) -> Publish:
    received = decode_publication(
        Message(body=body, encoding=encoding, format=format, persistence=persistence)
    )
    qos = 2 if persistence == MQPER_PERSISTENT else 0
    for folder in received.folders:
        if folder.startswith(f"<{QOS_FOLDER}>") and (found := _QOS.search(folder)):
            qos = int(found.group(1))
    return Publish(received.topic, received.body, qos=qos, retain=received.retained)


# A publication's subscribers get copies with one body: small ones are decoded once.
_decoded = lru_cache(maxsize=256)(_decode)
