"""MQTT packets as the broker's MQRFH2 command messages, and deliveries back as PUBLISH.

An MQTT client's PUBLISH becomes the Publish command an MQRFH2 application would put on
the default stream: ``<psc>`` with the topic (RetainPub for RETAIN=1), the payload as the
body, the client's principal as UserIdentifier; so the one engine authorises, matches,
retains and forwards it, and MQRFH2 subscribers receive an ordinary publication. Its QoS
travels in an ``<mqtt>`` folder (passed through to subscribers like ``<usr>``) and in the
persistence (QoS 0 non-persistent), with ``<retain>1</retain>`` when the client set RETAIN
(for subscriptions with Retain As Published) and an MQTT 5.0 publication's properties
(``broker.protocol.mqtt.folders``). A publication without that folder (an MQRFH2
application's) counts as QoS 2 when persistent and 0 otherwise; an MQTT subscriber gets
it at the lower of that and the QoS it was granted.

SUBSCRIBE and UNSUBSCRIBE become RegSub and DeregSub of the session's queue, with
InformIfRet so that retained publications sent for a new subscription carry
IsRetainedPub, which becomes RETAIN=1 (live ones carry RETAIN=0, or the publisher's with
Retain As Published).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from broker.protocol import psc, rfh2
from broker.protocol.messages import command_message, decode_publication
from broker.protocol.mqtt import folders
from broker.protocol.mqtt.packets import MQTT_5, SUBACK_FAILURE, Properties, Publish
from broker.protocol.mqtt.v5.reasons import ReasonCode
from broker.protocol.options import PubOpt, RegOpt
from queues import Message
from queues.ids import mq_date_time, now_ms, unique_id
from queues.message import MQFMT_NONE, MQFMT_STRING, MQPER_NOT_PERSISTENT, MQPER_PERSISTENT, derive
from queues.reasons import Reason

QOS_FOLDER = folders.QOS_FOLDER
CACHED_BODY = 64 * 1024
TEMPLATES = 4096  # topics whose publication template is kept
_QOS = re.compile(r"<qos>([0-2])</qos>")
_ORIGIN = re.compile(rb"<mqtt><qos>[0-2]</qos><origin>([A-Za-z0-9._-]+)</origin>")
_RETAINED = re.compile(rb"<mqtt><qos>[0-2]</qos>(?:<origin>[A-Za-z0-9._-]+</origin>)?<retain>1</retain>")
SUBSCRIPTION_OPTIONS = RegOpt.InformIfRet
# A session's subscriptions go when it does, whoever registered them: the broker's own act.
DISCARD_OPTIONS = RegOpt.DeregAll | RegOpt.VariableUserId
SHARE_OPTIONS = RegOpt.NewPubsOnly | RegOpt.JoinShared | RegOpt.VariableUserId
SHARE_LEAVE_OPTIONS = RegOpt.VariableUserId


def _stamped(message: Message) -> Message:
    """A unique MsgId and a put time: the ids of the deliveries are derived from them."""
    date, time = mq_date_time(now_ms())
    return derive(message, msg_id=unique_id(), put_date=date, put_time=time)


def publication(publish: Publish, user_id: str, origin: str = "") -> Message:
    """The Publish command for an MQTT PUBLISH (a zero-length retained one retains nothing:
    :func:`retained_deletion` goes with it). ``origin`` names the MQTT bridge it came over
    (``broker.service.mqtt.bridging``): it travels with the publication to every subscriber,
    so that bridge never sends it back."""
    return decoded_publication(publish, user_id, origin).message


def decoded_publication(publish: Publish, user_id: str, origin: str = "") -> Typed:
    """:func:`publication`, with its MQRFH2 as decoded and its command as built (for the
    engine, which need not decode or parse what was just built). Built from the topic's
    template: its headers are the same for every publication on the topic at one QoS, so they
    are rendered and encoded once. An MQTT 5.0 publication's properties travel in its folders
    and its MQMD Expiry (``broker.protocol.mqtt.folders``); one with folder-borne properties
    has headers of its own."""
    retain = bool(publish.retain and publish.payload)
    properties = publish.properties
    build = _headers if folders.carries(properties) else _template
    template, headers, command = build(publish.topic, publish.qos, retain, origin, properties)
    date, time = mq_date_time(now_ms())
    message = derive(
        template,
        body=template.body + publish.payload,
        user_id=user_id,
        msg_id=unique_id(),
        put_date=date,
        put_time=time,
    )
    return Typed(message, rfh2.RFH2Body(headers.headers, publish.payload), command)


def _headers(
    topic: str, qos: int, retain: bool, origin: str, properties: Properties
) -> tuple[Message, rfh2.RFH2Body, psc.Command]:
    """The Publish command of a publication on ``topic`` with an empty payload (the MQRFH2's
    headers come first, the payload is what follows them), its headers as decoded, and the
    command as built."""
    marked = (f"<origin>{origin}</origin>" if origin else "") + ("<retain>1</retain>" if retain else "")
    command = psc.Publish((topic,), options=PubOpt.RetainPub if retain else psc.NO_PUB_OPTIONS)
    carried = folders.mqtt_elements(properties)
    user = folders.user_folder(properties)
    message = command_message(
        command,
        payload_format=MQFMT_STRING if properties.payload_format_indicator else MQFMT_NONE,
        folders=(
            f"<{QOS_FOLDER}><qos>{qos}</qos>{marked}{carried}</{QOS_FOLDER}>",
            *([user] if user else []),
        ),
        request=False,
        persistence=MQPER_PERSISTENT if qos else MQPER_NOT_PERSISTENT,
        expiry=folders.expiry(properties),
    )
    headers = rfh2.decode(message.body, message.encoding, message.format)
    return message, headers, replace(command, folder=rfh2.find(headers.folders, psc.FOLDER)[0][0])


# Publications without folder-borne properties (at most a Message Expiry Interval) share them.
_template = lru_cache(maxsize=TEMPLATES)(_headers)


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
    sub_identity: str | None = None,
) -> Typed:
    """RegSub (or DeregSub) of ``filters`` for the session queue ``queue``, with its headers and
    command (a SUBSCRIBE's path: routed at once)."""
    kind = psc.DeregSub if remove else psc.RegSub
    return _typed(kind(filters, q_name=queue, options=options, sub_identity=sub_identity), user_id)


def typed_update(topic_filter: str, queue: str, user_id: str) -> Typed:
    """ReqUpdate of ``topic_filter`` for the session queue ``queue``: the retained publications
    sent again for a filter the session had already, which its SUBSCRIBE replaces
    ([MQTT-3.8.4-3] at 3.1.1; at 5.0 with Retain Handling 0, [MQTT-3.8.4-4])."""
    return _typed(psc.ReqUpdate(topic_filter, q_name=queue, options=SUBSCRIPTION_OPTIONS), user_id)


def _typed(command: psc.RegSub | psc.DeregSub | psc.ReqUpdate, user_id: str) -> Typed:
    message = _stamped(command_message(command, request=False, user_id=user_id))
    folder = psc.render(command)
    header = rfh2.RFH2Header(folders=(folder,))  # as command_message builds it
    return Typed(message, rfh2.RFH2Body((header,), b""), replace(command, folder=folder))


def subscription_options(new_only: bool) -> RegOpt:
    """A SUBSCRIBE's RegSub options: NewPubsOnly where no retained publication is to be sent."""
    return SUBSCRIPTION_OPTIONS | RegOpt.NewPubsOnly if new_only else SUBSCRIPTION_OPTIONS


def share_membership(
    topic_filter: str, queue: str, client_id: str, user_id: str, *, leave: bool = False
) -> Typed:
    """The RegSub by which ``client_id`` joins (DeregSub: leaves) the shared subscription of
    ``topic_filter`` whose queue is ``queue``, as a member of its identity set: MQ's shared
    subscription, which MQRFH2 applications join with JoinShared and a SubIdentity of their
    own. Members of any principal share it (VariableUserId); the last to leave ends it. No
    retained publication is sent to a shared subscription (MQTT 5.0 section 4.8.2)."""
    options = SHARE_LEAVE_OPTIONS if leave else SHARE_OPTIONS
    return typed_registration(
        (topic_filter,), queue, user_id, remove=leave, options=options, sub_identity=client_id
    )


def discard(queue: str, admin: str) -> Typed:
    """The DeregSub that removes every subscription of a session's queue."""
    return typed_registration((), queue, admin, remove=True, options=DISCARD_OPTIONS)


def origin(message: Message) -> str:
    """The bridge a delivered publication came over ("" if none)."""
    found = _ORIGIN.search(message.body)
    return found.group(1).decode() if found else ""


def published_retained(message: Message) -> bool:
    """Whether the MQTT client that published a delivered publication set RETAIN (for a
    subscription with Retain As Published, whose live deliveries keep it)."""
    return _RETAINED.search(message.body) is not None


def delivery(message: Message) -> Publish:
    """A publication from a session queue as the PUBLISH to send (QoS as published, RETAIN
    from IsRetainedPub, the properties its folders and MQMD carry; the listener lowers the QoS
    to the one granted and numbers it)."""
    decode = _decoded if len(message.body) <= CACHED_BODY else _decode
    return decode(message.body, message.encoding, message.format, message.persistence, message.expiry)


def _decode(body: bytes, encoding: int, format: str, persistence: int, expiry: int) -> Publish:
    received = decode_publication(
        Message(body=body, encoding=encoding, format=format, persistence=persistence)
    )
    qos = 2 if persistence == MQPER_PERSISTENT else 0
    for folder in received.folders:
        if folder.startswith(f"<{QOS_FOLDER}>") and (found := _QOS.search(folder)):
            qos = int(found.group(1))
    text = received.payload_format == MQFMT_STRING
    properties = folders.properties(received.folders, text, expiry)
    return Publish(received.topic, received.body, qos=qos, retain=received.retained, properties=properties)


# A publication's subscribers get copies with one body: small ones are decoded once.
_decoded = lru_cache(maxsize=256)(_decode)


# Why the broker refused a publication or a subscription (an MQ reason), as MQTT 5.0 says it.
REASON_CODES: dict[int, ReasonCode] = {
    Reason.MQRCCF_NOT_AUTHORIZED: ReasonCode.NOT_AUTHORIZED,  # the ACL's refusal
    Reason.MQRC_NOT_AUTHORIZED: ReasonCode.NOT_AUTHORIZED,  # a client's $ topic
}


def reason_code(reason: int, topic_error: ReasonCode = ReasonCode.TOPIC_NAME_INVALID) -> int:
    """The MQTT 5.0 reason code for an MQ ``reason`` (0: none): a topic MQ cannot take is
    ``topic_error``, anything else the broker's own Implementation specific error."""
    if not reason:
        return ReasonCode.SUCCESS
    if reason == Reason.MQRCCF_TOPIC_ERROR:
        return topic_error
    return REASON_CODES.get(reason, ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR)


def suback_code(code: int, reason: int, level: int) -> int:
    """A SUBACK's code for one filter: the QoS granted, or the failure, which an MQTT 5.0
    client is told the reason for."""
    if code != SUBACK_FAILURE or level != MQTT_5:
        return code
    return reason_code(reason, ReasonCode.TOPIC_FILTER_INVALID) or ReasonCode.UNSPECIFIED_ERROR
