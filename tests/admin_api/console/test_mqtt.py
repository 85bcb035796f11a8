"""The console's MQTT page over stored sessions (both dialects): what it lists, who sees the
buttons, and the refusals; a real listener carrying the actions out is in tests/e2e."""

from __future__ import annotations

from admin_api.console.sessions import csrf_token
from broker.core.cluster import Member
from broker.store import mqtt, nodes
from queues.ids import now_ms
from tests.admin_api.console.conftest import Console


def stored(console: Console, client_id: str, *, online: bool) -> None:
    with console.api.qm.unit_of_work() as uow:
        session = mqtt.StoredSession(
            client_id, mqtt.queue_for(client_id), "alice", False, 4, "10.0.0.7:5000", 1, 2, owner="m1"
        )
        mqtt.save_session(uow.connection, session)
        if not online:
            mqtt.set_offline(uow.connection, now_ms(), [client_id])


def test_the_page_lists_sessions_with_buttons_for_operators_only(console: Console) -> None:
    with console.api.qm.unit_of_work() as uow:
        nodes.register(uow.connection, Member("m1", "edge-1:1883", "mqtt://0.0.0.0:1883", 1, 1, now_ms(), 1))
    stored(console, "meter/1", online=True)
    stored(console, "tablet", online=False)
    html = console.get("/console/mqtt").text
    assert '<tr data-node="edge-1:1883">' in html and '<td class="state">alive</td>' in html
    assert '<tr data-client="meter/1">' in html and "10.0.0.7:5000" in html and "3.1.1" in html
    assert "<td>alice</td><td>edge-1:1883</td>" in html  # the node holding meter/1
    assert 'action="/console/mqtt/clients/meter%2F1/disconnect"' in html  # connected: it has one
    assert 'action="/console/mqtt/clients/tablet/disconnect"' not in html
    assert 'href="/console/mqtt/sessions/tablet/delete"' in html
    assert "1 connected, 2 sessions" in console.get("/console/overview/live").text
    confirm = console.get("/console/mqtt/sessions/meter%2F1/delete").text
    assert "it is disconnected first, and its will is published" in confirm
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
