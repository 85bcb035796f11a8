"""The MQTT listener's Prometheus counters, scraped from ``/metrics`` of ``broker serve --api --mqtt``."""

from __future__ import annotations

import json
import subprocess

import httpx
from prometheus_client.parser import text_string_to_metric_families

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.protocol.mqtt import ConnAck, Will
from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker, Paho, Raw, eventually
from tests.e2e.processes import BROKER, Brokers, child_environment, free_port


def scrape(port: int, token: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def viewer_token(url: str) -> str:
    created = subprocess.run(
        [str(BROKER), "--db", url, "token", "create", "--role", "viewer", "--json"],
        env=child_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    return str(json.loads(created.stdout)["token"])


def test_connections_packets_bytes_refusals_and_wills_are_counted(brokers: Brokers) -> None:
    api = free_port()
    broker = MqttBroker(brokers, api_port=api)
    with brokers.qm.unit_of_work() as uow:
        store.add_acl_rule(
            uow.connection, AclRule("bob", PrincipalKind.USER, "Secret", Permission.PUBLISH, False)
        )
    token = viewer_token(brokers.url)

    alice = Paho(broker.port, "alice")
    alice.connect()
    alice.subscribe(("#", 1))
    bob = Paho(broker.port, "bob", user="bob")
    bob.connect()
    bob.publish("Secret/x", b"refused", 1)
    bob.publish("Open/x", b"fine", 1)
    assert [m.payload for m in alice.receive(1)] == [b"fine"]
    bob.close()
    intruder = Raw(broker.port)
    assert intruder.connect("intruder", password=b"wrong") == ConnAck(False, 4)
    dying = Raw(broker.port)
    dying.connect("dying", will=Will("Open/will", b"gone", 0, False))
    dying.sock.close()  # no DISCONNECT: the will is published
    assert [m.payload for m in alice.receive(1)] == [b"gone"]

    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return scrape(api, token)

    assert eventually(lambda: counted()[("broker_mqtt_connections", ())] == 1)  # alice alone
    metrics = counted()
    assert metrics[("broker_mqtt_connections_accepted_total", ())] == 4
    assert metrics[("broker_mqtt_packets_total", (("direction", "in"), ("type", "CONNECT")))] == 4
    assert metrics[("broker_mqtt_packets_total", (("direction", "in"), ("type", "PUBLISH")))] == 2
    assert metrics[("broker_mqtt_packets_total", (("direction", "out"), ("type", "PUBLISH")))] == 2
    assert metrics[("broker_mqtt_packets_total", (("direction", "out"), ("type", "PUBACK")))] == 2
    assert metrics[("broker_mqtt_bytes_total", (("direction", "in"),))] > len(PASSWORD) * 2
    assert metrics[("broker_mqtt_refused_total", (("what", "publish"),))] == 1
    assert metrics[("broker_mqtt_refused_total", (("what", "connect"),))] == 1
    assert metrics[("broker_mqtt_wills_total", ())] == 1
