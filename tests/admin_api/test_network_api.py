"""The network endpoints: neighbours (viewers list, admins change) and the two endpoints
neighbours call with the link token instead of an API token.

Neighbours this broker (QM1) asks about the topology answer through an ``httpx.MockTransport``
put in place of the HTTP client that ``broker.admin.neighbours`` and the router would open.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from admin_api import services as services_module
from broker.admin import neighbours as admin_neighbours
from broker.core.effects import Put
from broker.core.neighbours import transmission
from broker.network import links, wire
from broker.network.channel import SENDER_HEADER
from queues import xqh
from queues.message import Message
from tests.admin_api.conftest import Api, assert_problem

NEIGHBOURS = "/api/v1/neighbours"
BATCHES = "/api/v1/channel/batches"
REACHABLE = "/api/v1/channel/reachable"
TOKEN = "link-token-qm1-qmb-0123456789"
URL_B = "http://qmb.test:8080"
EPOCH = "0123456789abcdef0123456789abcdef"

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def neighbours(monkeypatch: pytest.MonkeyPatch) -> dict[str, Handler]:
    """What each neighbour's ``/reachable`` answers QM1, by host name; others are unreachable."""
    answers: dict[str, Handler] = {}

    def route(request: httpx.Request) -> httpx.Response:
        host = request.url.host.split(".")[0].upper()
        if host not in answers:
            raise httpx.ConnectError("connection refused", request=request)
        return answers[host](request)

    def client(**_: object) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(route))

    mocked = SimpleNamespace(**{**vars(httpx), "Client": client})  # httpx, its Client mocked
    for module in (admin_neighbours, services_module):
        monkeypatch.setattr(module, "httpx", mocked)
    return answers


def routes(found: dict[str, list[str]]) -> Handler:
    return lambda _: httpx.Response(200, json={"reachable": sorted(found), "routes": found})


def stranger(_: httpx.Request) -> httpx.Response:
    return httpx.Response(403, json={"detail": "not a neighbour"})


def link(api: Api, name: str = "QMB", url: str = URL_B, token: str = TOKEN) -> None:
    admin_neighbours.add_neighbour(api.qm, name, url, token, check_topology=False)


# -- neighbours ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["zürich-token-0123456789", "token with spaces 0123", "tab\ttoken-0123456789"]
)
@pytest.mark.parametrize("check_topology", [True, False])
def test_a_link_token_that_is_not_printable_ascii_is_422(
    api: Api, neighbours: dict[str, Handler], token: str, check_topology: bool
) -> None:
    """It travels as a bearer token in an HTTP header: printable ASCII without blanks."""
    neighbours["QMB"] = routes({"QMB": ["QMB"]})
    body = {"name": "QMB", "url": URL_B, "token": token, "check_topology": check_topology}
    problem = assert_problem(api.post(NEIGHBOURS, json=body), 422)
    assert "token" in json.dumps(problem)
    assert api.get(NEIGHBOURS).json() == []


def test_only_admins_define_and_remove_neighbours_and_viewers_see_them(api: Api) -> None:
    body = {"name": "QMB", "url": URL_B, "token": TOKEN, "check_topology": False}
    assert_problem(api.post(NEIGHBOURS, None, json=body), 401)
    for role in ("viewer", "operator"):
        assert_problem(api.post(NEIGHBOURS, role, json=body), 403)
    added = api.post(NEIGHBOURS, json=body)
    assert added.status_code == 201, added.text
    shown = added.json()["neighbour"]
    assert added.json()["warning"] is None
    assert {
        k: shown[k] for k in ("name", "url", "transmission_queue", "transmission_depth", "in_flight")
    } == {
        "name": "QMB",
        "url": URL_B,
        "transmission_queue": "QMB",
        "transmission_depth": 0,
        "in_flight": 0,
    }
    assert "token" not in shown
    assert api.get(NEIGHBOURS, "viewer").json() == [shown]
    assert api.get(f"{NEIGHBOURS}/QMB", "viewer").json() == shown
    assert_problem(api.get(f"{NEIGHBOURS}/QMX", "viewer"), 404)
    assert_problem(api.delete(f"{NEIGHBOURS}/QMB", "operator"), 403)
    assert api.delete(f"{NEIGHBOURS}/QMB").status_code == 204
    assert api.get(NEIGHBOURS, "viewer").json() == []


def test_a_definition_is_validated(api: Api) -> None:
    for bad in ({"url": "qmb:8080"}, {"token": "short"}, {"name": "QM B"}):
        body = {"name": "QMB", "url": URL_B, "token": TOKEN, "check_topology": False, **bad}
        assert_problem(api.post(NEIGHBOURS, json=body), 422)
    link(api)
    body = {"name": "QMB", "url": URL_B, "token": TOKEN, "check_topology": False}
    assert_problem(api.post(NEIGHBOURS, json=body), 409, "MQRCCF_OBJECT_ALREADY_EXISTS")


def test_a_link_that_would_close_a_cycle_is_409(api: Api, neighbours: dict[str, Handler]) -> None:
    link(api)
    neighbours["QMB"] = routes({"QMB": ["QMB"], "QMC": ["QMB", "QMC"]})
    neighbours["QMC"] = routes({"QMC": ["QMC"]})
    body = {"name": "QMC", "url": "http://qmc.test:8080", "token": "link-token-qm1-qmc-0123456789"}
    problem = assert_problem(api.post(NEIGHBOURS, json=body), 409)
    assert problem["type"] == "/problems/cycle"
    assert problem["detail"] == (
        "linking QM1 to QMC would close a cycle: QMC is already reachable from QM1 through QM1 -> QMB -> QMC"
    )
    assert [n["name"] for n in api.get(NEIGHBOURS).json()] == ["QMB"]


def test_an_unreachable_neighbour_is_refused_unless_the_check_is_skipped(
    api: Api, neighbours: dict[str, Handler]
) -> None:
    body = {"name": "QMD", "url": "http://qmd.test:8080", "token": "link-token-qm1-qmd-0123456789"}
    problem = assert_problem(api.post(NEIGHBOURS, json=body), 409, "MQRCCF_UNKNOWN_BROKER")
    assert problem["detail"].startswith("cannot verify the topology: QMD did not answer")
    neighbours["QMD"] = stranger  # up now, but it has not defined its side of the link yet
    added = api.post(NEIGHBOURS, json=body)
    assert added.status_code == 201, added.text
    assert added.json()["warning"] == "QMD has not defined this link yet; it checks the topology when it does"
    skipped = {**body, "name": "QME", "url": "http://qme.test:8080", "check_topology": False}
    assert api.post(NEIGHBOURS, json=skipped).status_code == 201


def test_removal_is_409_while_messages_wait_unless_purged_and_404_once_done(api: Api) -> None:
    link(api)
    api.qm.put(*transmission(Put("APP.IN", Message(b"waiting"), "QMB")))
    problem = assert_problem(api.delete(f"{NEIGHBOURS}/QMB"), 409, "MQRC_Q_NOT_EMPTY")
    assert problem["detail"] == "1 messages wait for QMB: remove with purge to discard them"
    assert api.delete(f"{NEIGHBOURS}/QMB", params={"purge": "true"}).status_code == 204
    assert api.get(NEIGHBOURS).json() == []
    assert_problem(api.delete(f"{NEIGHBOURS}/QMB"), 404)


def audited(api: Api) -> list[dict[str, Any]]:
    """The audit entries, newest first."""
    items: list[dict[str, Any]] = api.get("/api/v1/audit").json()["items"]
    return items


def test_admins_alter_the_url_and_the_token_which_no_answer_shows(api: Api) -> None:
    link(api)
    body = {"url": "http://qmb.moved:9090/", "token": "a-new-link-token-0123456789"}
    for role in ("viewer", "operator"):
        assert_problem(api.request("PATCH", f"{NEIGHBOURS}/QMB", role, json=body), 403)
    altered = api.request("PATCH", f"{NEIGHBOURS}/QMB", json=body)
    assert altered.status_code == 200, altered.text
    assert altered.json() == api.get(f"{NEIGHBOURS}/QMB").json()
    assert altered.json()["url"] == "http://qmb.moved:9090"
    with api.qm.reading() as conn:
        stored = links.get_link(conn, "QMB")
    assert stored is not None and stored.token == body["token"]
    entry = audited(api)[0]
    assert (entry["method"], entry["summary"]) == (
        "PATCH",
        {"name": "QMB", "url": body["url"], "token_changed": True},
    )
    assert body["token"] not in altered.text + api.get("/api/v1/audit").text
    only_url = api.request("PATCH", f"{NEIGHBOURS}/QMB", json={"url": URL_B})
    assert only_url.json()["url"] == URL_B
    with api.qm.reading() as conn:
        assert links.get_link(conn, "QMB").token == body["token"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "body",
    [{"url": "qmb:8080"}, {"token": "short"}, {"url": URL_B, "name": "QMC"}, {"url": 8080}],
    ids=["bad url", "short token", "unknown field", "not a string"],
)
def test_an_alteration_is_validated(api: Api, body: dict[str, Any]) -> None:
    link(api)
    assert_problem(api.request("PATCH", f"{NEIGHBOURS}/QMB", json=body), 422)
    assert api.get(f"{NEIGHBOURS}/QMB").json()["url"] == URL_B


@pytest.mark.parametrize("body", [{}, {"url": None, "token": None}], ids=["nothing", "nulls"])
def test_an_alteration_of_nothing_keeps_everything(api: Api, body: dict[str, Any]) -> None:
    link(api)
    before = api.get(f"{NEIGHBOURS}/QMB").json()
    kept = api.request("PATCH", f"{NEIGHBOURS}/QMB", json=body)
    assert (kept.status_code, kept.json()) == (200, before)
    with api.qm.reading() as conn:
        assert links.get_link(conn, "QMB").token == TOKEN  # type: ignore[union-attr]


@pytest.mark.parametrize("change", ["PATCH", "stop", "start"])
def test_changing_a_neighbour_not_defined_is_404(api: Api, change: str) -> None:
    if change == "PATCH":
        answer = api.request("PATCH", f"{NEIGHBOURS}/QMX", json={"url": URL_B})
    else:
        answer = api.post(f"{NEIGHBOURS}/QMX/{change}", "operator")
    assert assert_problem(answer, 404)["detail"] == "neighbour QMX is not defined"


def test_operators_stop_and_start_a_channel_and_its_messages_wait_meanwhile(api: Api) -> None:
    link(api)
    assert_problem(api.post(f"{NEIGHBOURS}/QMB/stop", "viewer"), 403)
    stopped = api.post(f"{NEIGHBOURS}/QMB/stop", "operator")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["state"] == "stopped" and stopped.json()["stopped_at"] is not None
    api.qm.put(*transmission(Put("APP.IN", Message(b"waiting"), "QMB")))
    again = api.post(f"{NEIGHBOURS}/QMB/stop", "operator").json()
    assert (again["state"], again["stopped_at"], again["transmission_depth"]) == (
        "stopped",
        stopped.json()["stopped_at"],
        1,
    )
    assert api.get(NEIGHBOURS, "viewer").json()[0]["state"] == "stopped"
    started = api.post(f"{NEIGHBOURS}/QMB/start", "operator").json()
    assert (started["state"], started["stopped_at"]) == ("running", None)
    assert [(e["path"], e["summary"], e["status"]) for e in audited(api)[:4]] == [
        ("/api/v1/neighbours/QMB/start", {"name": "QMB", "changed": True}, 200),
        ("/api/v1/neighbours/QMB/stop", {"name": "QMB", "changed": False}, 200),
        ("/api/v1/neighbours/QMB/stop", {"name": "QMB", "changed": True}, 200),
        ("/api/v1/neighbours/QMB/stop", {"name": "QMB"}, 403),
    ]


# -- the channel's inbound endpoint --------------------------------------------------------------


def batch(number: int = 1, sender: str = "QMB") -> bytes:
    data = xqh.encode("APP.IN", "QM1", Message(b"across", msg_id=b"m" * 24))
    return wire.encode(wire.Batch(sender, EPOCH, number, (wire.Frame(data, -1),)))


def post_batch(
    api: Api, payload: bytes, *, token: str | None = TOKEN, sender: str | None = "QMB"
) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if sender is not None:
        headers[SENDER_HEADER] = sender
    return api.post(BATCHES, None, content=payload, headers=headers)


@pytest.fixture
def linked(api: Api) -> Iterator[Api]:
    """QM1 with neighbour QMB and the queue its batches are for."""
    link(api)
    api.qm.define_queue("APP.IN")
    yield api


def test_a_batch_is_taken_once_and_its_resend_confirmed_as_a_duplicate(linked: Api) -> None:
    first = post_batch(linked, batch())
    assert first.status_code == 200, first.text
    assert first.json() == {"batch": 1, "accepted": 1, "dead_lettered": 0, "duplicate": False}
    again = post_batch(linked, batch())
    assert again.status_code == 200, again.text
    assert again.json() == {"batch": 1, "accepted": 0, "dead_lettered": 0, "duplicate": True}
    assert linked.qm.depth("APP.IN") == 1
    assert linked.qm.get("APP.IN").body == b"across"


def test_anyone_but_the_neighbour_is_403(linked: Api) -> None:
    claims = [
        (None, "QMB"),  # no token
        ("wrong-token-0123456789", "QMB"),
        (TOKEN, "QMC"),  # QMB's token, another sender named
        (linked.secrets["admin"], "QMB"),  # an API token opens nothing here
    ]
    for token, sender in claims:
        problem = assert_problem(post_batch(linked, batch(), token=token, sender=sender), 403)
        assert problem["type"] == "/problems/not-a-neighbour"
    assert_problem(post_batch(linked, batch(), sender=None), 422)  # the sender must name itself
    assert linked.qm.depth("APP.IN") == 0


def test_a_malformed_batch_is_400(linked: Api) -> None:
    zero = json.dumps({"sender": "QMB", "epoch": EPOCH, "batch": 0, "messages": []}).encode()
    for payload in (b"not json", zero, b"[" * 100_000):
        problem = assert_problem(post_batch(linked, payload), 400)
        assert problem["type"] == "/problems/bad-batch"


def test_an_undecodable_message_is_dead_lettered_not_refused(linked: Api) -> None:
    payload = json.dumps(
        {
            "sender": "QMB",
            "epoch": EPOCH,
            "batch": 1,
            "messages": [{"data": base64.b64encode(b"no header").decode(), "expiry": -1}],
        }
    ).encode()
    response = post_batch(linked, payload)
    assert response.json() == {"batch": 1, "accepted": 0, "dead_lettered": 1, "duplicate": False}


# -- the topology endpoint -----------------------------------------------------------------------


def reachable(api: Api, *, token: str | None = TOKEN, sender: str = "QMB", **params: str) -> httpx.Response:
    headers = {SENDER_HEADER: sender, **({"Authorization": f"Bearer {token}"} if token else {})}
    return api.get(REACHABLE, None, params={"exclude": "QMB", **params}, headers=headers)


def test_reachable_answers_neighbours_only(api: Api) -> None:
    link(api)
    for token, sender in ((None, "QMB"), ("wrong-token-0123456789", "QMB"), (TOKEN, "QMC")):
        problem = assert_problem(reachable(api, token=token, sender=sender), 403)
        assert problem["type"] == "/problems/not-a-neighbour"
    assert_problem(reachable(api, token=api.secrets["admin"]), 403)


def test_reachable_lists_what_lies_beyond_with_routes(api: Api, neighbours: dict[str, Handler]) -> None:
    link(api)
    link(api, "QMC", "http://qmc.test:8080", "link-token-qm1-qmc-0123456789")
    neighbours["QMC"] = routes({"QMC": ["QMC"], "QME": ["QMC", "QME"]})
    response = reachable(api)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "reachable": ["QM1", "QMC", "QME"],
        "routes": {"QM1": ["QM1"], "QMC": ["QM1", "QMC"], "QME": ["QM1", "QMC", "QME"]},
    }
    neighbours["QMB"] = routes({"QMB": ["QMB"]})
    from_c = reachable(api, token="link-token-qm1-qmc-0123456789", sender="QMC", exclude="QMC")
    assert from_c.json() == {"reachable": ["QM1", "QMB"], "routes": {"QM1": ["QM1"], "QMB": ["QM1", "QMB"]}}


def test_reachable_is_409_when_the_question_has_come_round(api: Api) -> None:
    link(api)
    problem = assert_problem(reachable(api, path="QMB,QM1"), 409)
    assert problem["type"] == "/problems/cycle"
    assert problem["detail"] == "the network already has a cycle: QMB -> QM1 -> QM1"
    headers = {SENDER_HEADER: "QMB", "Authorization": f"Bearer {TOKEN}"}
    assert_problem(api.get(REACHABLE, None, headers=headers), 422)  # no exclude
