"""broker.core.engine: where a message is routed from, the poison path, wrong queues, neighbours'
responses, the path check on messages from the network, and housekeeping."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.core import engine
from broker.core.effects import PROXY, DeadLetter, Outcome, Put, RemoveSubscription
from broker.core.routing import CONTROL as CONTROL_KIND
from broker.core.routing import INTER_BROKER, Source
from broker.core.routing import STREAM as STREAM_KIND
from broker.core.state import BrokerConfig, BrokerState, QueueInfo
from broker.protocol import brokerpath, pscr
from queues.message import (
    MQENC_NORMAL,
    MQFMT_RF_HEADER,
    MQFMT_STRING,
    MQMT_DATAGRAM,
    MQMT_REPLY,
    MQMT_REPORT,
    MQRO_NAN,
    MQRO_PAN,
    Message,
    derive,
)
from queues.reasons import Reason
from tests.broker.core.builders import (
    CONTROL,
    INTER,
    NOW,
    QMGR,
    REPLY_Q,
    STREAM,
    Broker,
    dead_letters,
    decode_put,
    deliveries,
    message,
    msg_id,
    psc_text,
    pscr_error,
    puts,
    reply,
    reply_folders,
)

PUBLISH = psc_text("Publish", "Sport/Soccer/Event/MatchStarted")
REGSUB = psc_text("RegSub", "Sport/#", QName="SUB.Q")


def broker(
    *,
    queues: Sequence[str | QueueInfo] = (REPLY_Q, "SUB.Q"),
    neighbours: Sequence[str] = (),
    streams: dict[str, str] | None = None,
) -> Broker:
    return Broker(queues=queues, neighbours=neighbours, streams=streams)


def assert_poison(
    outcome: Outcome, sent: Message, queue: str, reason: int, folders: tuple[str, ...] | None
) -> None:
    """Dead-lettered with ``reason``; answered with exactly ``folders`` (None: not answered);
    nothing else happens."""
    assert dead_letters(outcome) == [DeadLetter(sent, queue, reason)]
    assert (outcome.completion, outcome.reason) == ("error", reason)
    if folders is None:
        assert reply(outcome) is None
        assert len(outcome.effects) == 1
    else:
        assert reply_folders(outcome) == folders
        assert len(outcome.effects) == 2


# --- source_of ------------------------------------------------------------------------------------


def test_source_of_names_what_each_input_queue_is_for() -> None:
    config = BrokerConfig(QMGR, streams={STREAM: "", "PRICES.POUNDS": "Pounds"})
    state = BrokerState(config)
    assert engine.source_of(state, CONTROL) == Source(CONTROL, CONTROL_KIND)
    assert engine.source_of(state, INTER) == Source(INTER, INTER_BROKER)
    assert engine.source_of(state, STREAM) == Source(STREAM, STREAM_KIND, "")
    assert engine.source_of(state, "PRICES.POUNDS") == Source("PRICES.POUNDS", STREAM_KIND, "Pounds")
    assert engine.source_of(state, "OTHER.Q") == Source("OTHER.Q", STREAM_KIND, "")


def test_a_stream_publishes_on_its_subscription_point() -> None:
    b = broker(streams={STREAM: "", "PRICES.POUNDS": "Pounds"})
    b.send(psc_text("RegSub", "Price/#", QName="SUB.Q", SubPoint="Pounds"))
    b.send(psc_text("RegSub", "Price/#", QName="SUB.Q"))
    outcome = b.send(psc_text("Publish", "Price/Tea"), "PRICES.POUNDS")
    (sent,) = deliveries(outcome)
    assert sent.folders == (
        "<psc><Command>Publish</Command><Topic>Price/Tea</Topic><SubPoint>Pounds</SubPoint></psc>",
    )


# --- the poison path --------------------------------------------------------------------------------


@pytest.mark.parametrize("msg_type", [MQMT_REPLY, MQMT_REPORT, 0, 3])
def test_a_message_that_is_neither_request_nor_datagram_is_dead_lettered_unanswered(msg_type: int) -> None:
    b = broker()
    m = message(PUBLISH, msg_type=msg_type)
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRC_MSG_TYPE_ERROR, None)
    assert outcome.command is None


def test_mqmd_format_not_mqhrf2_is_3023() -> None:
    b = broker()
    m = message(PUBLISH, format=MQFMT_STRING)
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome, m, STREAM, Reason.MQRCCF_MD_FORMAT_ERROR, pscr_error(3023, None, detail=outcome.detail)
    )
    assert outcome.command is None


def test_an_rfh_version_1_message_is_2421() -> None:
    b = broker()
    m = message(PUBLISH, format=MQFMT_RF_HEADER, body=b"RFH \x00\x00\x00\x01" + b"\x00" * 24)
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome, m, STREAM, Reason.MQRC_RFH_FORMAT_ERROR, pscr_error(2421, None, detail=outcome.detail)
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"garbage, not an MQRFH2 at all, but long enough to be read as one",
        b"RFH \x00\x00\x00\x02\x00\x00\x00\x30",  # truncated fixed part
    ],
)
def test_garbage_rfh2_is_2334(body: bytes) -> None:
    b = broker()
    m = message(PUBLISH, body=body)
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRC_RFH_ERROR, pscr_error(2334, None, detail=outcome.detail))


def test_rfh2_read_in_the_wrong_byte_order_is_2334() -> None:
    b = broker()
    little_endian = message(PUBLISH)
    m = derive(little_endian, encoding=MQENC_NORMAL)
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRC_RFH_ERROR, pscr_error(2334, None, detail=outcome.detail))


def test_a_folder_that_is_not_an_element_is_2334() -> None:
    b = broker()
    m = message("just text")
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRC_RFH_ERROR, pscr_error(2334, None, detail=outcome.detail))


def test_no_psc_folder_is_2339() -> None:
    b = broker()
    m = message("<mcd><Msd>none</Msd></mcd>", extra=["<usr><x>1</x></usr>"])
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome,
        m,
        STREAM,
        Reason.MQRC_RFH_PARM_MISSING,
        pscr_error(2339, None, parameter="psc", detail=outcome.detail),
    )


def test_two_psc_folders_are_2338() -> None:
    b = broker()
    m = message(PUBLISH, extra=[psc_text("Publish", "Other")])
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome,
        m,
        STREAM,
        Reason.MQRC_RFH_DUPLICATE_PARM,
        pscr_error(2338, None, parameter="psc", detail=outcome.detail),
    )


def test_an_unknown_command_is_2336_and_echoes_the_psc() -> None:
    b = broker()
    folder = "<psc><Command>RegPub</Command><Topic>Sport</Topic></psc>"
    m = message(folder)
    outcome = b.route(m, CONTROL)
    assert_poison(
        outcome,
        m,
        CONTROL,
        Reason.MQRC_RFH_COMMAND_ERROR,
        pscr_error(2336, folder, parameter="Command", detail=outcome.detail),
    )
    assert outcome.command is None


def test_a_bad_parameter_is_2337_and_echoes_the_psc() -> None:
    b = broker()
    folder = "<psc><Command>Publish</Command><Topic>Sport</Topic><StreamName>S</StreamName></psc>"
    m = message(folder)
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome,
        m,
        STREAM,
        Reason.MQRC_RFH_PARM_ERROR,
        pscr_error(2337, folder, parameter="StreamName", detail=outcome.detail),
    )


LAUGHS = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))


@pytest.mark.parametrize(
    "folder",
    [
        # The classic attack: an XML declaration and an internal DTD subset before the root.
        f'<?xml version="1.0"?><!DOCTYPE psc [<!ENTITY l0 "lol">{LAUGHS}]>'
        "<psc><Command>Publish</Command><Topic>Sport/&l9;</Topic></psc>",
        f'<!DOCTYPE psc [<!ENTITY l0 "lol">{LAUGHS}]>'
        "<psc><Command>Publish</Command><Topic>&l9;</Topic></psc>",
        f'<psc><!DOCTYPE psc [<!ENTITY l0 "lol">{LAUGHS}]>'
        "<Command>Publish</Command><Topic>&l9;</Topic></psc>",
        "<psc><Command>Publish</Command><Topic>Sport/&l9;</Topic></psc>",
    ],
)
def test_a_billion_laughs_folder_is_2337_and_never_expanded(folder: str) -> None:
    b = broker()
    b.send(REGSUB)
    m = message(folder)
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome, m, STREAM, Reason.MQRC_RFH_PARM_ERROR, pscr_error(2337, folder, detail=outcome.detail)
    )
    assert "lollol" not in outcome.detail


def test_poison_with_a_datagram_asking_for_nan_is_answered_and_dead_lettered() -> None:
    b = broker()
    m = message(PUBLISH, format=MQFMT_STRING, msg_type=MQMT_DATAGRAM, report=MQRO_NAN)
    outcome = b.route(m, STREAM)
    assert_poison(
        outcome, m, STREAM, Reason.MQRCCF_MD_FORMAT_ERROR, pscr_error(3023, None, detail=outcome.detail)
    )


@pytest.mark.parametrize("report", [0, MQRO_PAN])
def test_poison_in_a_datagram_without_nan_is_dead_lettered_unanswered(report: int) -> None:
    b = broker()
    m = message(PUBLISH, format=MQFMT_STRING, msg_type=MQMT_DATAGRAM, report=report)
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRCCF_MD_FORMAT_ERROR, None)


def test_poison_without_a_reply_queue_is_dead_lettered_unanswered() -> None:
    b = broker()
    m = message(PUBLISH, format=MQFMT_STRING, reply_to_q="   ")
    outcome = b.route(m, STREAM)
    assert_poison(outcome, m, STREAM, Reason.MQRCCF_MD_FORMAT_ERROR, None)


# --- the wrong queue ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "queue"),
    [
        (PUBLISH, CONTROL),
        (psc_text("DeletePub", "Sport/#"), CONTROL),
        (REGSUB, STREAM),
        (psc_text("DeregSub", "Sport/#", QName="SUB.Q"), STREAM),
        (psc_text("ReqUpdate", "Sport/#", QName="SUB.Q"), STREAM),
    ],
)
def test_a_command_on_the_wrong_queue_is_3079_and_not_dead_lettered(folder: str, queue: str) -> None:
    b = broker()
    outcome = b.send(folder, queue)
    assert len(outcome.effects) == 1  # the reply, and no dead letter
    assert reply_folders(outcome) == pscr_error(3079, folder, parameter="Command", detail=outcome.detail)
    assert (outcome.completion, outcome.reason) == ("error", 3079)
    assert len(b.state) == 0


def test_regsub_on_a_stream_registers_nothing() -> None:
    b = broker()
    b.send(REGSUB, STREAM)
    outcome = b.send(PUBLISH)
    assert deliveries(outcome) == []


# --- responses from neighbours ---------------------------------------------------------------------


def neighbour_reply(folders: tuple[str, ...]) -> Message:
    return message(folders[0], extra=folders[1:], msg_type=MQMT_REPLY, reply_to_q="", reply_to_qmgr="QM2")


def test_a_neighbours_ok_response_is_logged_not_dead_lettered() -> None:
    b = broker(neighbours=["QM2"])
    outcome = b.route(neighbour_reply(("<pscr><Completion>ok</Completion></pscr>",)), INTER)
    assert outcome == Outcome(
        effects=(),
        command="Response",
        completion="ok",
        reason=0,
        refused_topics=(),
        detail="response from QM2 to a proxy command",
    )


def test_a_neighbours_warning_lists_its_topics() -> None:
    b = broker(neighbours=["QM2"])
    folders = pscr.to_folders(
        pscr.warning([pscr.ResponseItem(3081, "a"), pscr.ResponseItem(3081, "b")], REGSUB)
    )
    outcome = b.route(neighbour_reply(folders), INTER)
    assert (outcome.effects, outcome.command, outcome.completion) == ((), "Response", "warning")
    assert (outcome.reason, outcome.refused_topics) == (3081, ("a", "b"))


def test_an_unreadable_neighbour_response_is_dead_lettered_not_raised() -> None:
    b = broker(neighbours=["QM2"])
    m = neighbour_reply(("<pscr><Completion>maybe</Completion></pscr>",))
    outcome = b.route(m, INTER)
    assert outcome.effects == (DeadLetter(m, INTER, Reason.MQRC_RFH_PARM_ERROR),)
    assert (outcome.command, outcome.completion, outcome.reason) == (None, "error", 2337)


def test_a_reply_on_a_stream_is_a_msg_type_error() -> None:
    b = broker()
    m = neighbour_reply(("<pscr><Completion>ok</Completion></pscr>",))
    outcome = b.route(m, STREAM)
    assert outcome.effects == (DeadLetter(m, STREAM, Reason.MQRC_MSG_TYPE_ERROR),)


# --- messages from the network: the <brokerpath> check -----------------------------------------------


def network_publish(path: str | None) -> Message:
    extra = [path] if path is not None else []
    return message(
        psc_text("Publish", "Sport/Tennis", QMgrName="QM2", QName="PUB.Q"),
        extra=extra,
        msg_type=MQMT_DATAGRAM,
        reply_to_q="",
        reply_to_qmgr="QM2",
        user_id="mqm",
    )


def path(*hops: str) -> str:
    return brokerpath.render(brokerpath.BrokerPath(msg_id(77), hops))


def subscribed(neighbours: list[str]) -> Broker:
    b = broker(neighbours=neighbours)
    b.send(REGSUB)
    return b


def test_a_publication_from_a_neighbour_is_delivered() -> None:
    b = subscribed(["QM2"])
    outcome = b.route(network_publish(path("QM2")), INTER)
    assert [(s.queue, s.psc_folder) for s in deliveries(outcome)] == [
        ("SUB.Q", "<psc><Command>Publish</Command><Topic>Sport/Tennis</Topic></psc>")
    ]


def test_a_publication_from_the_network_without_a_path_is_dead_lettered() -> None:
    b = subscribed(["QM2"])
    m = network_publish(None)
    outcome = b.route(m, INTER)
    assert outcome.effects == (DeadLetter(m, INTER, Reason.MQRC_RFH_PARM_MISSING),)


def test_a_malformed_path_is_dead_lettered() -> None:
    b = subscribed(["QM2"])
    m = network_publish("<brokerpath><OrigMsgId>zz</OrigMsgId><QMgr>QM2</QMgr></brokerpath>")
    outcome = b.route(m, INTER)
    assert outcome.effects == (DeadLetter(m, INTER, Reason.MQRC_RFH_PARM_ERROR),)


def test_a_looping_publication_is_refused_with_2541_and_delivered_nowhere() -> None:
    b = subscribed(["QM2"])
    outcome = b.route(network_publish(path(QMGR, "QM2")), INTER)
    assert outcome.effects == ()
    assert (outcome.command, outcome.completion, outcome.reason) == ("Publish", "error", 2541)
    assert outcome.detail == "looping publication: QM1 -> QM2 -> QM1"


def test_a_publication_whose_last_hop_is_not_a_neighbour_is_3085() -> None:
    b = subscribed(["QM2"])
    outcome = b.route(network_publish(path("QM2", "QM9")), INTER)
    assert outcome.effects == ()
    assert (outcome.completion, outcome.reason, outcome.detail) == (
        "error",
        3085,
        "QM9 is not a neighbouring broker",
    )


def test_a_looping_delete_asking_for_nan_is_answered_on_the_senders_inter_broker_queue() -> None:
    b = broker(neighbours=["QM2"])
    folder = psc_text("DeletePub", "Sport/#")
    m = message(
        folder,
        extra=[path("QM2", QMGR, "QM2")],
        msg_type=MQMT_DATAGRAM,
        report=MQRO_NAN,
        reply_to_q=INTER,
        reply_to_qmgr="QM2",
        user_id="mqm",
    )
    outcome = b.route(m, INTER)
    assert dead_letters(outcome) == []
    (answer,) = puts(outcome)
    assert (answer.queue, answer.q_mgr) == (INTER, "QM2")
    assert answer.folders == pscr_error(2541, folder, detail=outcome.detail)


# --- housekeeping -------------------------------------------------------------------------------------


def test_housekeeping_removes_expired_subscriptions() -> None:
    b = broker()
    b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"), expiry=600)  # one minute
    b.send(psc_text("RegSub", "News/#", QName="SUB.Q"))
    assert engine.housekeeping(b.state, NOW + 59_999) == []
    (sub,) = [s for s in b.state.subscriptions() if s.key.topic == "Sport/#"]
    assert engine.housekeeping(b.state, NOW + 60_000) == [RemoveSubscription(sub.key)]


def test_housekeeping_removes_subscriptions_whose_temporary_queue_is_gone() -> None:
    queues: dict[str, QueueInfo] = {
        "AMQ.TEMP.1": QueueInfo("AMQ.TEMP.1", temporary=True),
        "SUB.Q": QueueInfo("SUB.Q"),
        REPLY_Q: QueueInfo(REPLY_Q),
    }
    b = broker(queues=list(queues.values()))
    b.send(psc_text("RegSub", "Sport/#", QName="AMQ.TEMP.1"))
    b.send(REGSUB)
    (temp,) = [s for s in b.state.subscriptions() if s.temporary]
    assert temp.identity.queue == "AMQ.TEMP.1"
    assert engine.housekeeping(b.state, NOW) == []
    del queues["AMQ.TEMP.1"]
    del queues["SUB.Q"]  # a permanent queue going away is not housekeeping's business
    b.state.queues = queues
    assert engine.housekeeping(b.state, NOW) == [RemoveSubscription(temp.key)]


def test_housekeeping_deregisters_the_proxy_of_the_last_global_subscription() -> None:
    b = broker(neighbours=["QM2"])
    b.send(REGSUB, expiry=10)
    (sub,) = b.state.subscriptions()
    removal, withdrawal = engine.housekeeping(b.state, NOW + 1000)
    assert removal == RemoveSubscription(sub.key)
    assert isinstance(withdrawal, Put)
    proxy = decode_put(withdrawal)
    assert (proxy.queue, proxy.q_mgr, proxy.kind) == (CONTROL, "QM2", PROXY)
    assert proxy.folders == (
        "<psc><Command>DeregSub</Command><Topic>Sport/#</Topic><QMgrName>QM1</QMgrName>"
        f"<QName>{INTER}</QName></psc>",
    )
