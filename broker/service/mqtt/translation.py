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

import re
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from broker.protocol import psc, rfh2
from broker.protocol.messages import command_message, decode_publication
from broker.protocol.mqtt.packets import Publish
from broker.protocol.options import PubOpt, RegOpt
from queues import Message
from queues.ids import mq_date_time, now_ms, unique_id
from queues.message import MQFMT_NONE, MQPER_NOT_PERSISTENT, MQPER_PERSISTENT, derive

QOS_FOLDER = "mqtt"
CACHED_BODY = 64 * 1024
TEMPLATES = 4096  # topics whose publication template is kept
_QOS = re.compile(r"<qos>([0-2])</qos>")
_ORIGIN = re.compile(rb"<mqtt><qos>[0-2]</qos><origin>([A-Za-z0-9._-]+)</origin></mqtt>")
SUBSCRIPTION_OPTIONS = RegOpt.InformIfRet
# A session's subscriptions go when it does, whoever registered them: the broker's own act.
DISCARD_OPTIONS = RegOpt.DeregAll | RegOpt.VariableUserId


def _stamped(message: Message) -> Message:
    """A unique MsgId and a put time: the ids of the deliveries are derived from them."""
    date, time = mq_date_time(now_ms())
    return derive(message, msg_id=unique_id(), put_date=date, put_time=time)


def publication(publish: Publish, user_id: str, origin: str = "") -> Message:
    """The Publish command for an MQTT PUBLISH (a zero-length retained one retains nothing:
    :func:`retained_deletion` goes with it). ``origin`` names the MQTT bridge it came over
    (``broker.service.mqtt.bridging``): it travels with the publication to every subscriber,
    so that bridge never sends it back."""
    return decoded_publication(publish, user_id, origin)[0]


def decoded_publication(publish: Publish, user_id: str, origin: str = "") -> tuple[Message, rfh2.RFH2Body]:
    """:func:`publication`, with its MQRFH2 as decoded (for the engine, which need not decode
    what was just encoded). Built from the topic's template: its headers are the same for
    every publication on the topic at one QoS, so they are rendered and encoded once."""
    retain = bool(publish.retain and publish.payload)
    template, headers = _template(publish.topic, publish.qos, retain, origin)
    date, time = mq_date_time(now_ms())
    message = derive(
        template,
        body=template.body + publish.payload,
        user_id=user_id,
        msg_id=unique_id(),
        put_date=date,
        put_time=time,
    )
    return message, rfh2.RFH2Body(headers.headers, publish.payload)


@lru_cache(maxsize=TEMPLATES)
def _template(topic: str, qos: int, retain: bool, origin: str) -> tuple[Message, rfh2.RFH2Body]:
    """The Publish command of a publication on ``topic`` with an empty payload (the MQRFH2's
    headers come first, the payload is what follows them), and its headers as decoded."""
    marked = f"<origin>{origin}</origin>" if origin else ""
    command = psc.Publish((topic,), options=PubOpt.RetainPub if retain else psc.NO_PUB_OPTIONS)
    message = command_message(
        command,
        payload_format=MQFMT_NONE,
        folders=(f"<{QOS_FOLDER}><qos>{qos}</qos>{marked}</{QOS_FOLDER}>",),
        request=False,
        persistence=MQPER_PERSISTENT if qos else MQPER_NOT_PERSISTENT,
    )
    return message, rfh2.decode(message.body, message.encoding, message.format)


def retained_deletion(topic: str, user_id: str) -> Message:
    """A zero-length retained PUBLISH deletes the topic's retained publication, here and at
    the neighbours, as DeletePub does."""
    command = psc.DeletePub((topic,))
    return _stamped(command_message(command, request=False, user_id=user_id))


class Typed(NamedTuple):
    """A command message built here, with its MQRFH2 as built and the command itself: the engine
    takes them as they are (``broker.core.engine.route``), parsing nothing it was handed."""

    message: Message
    headers: rfh2.RFH2Body
    command: psc.Command


def typed_registration(
    filters: tuple[str, ...],
    queue: str,
    user_id: str,
    *,
    remove: bool = False,
    options: RegOpt = SUBSCRIPTION_OPTIONS,
) -> Typed:
    """RegSub (or DeregSub) of ``filters`` for the session queue ``queue``, with its headers and
    command (a SUBSCRIBE's path: routed at once)."""
    kind = psc.DeregSub if remove else psc.RegSub
    command = kind(filters, q_name=queue, options=options)
    message = _stamped(command_message(command, request=False, user_id=user_id))
    folder = psc.render(command)
    header = rfh2.RFH2Header(folders=(folder,))  # as command_message builds it
    return Typed(message, rfh2.RFH2Body((header,), b""), replace(command, folder=folder))


def discard(queue: str, admin: str) -> Typed:
    """The DeregSub that removes every subscription of a session's queue."""
    return typed_registration((), queue, admin, remove=True, options=DISCARD_OPTIONS)


def origin(message: Message) -> str:
    """The bridge a delivered publication came over ("" if none)."""
    found = _ORIGIN.search(message.body)
    return found.group(1).decode() if found else ""


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
