"""Three broker instances in a tree, B - A - C, each its own queue manager with its own
database and API port, on SQLite files and on PostgreSQL databases (issue 6's scenarios).

The network is started once per dialect for the module; each test uses its own topics and
queues, so tests do not see each other's traffic.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from broker.admin import neighbours
from broker.core.system import INTER_BROKER_QUEUE
from broker.network import links, topology
from broker.protocol import brokerpath, psc
from broker.protocol.messages import command_message
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from queues import NoMessageAvailable
from queues.definition import MAX_MAX_DEPTH
from queues.reasons import Reason
from tests.broker.network.nodes import Node, wait_until
from tests.conftest import DIALECTS, PostgresDatabases

TOKEN_AB = "link-token-a-b-0123456789abcdef"
TOKEN_AC = "link-token-a-c-0123456789abcdef"
NO_OPTIONS = RegOpt(0)


@pytest.fixture(scope="module", params=DIALECTS)
def network(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Node]]:
    workdir = tmp_path_factory.mktemp("network")
    urls = {}
    for name in ("QMA", "QMB", "QMC"):
        if request.param == "sqlite":
            urls[name] = f"sqlite:///{workdir / (name + '.db')}"
        else:
            postgres: PostgresDatabases = request.getfixturevalue("postgres")
            urls[name] = postgres.create()
    nodes = {name: Node(name, url, workdir) for name, url in urls.items()}
    try:
        for node in nodes.values():
            node.start()
        a, b, c = nodes["QMA"], nodes["QMB"], nodes["QMC"]
        assert b.link(a, TOKEN_AB) is not None  # A does not know B yet: a warning, not a refusal
        assert a.link(b, TOKEN_AB) is None
        assert c.link(a, TOKEN_AC) is not None
        assert a.link(c, TOKEN_AC) is None
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()
        if request.param == "postgresql":
            for url in urls.values():
                request.getfixturevalue("postgres").drop(url)


def queue(node: Node, name: str) -> str:
    node.qm.define_queue(name, max_depth=MAX_MAX_DEPTH, replace_existing=True)
    return name


def received(node: Node, name: str, *, expect: int, wait: float = 20.0) -> list[str]:
    """Everything on ``name`` once ``expect`` publications arrived (plus a grace period for extras)."""
    got: list[str] = []
    deadline_wait = wait
    while len(got) < expect:
        try:
            got.append(node.client.receive(name, wait=deadline_wait).text)
        except NoMessageAvailable:
            break
    try:  # anything beyond what was expected is a duplicate
        while True:
            got.append(node.client.receive(name, wait=1.0).text)
    except NoMessageAvailable:
        pass
    return got


def proxied(node: Node, topic: str, origin: str) -> bool:
    return (topic, origin) in node.proxies()


def subscribe(node: Node, topic: str, q: str, options: RegOpt = NO_OPTIONS) -> None:
    response = node.client.subscribe(topic, q, options=options)
    assert response.ok, response.describe()


def test_a_publication_at_b_reaches_a_and_c_exactly_once(network: dict[str, Node]) -> None:
    a, b, c = network["QMA"], network["QMB"], network["QMC"]
    subscribe(a, "Net/Scores/#", queue(a, "NET.A.SCORES"))
    subscribe(c, "Net/Scores/+", queue(c, "NET.C.SCORES"))
    wait_until(
        lambda: proxied(b, "Net/Scores/#", "QMA") and proxied(b, "Net/Scores/+", "QMA"), what="proxies at B"
    )
    assert proxied(a, "Net/Scores/+", "QMC")
    for n in range(5):
        response = b.client.publish("Net/Scores/Match", f"goal {n}")
        assert response is not None and response.ok
    expected = [f"goal {n}" for n in range(5)]
    assert received(a, "NET.A.SCORES", expect=5) == expected
    assert received(c, "NET.C.SCORES", expect=5) == expected


def test_a_local_publication_stays_at_b(network: dict[str, Node]) -> None:
    b, c = network["QMB"], network["QMC"]
    subscribe(b, "Net/Local/#", queue(b, "NET.B.LOCAL"))
    subscribe(c, "Net/Local/#", queue(c, "NET.C.LOCAL"))
    wait_until(lambda: proxied(b, "Net/Local/#", "QMA"), what="proxy at B")
    b.client.publish("Net/Local/x", "here only", options=PubOpt.Local)
    b.client.publish("Net/Local/x", "everywhere")
    assert received(b, "NET.B.LOCAL", expect=2) == ["here only", "everywhere"]
    assert received(c, "NET.C.LOCAL", expect=1) == ["everywhere"]


def test_other_subs_only_across_brokers(network: dict[str, Node]) -> None:
    b, c = network["QMB"], network["QMC"]
    mine = queue(b, "NET.B.CONF")
    subscribe(b, "Net/Conference", mine)
    subscribe(c, "Net/Conference", queue(c, "NET.C.CONF"))
    wait_until(lambda: proxied(b, "Net/Conference", "QMA"), what="proxy at B")
    b.client.publish("Net/Conference", "hello all", options=PubOpt.OtherSubsOnly, q_name=mine)
    assert received(c, "NET.C.CONF", expect=1) == ["hello all"]
    assert received(b, mine, expect=0, wait=2.0) == []


def test_retained_publications_and_network_wide_delete(network: dict[str, Node]) -> None:
    a, b, c = network["QMA"], network["QMB"], network["QMC"]
    subscribe(c, "Net/State/#", queue(c, "NET.C.STATE"))
    wait_until(lambda: proxied(b, "Net/State/#", "QMA"), what="proxy at B")
    b.client.publish("Net/State/Score", "1-0", options=PubOpt.RetainPub)
    assert received(c, "NET.C.STATE", expect=1) == ["1-0"]
    # Kept at every broker that received it: a late subscriber at A gets it at once.
    subscribe(a, "Net/State/#", queue(a, "NET.A.STATE"), RegOpt.InformIfRet)
    late = a.client.receive("NET.A.STATE", wait=10)
    assert (late.text, late.retained) == ("1-0", True)
    # DeletePub without Local removes it everywhere; a later subscriber gets nothing.
    assert b.client.delete_publication("Net/State/#").ok
    wait_until(
        lambda: not any(t.startswith("Net/State/") for node in (a, b, c) for t in _retained(node)),
        what="network-wide delete",
    )
    subscribe(c, "Net/State/#", queue(c, "NET.C.STATE2"))
    assert received(c, "NET.C.STATE2", expect=0, wait=1.0) == []


def test_a_local_delete_stays_here(network: dict[str, Node]) -> None:
    a, b = network["QMA"], network["QMB"]
    subscribe(a, "Net/Kept/#", queue(a, "NET.A.KEPT"))
    wait_until(lambda: proxied(b, "Net/Kept/#", "QMA"), what="proxy at B")
    b.client.publish("Net/Kept/x", "kept", options=PubOpt.RetainPub)
    assert received(a, "NET.A.KEPT", expect=1) == ["kept"]
    assert b.client.delete_publication("Net/Kept/x", options=DelOpt.Local).ok
    assert "Net/Kept/x" not in _retained(b)
    assert "Net/Kept/x" in _retained(a)


def _retained(node: Node) -> list[str]:
    from broker import store

    with node.qm.reading() as conn:
        return [pub.topic for _, pub in store.list_retained(conn, "#", limit=1000)]


def test_a_subscription_removed_at_c_stops_the_flow_to_c(network: dict[str, Node]) -> None:
    a, b, c = network["QMA"], network["QMB"], network["QMC"]
    subscribe(c, "Net/Gone/#", queue(c, "NET.C.GONE"))
    wait_until(lambda: proxied(b, "Net/Gone/#", "QMA"), what="proxy at B")
    b.client.publish("Net/Gone/x", "before")
    assert received(c, "NET.C.GONE", expect=1) == ["before"]
    assert c.client.unsubscribe("Net/Gone/#", "NET.C.GONE").ok
    wait_until(lambda: not proxied(b, "Net/Gone/#", "QMA"), what="proxy gone at B")
    assert not proxied(a, "Net/Gone/#", "QMC")
    b.client.publish("Net/Gone/x", "after")
    assert received(c, "NET.C.GONE", expect=0, wait=2.0) == []
    assert b.qm.depth("QMA") == 0  # nothing even left B


def test_a_far_end_killed_mid_stream_loses_and_duplicates_nothing(network: dict[str, Node]) -> None:
    a, b, c = network["QMA"], network["QMB"], network["QMC"]
    subscribe(a, "Net/Stream/#", queue(a, "NET.A.STREAM"))
    subscribe(c, "Net/Stream/#", queue(c, "NET.C.STREAM"))
    # Every publication is owed to C only once C's subscription has reached A: a publication
    # that A routes before that is (rightly) not C's.
    wait_until(lambda: proxied(a, "Net/Stream/#", "QMC"), what="C's proxy at A")
    wait_until(lambda: proxied(b, "Net/Stream/#", "QMA"), what="proxy at B")
    total = 120
    stop = threading.Event()

    def publish() -> None:
        for n in range(total):
            b.client.publish("Net/Stream/n", str(n), wait=False)
            stop.wait(0.01)

    publisher = threading.Thread(target=publish)
    publisher.start()
    wait_until(lambda: a.qm.depth("NET.A.STREAM") >= 10, what="the stream to reach A")
    a.kill()  # the link's far end dies mid-stream; B keeps publishing
    publisher.join()
    wait_until(lambda: b.qm.depth("QMA") > 0, what="messages waiting for A at B")
    a.start()
    expected = [str(n) for n in range(total)]
    assert received(a, "NET.A.STREAM", expect=total, wait=30) == expected
    assert received(c, "NET.C.STREAM", expect=total, wait=30) == expected


def test_a_link_that_would_close_a_cycle_is_refused(network: dict[str, Node]) -> None:
    b, c = network["QMB"], network["QMC"]
    with pytest.raises(topology.CycleDetected) as refused:
        b.link(c, "link-token-b-c-0123456789abcdef")
    assert refused.value.reason == Reason.MQRC_LOOPING_PUBLICATION
    assert "QMA" in refused.value.detail
    with b.qm.reading() as conn:
        assert links.get_link(conn, "QMC") is None  # nothing was recorded


def test_the_api_refuses_a_cycle_with_409(network: dict[str, Node]) -> None:
    from broker.admin import accounts

    c, b = network["QMC"], network["QMB"]
    with c.qm.engine.begin() as conn:
        secret = accounts.create_token(conn, "admin", "net-admin").secret
    response = httpx.post(
        c.api + "/api/v1/neighbours",
        json={"name": "QMB", "url": b.api, "token": "link-token-b-c-0123456789abcdef"},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 409, response.text
    assert "cycle" in response.json()["detail"]


def test_a_forged_looping_publication_is_dropped(network: dict[str, Node]) -> None:
    a = network["QMA"]
    target = queue(a, "NET.A.LOOP")
    subscribe(a, "Net/Loop", target)
    command = psc.Publish(
        topics=("Net/Loop",),
        sub_point=None,
        options=PubOpt(0),
        pub_time=None,
        seq_num=None,
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    path = brokerpath.render(brokerpath.BrokerPath(b"\x01" * 24, ("QMB", "QMA", "QMC")))
    message = command_message(command, payload=b"round and round", folders=(path,), request=False)
    refused_before = len([e for e in a.lines("command refused") if e.get("reason") == 2541])
    a.qm.put(INTER_BROKER_QUEUE, message)
    wait_until(
        lambda: len([e for e in a.lines("command refused") if e.get("reason") == 2541]) > refused_before,
        what="the looping publication to be dropped",
    )
    assert received(a, target, expect=0, wait=1.0) == []


def test_both_sides_see_their_channels(network: dict[str, Node]) -> None:
    """Independent of the other tests (xdist may run it first, on a network of its own)."""
    a, b = network["QMA"], network["QMB"]
    subscribe(a, "Net/Channels/#", queue(a, "NET.A.CHANNELS"))
    wait_until(lambda: proxied(b, "Net/Channels/#", "QMA"), what="proxy at B")
    with b.qm.engine.begin() as conn:  # as an outage leaves it
        links.record_error(conn, "QMA", "QMA unreachable: [Errno 111] Connection refused")
    b.client.publish("Net/Channels/Match", "clears")
    assert received(a, "NET.A.CHANNELS", expect=1) == ["clears"]
    assert b.channel("QMA").last_sent_at is not None
    assert a.channel("QMB").received_batch >= 1
    # The success cleared the error the outage left behind.
    wait_until(lambda: b.channel("QMA").last_error is None, what="B's channel to report no error")


def test_a_stopped_channel_holds_publications_until_it_is_started(network: dict[str, Node]) -> None:
    """The stop is in B's database, written by another process (as ``broker neighbour stop`` or
    the admin API write it): B's running broker keeps the publications on its transmission queue
    while it holds, and sends them, once each and in order, when the channel is started."""
    a, b = network["QMA"], network["QMB"]
    subscribe(a, "Net/Held/#", queue(a, "NET.A.HELD"))
    wait_until(lambda: proxied(b, "Net/Held/#", "QMA"), what="proxy at B")
    assert neighbours.stop_channel(b.qm, "QMA")
    try:
        for n in range(3):
            b.client.publish("Net/Held/Score", f"held {n}")
        wait_until(lambda: b.qm.depth("QMA") == 3, what="the publications on B's transmission queue")
        assert received(a, "NET.A.HELD", expect=0, wait=3.0) == []  # the agent looks every second
        assert b.qm.depth("QMA") == 3
        with b.qm.reading() as conn:
            assert links.outbox_depth(conn).get("QMA", 0) == 0
        assert b.channel("QMA").stopped
    finally:
        neighbours.start_channel(b.qm, "QMA")
    assert received(a, "NET.A.HELD", expect=3) == [f"held {n}" for n in range(3)]
    wait_until(lambda: b.qm.depth("QMA") == 0, what="B's transmission queue to empty")
