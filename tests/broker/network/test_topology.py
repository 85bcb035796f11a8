"""broker.network.topology: keeping the network a tree, with every broker on its own database
and their ``/api/v1/channel/reachable`` endpoints behind one ``httpx.MockTransport``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from admin_api.problems import status_of
from broker.admin import neighbours
from broker.network import links, topology
from broker.network.channel import SENDER_HEADER
from queues import QueueManager
from queues.errors import MQError, UnknownObject
from queues.reasons import Reason
from tests.broker.network.test_links import Sites, link_of, shared_sites_fixture, sites_fixture  # noqa: F401 (fixtures)


def url(name: str) -> str:
    return f"http://{name.lower()}.test:8080"


def token(a: str, b: str) -> str:
    return f"token-{'-'.join(sorted((a, b)))}-0123456789"


class Network:
    """Brokers that answer each other's topology queries as the admin API does."""

    def __init__(self, sites: Sites, names: tuple[str, ...]) -> None:
        self.qms = {name: sites.qm(name) for name in names}
        self.http = httpx.Client(transport=httpx.MockTransport(self.handle))
        self.down: set[str] = set()
        self.asked: list[tuple[str, str]] = []  # (who was asked, by whom)

    def handle(self, request: httpx.Request) -> httpx.Response:
        name = request.url.host.split(".")[0].upper()
        sender = request.headers[SENDER_HEADER]
        self.asked.append((name, sender))
        if name in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        qm = self.qms[name]
        try:
            with qm.reading() as conn:
                links.authenticate(conn, sender, request.headers["Authorization"].removeprefix("Bearer "))
        except MQError as exc:
            return httpx.Response(403, json={"detail": exc.detail})
        path = tuple(p for p in request.url.params["path"].split(",") if p)
        try:
            found = topology.reachable(qm, self.http, exclude=request.url.params["exclude"], path=path)
        except topology.CycleDetected as exc:
            return httpx.Response(409, json={"detail": exc.detail})
        except MQError as exc:
            return httpx.Response(status_of(exc), json={"detail": exc.detail, "reason": exc.reason})
        routes = {reached: list(route) for reached, route in found.items()}
        return httpx.Response(200, json={"reachable": sorted(found), "routes": routes})

    def define(self, here: str, there: str) -> None:
        """``here`` defines its side of the link to ``there``, checking nothing."""
        with self.qms[here].engine.begin() as conn:
            links.add_link(conn, there, url(there), token(here, there))

    def link(self, a: str, b: str) -> None:
        self.define(a, b)
        self.define(b, a)

    def add(self, here: str, there: str, *, check_topology: bool = True) -> str | None:
        """``neighbours.add_neighbour`` as the CLI and the API call it; returns the warning."""
        _, warning = neighbours.add_neighbour(
            self.qms[here],
            there,
            url(there),
            token(here, there),
            check_topology=check_topology,
            http=self.http,
        )
        return warning

    def reachable(self, name: str, exclude: str | None = None) -> dict[str, tuple[str, ...]]:
        return topology.reachable(self.qms[name], self.http, exclude=exclude)


@pytest.fixture
def net(sites: Sites) -> Iterator[Network]:
    """QMB - QMA - QMC, linked on both sides, and QMD on its own."""
    network = Network(sites, ("QMA", "QMB", "QMC", "QMD"))
    network.link("QMA", "QMB")
    network.link("QMA", "QMC")
    yield network
    network.http.close()


def nothing_recorded(qm: QueueManager, neighbour: str) -> bool:
    try:
        qm.inquire_queue(neighbour)
    except UnknownObject:
        return link_of(qm, neighbour) is None
    return False


def test_each_broker_reaches_the_whole_tree_with_the_route_to_each(net: Network) -> None:
    assert net.reachable("QMB") == {
        "QMB": ("QMB",),
        "QMA": ("QMB", "QMA"),
        "QMC": ("QMB", "QMA", "QMC"),
    }
    assert net.reachable("QMA", exclude="QMC") == {"QMA": ("QMA",), "QMB": ("QMA", "QMB")}
    assert net.reachable("QMD") == {"QMD": ("QMD",)}


def test_a_link_that_keeps_the_tree_is_accepted(net: Network) -> None:
    assert net.add("QMD", "QMC") == "QMC has not defined this link yet; it checks the topology when it does"
    assert net.add("QMC", "QMD") is None
    assert net.qms["QMC"].inquire_queue("QMD").usage == "xmitq"
    assert net.reachable("QMB")["QMD"] == ("QMB", "QMA", "QMC", "QMD")


def test_a_link_that_would_close_a_cycle_is_refused_naming_the_route(net: Network) -> None:
    with pytest.raises(topology.CycleDetected) as refused:
        net.add("QMB", "QMC")
    assert refused.value.reason == Reason.MQRC_LOOPING_PUBLICATION == 2541
    assert refused.value.detail == (
        "linking QMB to QMC would close a cycle: QMC is already reachable from QMB through QMB -> QMA -> QMC"
    )
    assert nothing_recorded(net.qms["QMB"], "QMC")


def test_the_far_side_refuses_the_cycle_too(net: Network) -> None:
    net.define("QMB", "QMC")  # defined by hand at QMB, without the check
    with pytest.raises(topology.CycleDetected) as refused:
        net.add("QMC", "QMB")
    assert "would close a cycle" in refused.value.detail
    assert "QMC -> QMA -> QMB" in refused.value.detail
    assert nothing_recorded(net.qms["QMC"], "QMB")


def test_an_existing_cycle_is_reported_with_its_path(net: Network) -> None:
    net.link("QMB", "QMC")  # a cycle made by hand: QMA - QMB - QMC - QMA
    with pytest.raises(topology.CycleDetected) as found:
        net.reachable("QMA")
    assert found.value.detail == "the network already has a cycle: QMA -> QMB -> QMC -> QMA"
    net.define("QMA", "QMD")
    with pytest.raises(topology.CycleDetected) as refused:
        net.add("QMD", "QMA")  # every broker answers 409 back along the way
    assert refused.value.detail == "the network already has a cycle: QMD -> QMA -> QMB -> QMC -> QMA"
    assert nothing_recorded(net.qms["QMD"], "QMA")


def test_a_network_deeper_than_the_limit_is_refused(net: Network) -> None:
    path = tuple(f"QM{n}" for n in range(topology.MAX_DEPTH))
    with pytest.raises(topology.CycleDetected, match="deeper than 64 brokers"):
        topology.reachable(net.qms["QMD"], net.http, exclude=None, path=path)


def test_an_unreachable_neighbour_is_3085_unless_the_check_is_skipped(net: Network) -> None:
    net.down.add("QMD")
    with pytest.raises(MQError) as refused:
        net.add("QMA", "QMD")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER == 3085
    assert refused.value.detail.startswith("cannot verify the topology: QMD did not answer")
    assert nothing_recorded(net.qms["QMA"], "QMD")
    asked = len(net.asked)
    assert net.add("QMA", "QMD", check_topology=False) is None
    assert len(net.asked) == asked
    assert link_of(net.qms["QMA"], "QMD") is not None


def test_a_neighbour_that_cannot_check_its_own_side_is_3085(net: Network) -> None:
    net.down.add("QMC")  # QMA answers QMB's question only by asking QMC
    net.add("QMD", "QMB", check_topology=False)
    with pytest.raises(MQError) as refused:
        net.add("QMB", "QMD")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER
    assert refused.value.detail.startswith(
        "cannot verify the topology through QMA: cannot verify the topology: QMC"
    )
    assert link_of(net.qms["QMB"], "QMD") is None


def test_a_link_defined_on_one_side_only_leads_nowhere(net: Network) -> None:
    net.define("QMC", "QMD")  # QMD does not know QMC: it answers 403
    assert net.reachable("QMB") == {
        "QMB": ("QMB",),
        "QMA": ("QMB", "QMA"),
        "QMC": ("QMB", "QMA", "QMC"),
    }
    assert ("QMD", "QMC") in net.asked
    assert net.add("QMD", "QMC") is None  # now complete, and still a tree


@pytest.mark.parametrize(
    "content",
    [b"<html>proxy error</html>", b'{"reachable": ["QMX"]}', b'{"routes": ["QMX"]}', b"[]"],
    ids=["not JSON", "no routes", "routes not a mapping", "not an object"],
)
def test_an_answer_that_cannot_be_read_is_3085(sites: Sites, content: bytes) -> None:
    # From a proxy in front of the neighbour, say: a broker's own answers always have routes.
    qm = sites.qm("QMA")
    answer = httpx.MockTransport(lambda _: httpx.Response(200, content=content))
    with httpx.Client(transport=answer) as http, pytest.raises(MQError) as refused:
        neighbours.add_neighbour(qm, "QMX", url("QMX"), token("QMA", "QMX"), http=http)
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER
    assert refused.value.detail.startswith("cannot verify the topology: QMX answered 200 without routes")
    assert nothing_recorded(qm, "QMX")


def test_a_409_without_a_readable_body_is_still_a_cycle(sites: Sites) -> None:
    answer = httpx.MockTransport(lambda _: httpx.Response(409, content=b"cycle!"))
    with httpx.Client(transport=answer) as http, pytest.raises(topology.CycleDetected) as refused:
        neighbours.add_neighbour(sites.qm("QMA"), "QMX", url("QMX"), token("QMA", "QMX"), http=http)
    assert refused.value.detail == "the network already has a cycle"
