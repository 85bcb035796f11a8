"""The console's MQTT pages over stored sessions (both dialects): what the list and one client's
page show, who sees the buttons, and the refusals; the MQTT principals an admin adds, sets and
removes. A real listener carrying the actions out is in tests/e2e."""

from __future__ import annotations

from admin_api.console.sessions import csrf_token
from broker.core.cluster import Member
from broker.store import mqtt, nodes
from queues.ids import now_ms
from tests.admin_api.console.conftest import Console


def stored(console: Console, client_id: str, *, online: bool) -> None:
    with console.api.qm.unit_of_work() as uow:
        session = mqtt.StoredSession(
            client_id,
            mqtt.queue_for(client_id),
            "alice",
            False,
            4,
            "10.0.0.7:5000",
            1,
            2,
            owner="m1",
            keepalive=30,
        )
        mqtt.save_session(uow.connection, session)
        mqtt.record_traffic(uow.connection, "m1", {client_id: (12345, 678, 0)})
        if not online:
            mqtt.set_offline(uow.connection, now_ms(), [client_id])


def test_the_page_lists_sessions_with_buttons_for_operators_only(console: Console) -> None:
    with console.api.qm.unit_of_work() as uow:
        nodes.register(uow.connection, Member("m1", "edge-1:1883", "mqtt://0.0.0.0:1883", 1, 1, now_ms(), 1))
    stored(console, "meter/1", online=True)
    stored(console, "tablet", online=False)
    html = console.get("/console/mqtt").text
    assert '<tr data-node="edge-1:1883">' in html and '<td class="state">alive</td>' in html
    assert '<tr data-client="meter/1">' in html and "10.0.0.7:5000" in html
    assert '<td class="version">3.1.1</td>' in html and '<td class="num keepalive">30 s</td>' in html
    assert '<td class="num bytes-in">12,345</td><td class="num bytes-out">678</td>' in html
    assert '<a href="/console/mqtt/clients/meter%2F1">meter/1</a>' in html
    assert "<td>alice</td><td>edge-1:1883</td>" in html  # the node holding meter/1
    assert 'action="/console/mqtt/clients/meter%2F1/disconnect"' in html  # connected: it has one
    assert 'action="/console/mqtt/clients/tablet/disconnect"' not in html
    assert 'href="/console/mqtt/sessions/tablet/delete"' in html
    assert "1 connected, 2 sessions" in console.get("/console/overview/live").text
    confirm = console.get("/console/mqtt/sessions/meter%2F1/delete").text
    assert "it is disconnected first, and its will is published" in confirm
    assert 'href="/console/mqtt/principals"' not in html  # an operator: principals are the admin's
    refused = console.post("/console/mqtt/clients/tablet/disconnect")
    assert (
        "Refused: MQRC_UNKNOWN_OBJECT_NAME (2085): no connected MQTT client with client id &#39;tablet&#39;"
        in refused.text
    )
    missing = console.get("/console/mqtt/sessions/nobody/delete")
    assert (
        str(missing.url).endswith("/console/mqtt")
        and "no MQTT session with client id &#39;nobody&#39;" in missing.text
    )

    viewer = console.sign_in("viewer")
    html = viewer.get("/console/mqtt").text
    assert '<tr data-client="meter/1">' in html and "<form" not in html.split("<main>")[1]
    assert "Delete session" not in html
    assert viewer.get("/console/mqtt/sessions/tablet/delete").status_code == 403
    for sent in ({}, {"csrf": csrf_token(console.api.secrets["viewer"])}):
        forged = console.api.client.post("/console/mqtt/clients/meter%2F1/disconnect", data=sent)
        assert forged.status_code == 403
    with console.api.qm.reading() as conn:
        assert mqtt.find_session(conn, "meter/1").online  # type: ignore[union-attr]
        assert conn.exec_driver_sql("SELECT count(*) FROM psb_mqtt_requests").scalar() == 0


def test_one_client_s_page_shows_its_session_and_subscriptions(console: Console) -> None:
    stored(console, "meter/1", online=True)
    stored(console, "tablet", online=False)
    with console.api.qm.unit_of_work() as uow:
        mqtt.grant(uow.connection, "meter/1", [("tariff/#", 1), ("cmd/meter", 0)])
    html = console.get("/console/mqtt/clients/meter%2F1").text
    assert "<h1>MQTT client meter/1</h1>" in html
    for shown in (
        '<dd class="state">connected</dd>',
        '<dd class="version">MQTT 3.1.1</dd>',
        '<dd class="keepalive">30 s</dd>',
        '<dd class="queued">0 on its queue',
        '<dd class="bytes">12,345, 678',
        '<tr data-filter="cmd/meter"><td>cmd/meter</td><td class="num qos">0</td></tr>',
        '<tr data-filter="tariff/#"><td>tariff/#</td><td class="num qos">1</td></tr>',
        'action="/console/mqtt/clients/meter%2F1/disconnect"',
        '<input type="hidden" name="back" value="/console/mqtt/clients/meter%2F1">',
        'href="/console/mqtt/sessions/meter%2F1/delete"',
    ):
        assert shown in html, shown
    offline = console.get("/console/mqtt/clients/tablet").text
    assert "offline since" in offline and "/disconnect" not in offline and "No subscription." in offline
    refused = console.post("/console/mqtt/clients/tablet/disconnect", back="/console/mqtt/clients/tablet")
    assert (
        str(refused.url).endswith("/console/mqtt/clients/tablet")
        and "no connected MQTT client" in refused.text
    )
    elsewhere = console.post("/console/mqtt/clients/tablet/disconnect", back="https://example.com/")
    assert str(elsewhere.url).endswith("/console/mqtt")  # never a page elsewhere
    missing = console.get("/console/mqtt/clients/nobody")
    assert (
        str(missing.url).endswith("/console/mqtt")
        and "no MQTT session with client id &#39;nobody&#39;" in missing.text
    )
    viewer = console.sign_in("viewer").get("/console/mqtt/clients/meter%2F1").text
    assert "tariff/#" in viewer and "<form" not in viewer.split("<main>")[1]


def principals(console: Console) -> list[tuple[str, int]]:
    with console.api.qm.reading() as conn:
        return mqtt.list_principals(conn)


def test_an_admin_adds_sets_and_removes_principals(console: Console) -> None:
    assert console.get("/console/mqtt/principals").status_code == 403  # an operator
    refused = console.post("/console/mqtt/principals", user="sensor1", password="s3cret", again="s3cret")
    assert refused.status_code == 403 and "needs the admin role" in refused.text
    console.sign_in("admin")
    assert 'href="/console/mqtt/principals"' in console.get("/console/mqtt").text
    assert "No MQTT principal" in console.get("/console/mqtt/principals").text
    differ = console.post("/console/mqtt/principals", user="sensor1", password="s3cret", again="s3cret!")
    assert "the two passwords differ: nothing was changed" in differ.text and principals(console) == []
    empty = console.post("/console/mqtt/principals", user="sensor1", password="", again="")
    assert "password: Value error, the password is empty" in empty.text
    named = console.post("/console/mqtt/principals", user="thirteen_char", password="s3cret", again="s3cret")
    assert "principal &#39;thirteen_char&#39; must be 1 to 12 printable ASCII characters" in named.text
    added = console.post("/console/mqtt/principals", user="sensor1", password=" s3cret ", again=" s3cret ")
    assert "MQTT principal sensor1 added" in added.text and '<tr data-user="sensor1">' in added.text
    assert "s3cret" not in added.text
    twice = console.post("/console/mqtt/principals", user="sensor1", password="other", again="other")
    assert "MQTT principal sensor1 exists already" in twice.text
    with console.api.qm.reading() as conn:
        assert mqtt.verify_password(b" s3cret ", mqtt.password_hash(conn, "sensor1") or "")  # as typed

    changed = console.post("/console/mqtt/principals/sensor1/password", password="n3w", again="n3w")
    assert "Password of MQTT principal sensor1 set" in changed.text
    with console.api.qm.reading() as conn:
        assert mqtt.verify_password(b"n3w", mqtt.password_hash(conn, "sensor1") or "")
    unknown = console.post("/console/mqtt/principals/nobody/password", password="x", again="x")
    assert "no MQTT principal nobody" in unknown.text
    assert console.get("/console/mqtt/principals/averyverylongname/remove").status_code == 400

    confirm = console.get("/console/mqtt/principals/sensor1/remove").text
    assert "Remove the MQTT principal sensor1?" in confirm and principals(console) != []
    assert 'action="/console/mqtt/principals/sensor1/remove"' in confirm
    removed = console.post("/console/mqtt/principals/sensor1/remove")
    assert "MQTT principal sensor1 removed" in removed.text and principals(console) == []
    gone = console.get("/console/mqtt/principals/sensor1/remove")
    assert str(gone.url).endswith("/console/mqtt/principals") and "no MQTT principal sensor1" in gone.text
    entries = console.api.get("/api/v1/audit", "admin").json()["items"]
    assert "s3cret" not in str(entries) and "n3w" not in str(entries)
    added_entries = [e["summary"] for e in entries if e["path"] == "/console/mqtt/principals"]
    assert added_entries and all(summary == {"user": "sensor1"} for summary in added_entries[:2])
