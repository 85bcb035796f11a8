"""broker.core.outgoing: the messages the broker sends for one publication, to subscribers (reference
2.6, 3.3) and to neighbouring brokers (section 5)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.outgoing import Publication, broker_correl_id
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.protocol import brokerpath, psc, rfh2
from broker.protocol.options import PubOpt, RegOpt
from queues.message import (
    MQAT_BROKER,
    MQEI_UNLIMITED,
    MQENC_NATIVE,
    MQENC_NORMAL,
    MQFMT_RF_HEADER_2,
    MQFMT_STRING,
    MQMT_DATAGRAM,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPER_PERSISTENT,
    MQRO_PAN,
    Message,
)
from tests.broker.core.builders import ANY_ID, NOW, QMGR, correl, message, mqmd, msg_id, psc_text

MCD = "<mcd><Msd>jms_text</Msd></mcd>"
USR = "<usr><Colour>red</Colour></usr>"
JMS = "<jms><Dst>topic://Sport</Dst></jms>"
PUBLISH = psc_text(
    "Publish", "Sport/Soccer", "Sport/Rugby", opts=["RetainPub"], PubTime="20260101120000", SeqNum="42"
)
PAYLOAD = b"Chelsea 4 Sutton 1"
SUBSCRIBER = Identity(QMGR, "SUB.Q")


def publication(
    folder: str = PUBLISH,
    extra: tuple[str, ...] = (MCD, USR),
    *,
    sub_point: str = "",
    path: brokerpath.BrokerPath | None = None,
    body: bytes | None = None,
    **md: object,
) -> Publication:
    md.setdefault("msg_id", msg_id(9))
    md.setdefault("report", MQRO_PAN)
    md.setdefault("expiry", 5000)
    m = message(folder, extra=extra, payload=PAYLOAD, body=body, **md)
    headers = rfh2.decode(m.body, m.encoding, m.format)
    command = psc.parse(folder)
    assert isinstance(command, psc.Publish)
    return Publication(m, headers, command, sub_point, QMGR, NOW, path)


def subscription(options: int = 0, identity: Identity = SUBSCRIBER, user: str = "bob") -> Subscription:
    return Subscription(SubscriptionKey(identity, "", "Sport/#"), user, options, created_at=NOW)


def decoded(m: Message) -> rfh2.RFH2Body:
    return rfh2.decode(m.body, m.encoding, m.format)


# --- broker_correl_id ---------------------------------------------------------------------------------


def test_the_broker_correl_id_is_fixed_non_zero_and_names_the_queue_manager() -> None:
    assert broker_correl_id("QM1") == b"PSCPUB  QM1" + b"\x00" * 13
    assert broker_correl_id("A.VERY.LONG.QUEUE.MANAGER.NAME") == b"PSCPUB  A.VERY.LONG.QUEU"
    assert len(broker_correl_id("")) == 24 and broker_correl_id("") != b"\x00" * 24


# --- to_subscriber --------------------------------------------------------------------------------------


def test_a_subscriber_gets_a_datagram_with_the_brokers_descriptor() -> None:
    pub = publication(priority=6, persistence=MQPER_PERSISTENT, user_id="alice", reply_to_q="PUB.REPLY")
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=4321)
    assert mqmd(m) == {
        "msg_id": ANY_ID,
        "correl_id": broker_correl_id(QMGR),
        "format": MQFMT_RF_HEADER_2,
        "encoding": MQENC_NATIVE,
        "ccsid": 1208,
        "msg_type": MQMT_DATAGRAM,
        "report": 0,
        "reply_to_q": "",
        "reply_to_qmgr": QMGR,
        "user_id": "bob",
        "persistence": MQPER_PERSISTENT,
        "priority": 6,
        "expiry": 4321,
        "put_appl_type": MQAT_BROKER,
        "put_appl_name": QMGR,
        "put_date": "20260101",
        "put_time": "00000000",
        "backout_count": 0,
    }


def test_the_subscriber_body_replaces_the_psc_and_keeps_the_other_folders_and_payload() -> None:
    pub = publication(extra=(MCD, USR, JMS))
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=1)
    body = decoded(m)
    assert body.folders == (
        "<psc><Command>Publish</Command><Topic>Sport/Soccer</Topic>"
        "<PubTime>20260101120000</PubTime><SeqNum>42</SeqNum></psc>",
        MCD,
        USR,
        JMS,
    )
    assert body.payload == PAYLOAD
    assert body.payload_format == MQFMT_STRING


def test_pscr_and_brokerpath_folders_never_reach_a_subscriber() -> None:
    path = brokerpath.render(brokerpath.BrokerPath(msg_id(1), ("QM2",)))
    pub = publication(extra=("<pscr><Completion>ok</Completion></pscr>", MCD, path, USR))
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=1)
    assert decoded(m).folders[1:] == (MCD, USR)


def test_the_psc_is_replaced_in_whichever_chained_header_holds_it() -> None:
    first = rfh2.RFH2Header(format=MQFMT_RF_HEADER_2, folders=(MCD,))
    second = rfh2.RFH2Header(encoding=MQENC_NORMAL, format=MQFMT_STRING, folders=(USR, PUBLISH, JMS))
    body = rfh2.encode(rfh2.RFH2Body((first, second), PAYLOAD), MQENC_NATIVE)
    pub = publication(body=body)
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Rugby",), retained=False, expiry=1)
    delivered = decoded(m)
    expected_psc = (
        "<psc><Command>Publish</Command><Topic>Sport/Rugby</Topic>"
        "<PubTime>20260101120000</PubTime><SeqNum>42</SeqNum></psc>"
    )
    assert delivered == rfh2.RFH2Body(
        (first, replace(second, folders=(USR, expected_psc, JMS))),
        PAYLOAD,
    )


def test_the_subscription_point_is_named_when_not_the_default() -> None:
    pub = publication(psc_text("Publish", "Price/Tea"), (), sub_point="Pounds")
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Price/Tea",), retained=False, expiry=1)
    assert decoded(m).folders == (
        "<psc><Command>Publish</Command><Topic>Price/Tea</Topic><SubPoint>Pounds</SubPoint></psc>",
    )


def test_a_subscriber_matching_several_topics_gets_them_all_in_one_psc() -> None:
    pub = publication(psc_text("Publish", "a", "b"), ())
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("a", "b"), retained=False, expiry=1)
    assert decoded(m).folders == ("<psc><Command>Publish</Command><Topic>a</Topic><Topic>b</Topic></psc>",)


@pytest.mark.parametrize(
    ("options", "retained", "flagged"),
    [
        (RegOpt.InformIfRet, True, True),
        (RegOpt.InformIfRet, False, False),
        (0, True, False),
        (RegOpt.PersAsPub, True, False),
    ],
)
def test_is_retained_pub_only_for_retained_copies_to_inform_if_ret_subscribers(
    options: int, retained: bool, flagged: bool
) -> None:
    pub = publication(psc_text("Publish", "a", opts=["RetainPub"]), ())
    m = pub.to_subscriber(subscription(int(options)), SUBSCRIBER, ("a",), retained=retained, expiry=1)
    command = psc.parse(decoded(m).folders[0])
    assert isinstance(command, psc.Publish)
    assert command.options == (PubOpt.IsRetainedPub if flagged else PubOpt(0))


@pytest.mark.parametrize(
    ("options", "publisher", "expected"),
    [
        (0, MQPER_PERSISTENT, MQPER_PERSISTENT),
        (0, MQPER_NOT_PERSISTENT, MQPER_NOT_PERSISTENT),
        (RegOpt.PersAsPub, MQPER_NOT_PERSISTENT, MQPER_NOT_PERSISTENT),
        (RegOpt.PersAsPub, MQPER_PERSISTENT, MQPER_PERSISTENT),
        (RegOpt.NonPers, MQPER_PERSISTENT, MQPER_NOT_PERSISTENT),
        (RegOpt.Pers, MQPER_NOT_PERSISTENT, MQPER_PERSISTENT),
        (RegOpt.PersAsQueue, MQPER_PERSISTENT, MQPER_PERSISTENCE_AS_Q_DEF),
        (RegOpt.PersAsQueue, MQPER_NOT_PERSISTENT, MQPER_PERSISTENCE_AS_Q_DEF),
    ],
)
def test_persistence_follows_the_subscribers_option(options: int, publisher: int, expected: int) -> None:
    pub = publication(persistence=publisher)
    m = pub.to_subscriber(subscription(int(options)), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=1)
    assert m.persistence == expected


def test_a_correl_as_id_subscriber_gets_its_own_correl_id() -> None:
    identity = Identity(QMGR, "SUB.Q", correl("SUBSCRIBER-1"))
    pub = publication()
    m = pub.to_subscriber(
        subscription(RegOpt.CorrelAsId, identity), identity, ("Sport/Soccer",), retained=False, expiry=1
    )
    assert m.correl_id == correl("SUBSCRIBER-1")


def test_the_user_id_is_the_subscribers_cut_to_twelve_characters() -> None:
    pub = publication()
    m = pub.to_subscriber(
        subscription(user="averyveryverylonguser"), SUBSCRIBER, ("a",), retained=False, expiry=1
    )
    assert m.user_id == "averyveryver"


def test_a_big_endian_publication_is_delivered_big_endian() -> None:
    pub = publication(encoding=MQENC_NORMAL)
    m = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=1)
    assert m.encoding == MQENC_NORMAL
    assert m.body[4:8] == b"\x00\x00\x00\x02"
    assert decoded(m).payload == PAYLOAD


def test_bodies_are_encoded_once_per_variant() -> None:
    pub = publication()
    one = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Soccer",), retained=False, expiry=1)
    two = pub.to_subscriber(
        subscription(), Identity(QMGR, "OTHER.Q"), ("Sport/Soccer",), retained=False, expiry=1
    )
    three = pub.to_subscriber(subscription(), SUBSCRIBER, ("Sport/Rugby",), retained=False, expiry=1)
    assert one.body is two.body
    assert three.body != one.body


def test_delivery_msg_ids_are_deterministic_and_distinct_per_subscriber_and_cause() -> None:
    def msg_id_for(identity: Identity, cause: bytes = b"", pub: Publication | None = None) -> bytes:
        pub = pub or publication()
        return pub.to_subscriber(
            subscription(), identity, ("a",), retained=False, expiry=1, cause=cause
        ).msg_id

    base = msg_id_for(SUBSCRIBER)
    assert base == msg_id_for(SUBSCRIBER)
    others = {
        msg_id_for(Identity(QMGR, "OTHER.Q")),
        msg_id_for(Identity("QM2", "SUB.Q")),
        msg_id_for(Identity(QMGR, "SUB.Q", correl("X"))),
        msg_id_for(SUBSCRIBER, cause=msg_id(3)),
        msg_id_for(SUBSCRIBER, pub=publication(msg_id=msg_id(10))),
        msg_id_for(SUBSCRIBER, pub=publication(put_time="00000001")),
    }
    assert len(others) == 6 and base not in others


def test_a_forwarded_publication_keeps_its_origin_msg_id_for_delivery_ids() -> None:
    path = brokerpath.BrokerPath(msg_id(1), ("QM2",))
    here = publication(msg_id=msg_id(1))
    there = publication(msg_id=msg_id(2), path=path)
    assert there.origin_msg_id == msg_id(1)
    a = here.to_subscriber(subscription(), SUBSCRIBER, ("a",), retained=False, expiry=1)
    b = there.to_subscriber(subscription(), SUBSCRIBER, ("a",), retained=False, expiry=1)
    assert a.msg_id == b.msg_id


# --- to_neighbour ----------------------------------------------------------------------------------------


def test_a_forwarded_publication_is_republished_at_the_neighbour_with_its_path() -> None:
    folder = psc_text(
        "Publish", "Sport/Soccer", opts=["RetainPub", "OtherSubsOnly", "CorrelAsId"], PubTime="t", SeqNum="7"
    )
    pub = publication(
        folder, (MCD, USR), sub_point="Pounds", correl_id=correl("PUB"), persistence=MQPER_NOT_PERSISTENT
    )
    publisher = Identity(QMGR, "PUB.Q", correl("PUB"))
    m = pub.to_neighbour(
        "QM2", ("Sport/Soccer",), publisher, retained=False, expiry=777, user_id="brokeruser12345"
    )
    assert decoded(m).folders == (
        "<psc><Command>Publish</Command><PubOpt>CorrelAsId</PubOpt><PubOpt>RetainPub</PubOpt>"
        "<PubOpt>OtherSubsOnly</PubOpt><Topic>Sport/Soccer</Topic><SubPoint>Pounds</SubPoint>"
        f"<QMgrName>QM1</QMgrName><QName>PUB.Q</QName><PubTime>t</PubTime><SeqNum>7</SeqNum>"
        f"<CorrelId>{correl('PUB').hex().upper()}</CorrelId></psc>",
        f"<brokerpath><OrigMsgId>{msg_id(9).hex()}</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",
        MCD,
        USR,
    )
    assert decoded(m).payload == PAYLOAD
    assert mqmd(m) == {
        "msg_id": ANY_ID,
        "correl_id": correl("PUB"),
        "format": MQFMT_RF_HEADER_2,
        "encoding": MQENC_NATIVE,
        "ccsid": 1208,
        "msg_type": MQMT_DATAGRAM,
        "report": 0,
        "reply_to_q": "",
        "reply_to_qmgr": QMGR,
        "user_id": "brokeruser12",
        "persistence": MQPER_NOT_PERSISTENT,
        "priority": 4,
        "expiry": 777,
        "put_appl_type": MQAT_BROKER,
        "put_appl_name": QMGR,
        "put_date": "20260101",
        "put_time": "00000000",
        "backout_count": 0,
    }


def test_a_retained_copy_to_a_neighbour_is_flagged_and_retained_there() -> None:
    pub = publication(psc_text("Publish", "a", opts=["RetainPub"]), ())
    m = pub.to_neighbour(
        "QM2", ("a",), Identity(QMGR, ""), retained=True, expiry=MQEI_UNLIMITED, user_id="mqm"
    )
    assert decoded(m).folders[0] == (
        "<psc><Command>Publish</Command><PubOpt>RetainPub</PubOpt><PubOpt>IsRetainedPub</PubOpt>"
        "<Topic>a</Topic><QMgrName>QM1</QMgrName></psc>"
    )


def test_a_publication_passed_on_extends_the_path_it_came_with() -> None:
    path = brokerpath.BrokerPath(msg_id(1), ("QM3", "QM2"))
    pub = publication(psc_text("Publish", "a", QMgrName="QM3", QName="P"), (), path=path, msg_id=msg_id(2))
    m = pub.to_neighbour("QM4", ("a",), Identity("QM3", "P"), retained=False, expiry=1, user_id="mqm")
    assert brokerpath.parse(decoded(m).folders[1]) == brokerpath.BrokerPath(msg_id(1), ("QM3", "QM2", "QM1"))
    # One id per (origin, neighbour): whichever way it came, QM4 can recognise a resend.
    at_origin = publication(psc_text("Publish", "a", QMgrName="QM3", QName="P"), (), msg_id=msg_id(1))
    direct = at_origin.to_neighbour(
        "QM4", ("a",), Identity("QM3", "P"), retained=False, expiry=1, user_id="mqm"
    )
    elsewhere = pub.to_neighbour("QM5", ("a",), Identity("QM3", "P"), retained=False, expiry=1, user_id="mqm")
    assert m.msg_id == direct.msg_id != elsewhere.msg_id
