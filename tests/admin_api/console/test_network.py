"""The network pages (both dialects): every role reads the neighbours, their channels, backlogs,
last errors and proxy subscriptions; operators stop and start channels; admins add, alter and
remove neighbours, removal after a confirmation page. A real channel honouring a stop is in
tests/broker/network and tests/e2e."""

from __future__ import annotations

from html import escape

import pytest

from broker.admin import accounts, neighbours
from broker.core.effects import AddSubscription, Put
from broker.core.neighbours import transmission
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.core.system import INTER_BROKER_QUEUE
from broker.network import links
from broker.protocol.options import RegOpt
from queues import Message, UnknownObject
from queues.ids import now_ms
from tests.admin_api.console.conftest import Console
from tests.broker.store.records import Process

TOKEN = "link-token-console-0123456789"
URL = "http://127.0.0.1:9"  # nothing answers there


def link(console: Console, name: str = "QMB") -> None:
    neighbours.add_neighbour(console.api.qm, name, URL, TOKEN, check_topology=False)


def stored(console: Console, name: str = "QMB") -> links.Link | None:
    with console.api.qm.reading() as conn:
        return links.get_link(conn, name)


def waiting(console: Console, count: int, name: str = "QMB") -> None:
    console.api.qm.put_many(transmission(Put("APP.IN", Message(b"x"), name)) for _ in range(count))


def test_the_page_lists_neighbours_with_their_channel_and_backlog(console: Console) -> None:
    page = console.get("/console/network").text
    assert "No neighbours are defined" in page and "No subscription matches" in page
    link(console)
    link(console, "QMC")
    waiting(console, 3)
    with console.api.qm.engine.begin() as conn:
        links.record_error(conn, "QMC", "QMC unreachable: connection refused")
    page = console.get("/console/network").text
    assert (
        '<tr data-neighbour="QMB"><td><a href="/console/network/QMB">QMB</a></td><td>http://127.0.0.1:9</td>'
        in page
    )
    assert '<td><a href="/console/queues/QMB">QMB</a></td>\n<td class="num backlog">3</td>' in page
    assert '<td class="state">retrying, proxies not yet sent</td>' in page
    assert "QMC unreachable: connection refused" in page
    assert 'action="/console/network/QMB/stop"' in page  # an operator stops channels
    assert 'id="add-neighbour"' not in page  # and adds no neighbour
    assert TOKEN not in page


def test_a_viewer_sees_no_button_and_is_refused(console: Console) -> None:
    link(console)
    console.sign_in("viewer")
    for path in ("/console/network", "/console/network/QMB"):
        page = console.get(path).text
        assert "/stop" not in page and "/remove" not in page and "/alter" not in page
    refused = console.post("/console/network/QMB/stop")
    assert refused.status_code == 403 and "needs the operator role" in refused.text
    assert not stored(console).stopped  # type: ignore[union-attr]


def test_an_operator_stops_and_starts_a_channel_and_messages_wait(console: Console) -> None:
    link(console)
    waiting(console, 2)
    stopped = console.post("/console/network/QMB/stop", back="/console/network")
    assert str(stopped.url).endswith("/console/network")
    assert "Channel to QMB stopped: 2 messages wait for it" in stopped.text
    assert '<td class="state">stopped since ' in stopped.text
    assert 'action="/console/network/QMB/start"' in stopped.text
    assert stored(console).stopped  # type: ignore[union-attr]
    page = console.get("/console/network/QMB").text
    assert '<dd class="backlog">2</dd>' in page and "Start channel" in page
    started = console.post("/console/network/QMB/start")  # from the neighbour's page: back there
    assert str(started.url).endswith("/console/network/QMB")
    assert "Channel to QMB started: it sends the 2 messages waiting" in started.text
    assert not stored(console).stopped  # type: ignore[union-attr]
    refused = console.post("/console/network/QMX/stop")
    assert "Refused: Not Found: neighbour QMX is not defined" in refused.text


def test_an_admin_adds_alters_and_removes_a_neighbour(console: Console) -> None:
    console.sign_in("admin")
    assert 'id="add-neighbour"' in console.get("/console/network").text
    added = console.post("/console/network", name="QMB", url=URL, token=TOKEN, skip_check="on")
    assert "Neighbour QMB added" in added.text
    link_b = stored(console)
    assert link_b is not None and (link_b.url, link_b.token) == (URL, TOKEN)
    assert console.api.qm.inquire_queue("QMB").usage == "xmitq"
    unchecked = console.post("/console/network", name="QMC", url=URL, token=TOKEN)  # asks QMB first
    assert (
        "Refused: MQRCCF_UNKNOWN_BROKER (3085): cannot verify the topology: QMB did not answer"
        in unchecked.text
    )
    assert stored(console, "QMC") is None

    altered = console.post("/console/network/QMB/alter", url="http://qmb.moved:9090", token="")
    assert str(altered.url).endswith("/console/network/QMB")
    assert (
        "Neighbour QMB altered" in altered.text
        and '<dd class="url">http://qmb.moved:9090</dd>' in altered.text
    )
    assert (stored(console).url, stored(console).token) == ("http://qmb.moved:9090", TOKEN)  # type: ignore[union-attr]
    new_token = "another-console-token-0123"
    altered = console.post("/console/network/QMB/alter", url="http://qmb.moved:9090", token=new_token)
    assert "Neighbour QMB altered; change the token on its side too" in altered.text
    assert stored(console).token == new_token  # type: ignore[union-attr]
    assert new_token not in altered.text

    waiting(console, 2)
    confirm = console.get("/console/network/QMB/remove").text
    assert "<h1>Remove neighbour QMB?</h1>" in confirm and "2 messages wait for it" in confirm
    refused = console.post("/console/network/QMB/remove")
    assert "Refused: MQRC_Q_NOT_EMPTY (2055): 2 messages wait for QMB" in refused.text
    assert stored(console) is not None
    removed = console.post("/console/network/QMB/remove", purge="on")
    assert str(removed.url).endswith("/console/network") and "Neighbour QMB removed" in removed.text
    assert stored(console) is None
    with pytest.raises(UnknownObject):
        console.api.qm.inquire_queue("QMB")
    with console.api.qm.reading() as conn:
        summaries = [(e.method, e.path, e.summary) for e in accounts.list_audit(conn, limit=10)]
    assert summaries[0] == (
        "POST",
        "/console/network/QMB/remove",
        {"name": "QMB", "neighbour": "QMB", "discarded": 2},
    )
    assert all(TOKEN not in str(s) and new_token not in str(s) for s in summaries)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"name": "QM B", "url": URL, "token": TOKEN}, "name: String should match pattern"),
        ({"name": "QMB", "url": "ftp://qmb", "token": TOKEN}, "url: String should match pattern"),
        ({"name": "QMB", "url": URL, "token": "short"}, "token: String should have at least 16 characters"),
    ],
)
def test_a_bad_definition_is_a_notice(console: Console, fields: dict[str, str], why: str) -> None:
    console.sign_in("admin")
    refused = console.post("/console/network", skip_check="on", **fields)
    assert "Refused: " in refused.text and escape(why) in refused.text
    assert console.get("/api/v1/neighbours", headers=console.api.auth("admin")).json() == []


def test_an_alteration_changing_nothing_or_to_a_bad_url_is_a_notice(console: Console) -> None:
    link(console)
    console.sign_in("admin")
    for fields, why in (
        ({"url": "", "token": ""}, "give the URL, a new token or both"),
        ({"url": "qmb:1"}, "url"),
    ):
        refused = console.post("/console/network/QMB/alter", **fields)
        assert "Refused: " in refused.text and why in refused.text
    assert stored(console).url == URL  # type: ignore[union-attr]


def test_an_operator_may_not_add_alter_or_remove(console: Console) -> None:
    link(console)
    assert "/alter" not in console.get("/console/network/QMB").text
    for path, fields in (
        ("/console/network", {"name": "QMC", "url": URL, "token": TOKEN, "skip_check": "on"}),
        ("/console/network/QMB/alter", {"url": "http://elsewhere:1"}),
        ("/console/network/QMB/remove", {"purge": "on"}),
    ):
        refused = console.post(path, **fields)
        assert refused.status_code == 403 and "needs the admin role" in refused.text
    assert console.get("/console/network/QMB/remove").status_code == 403
    assert stored(console) is not None and stored(console, "QMC") is None
    assert stored(console).url == URL  # type: ignore[union-attr]


def test_a_neighbour_page_shows_its_own_proxy_subscriptions(console: Console) -> None:
    link(console)
    link(console, "QMC")
    for seq, (origin, topic) in enumerate((("QMB", "Sport/#"), ("QMC", "News/#")), start=1):
        key = SubscriptionKey(Identity(origin, INTER_BROKER_QUEUE), "", topic)
        proxy = Subscription(key, "broker", int(RegOpt.PersAsPub), now_ms(), seq=seq, origin=origin)
        Process(console.api.qm.engine).write(AddSubscription(proxy))
    page = console.get("/console/network/QMB").text
    assert "Sport/#" in page and "News/#" not in page
    assert "proxy from QMB" in page
    every = console.get("/console/network").text
    assert "Sport/#" in every and "News/#" in every


def test_an_unknown_neighbour_leads_back_to_the_list(console: Console) -> None:
    missing = console.get("/console/network/QMX")
    assert str(missing.url).endswith("/console/network")
    assert "Refused: Not Found: neighbour QMX is not defined" in missing.text
    assert console.get("/console/network/QM%00").status_code == 400
