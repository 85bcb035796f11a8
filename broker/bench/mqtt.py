"""MQTT benchmark: ``broker serve --mqtt`` against Mosquitto, the same workload in the same run.

Anchor: Debian's Mosquitto (``/usr/sbin/mosquitto``), started here on a free port with a config
of its own: anonymous clients, no persistence, and no limit on queued QoS 1 / 2 messages or on
messages in flight (``max_queued_messages 0``, ``max_inflight_messages 0``). Its default of 1,000
queued messages per client silently drops QoS 1 and 2 deliveries to a subscriber that lags,
which would count as speed. Target: ``broker serve --mqtt`` on a fresh database of each kind in
``--databases``, with its default settings but for as many QoS 1 / 2 messages in flight per
client as MQTT's packet ids allow (``mqtt_max_inflight`` 65,535, its counterpart of Mosquitto's
no limit): its output bound (``mqtt_max_output_bytes``) and its input bounds are the product's.

Throughput, at QoS 0, 1 and 2 (subscription QoS = publication QoS): 10 subscribers on
``bench/#`` and ``--publishers`` publishers on ``bench/<n>/x``, 256-byte payloads, each publisher
with ``--window`` QoS 1 / 2 PUBLISHes unacknowledged, publishing as fast as the server takes it
for ``--seconds``; ``--repeat`` runs per QoS (three by default: all are printed, with their
spread, for the stability target). publications/s: from the common start to the last
publication taken (QoS 0: answered PINGREQ behind it) or acknowledged; deliveries/s: distinct
publications the subscribers received, to the last one. A delivery that never came is reported as
missing, a second copy as a duplicate; neither is hidden in the rate.

Latency: one publisher paced at ``--rate`` publications/s at QoS 1 for ``--latency-seconds``;
each delivery's receive time minus the send time carried in its payload (one machine, one clock);
measured before the floods and again after them, with the server's CPU time per delivery.

Floods (``broker.bench.mqtt_flood``): one publisher flat out at QoS 0, 1 and 2 with a probe
client timing its own QoS 1 round trips meanwhile, and large payloads beside a subscriber that
never reads: deliveries in the measuring window, the loss after a drain, the probe's round trips,
a new client's wait, the server's memory at the end.

Shared subscription: ``--shared`` subscribers on ``$share/bench/bench/<run>/#`` and the
throughput's publishers on ``bench/<run>/<n>/x``, at QoS 0 and 1, ``--repeat`` runs each: every
publication is to reach one member of the group, so deliveries/s counts the distinct publications
the group received, and a publication no member received is missing, one received twice (by
one member or by two) a duplicate.

Idle connections: ``--idle`` connections CONNECT with keepalive 60 and stay silent; the server's
resident set (VmRSS of its process and its children) before and after, per connection.

Every client speaks the protocol level ``--protocol`` names (3.1.1, or 5.0: its CONNECT asks
for a session that ends with the connection).

The servers run side by side and take turns (:func:`measure`): every server's runs of one
kind come within a minute or so of each other, whatever the machine does over the whole run.

The load generator (``broker.bench.mqtt_load``) is asyncio on the broker's own codec, in
``--processes`` publisher and as many subscriber processes; its CPU per message is printed, and
the rate it reaches against Mosquitto with one process against ``--processes`` shows whether it,
rather than the server, is the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from typing import Any

from broker.bench import mqtt_churn, mqtt_flood, mqtt_scale
from broker.bench.mqtt_load import (
    ROOT,
    PublisherSpec,
    SubscriberSpec,
    open_idle,
)
from broker.bench.mqtt_runs import (
    LEVELS,
    MOSQUITTO,
    PROTOCOLS,
    SUBSCRIBERS,
    UNLIMITED,
    Server,
    Throughput,
    Workload,
    broker,
    fastest,
    mosquitto,
    rate,
    run_clients,
    run_id,
    split,
)
from broker.bench.options import DATABASES, database_list, emit, positive
from broker.bench.process_stats import cpu_seconds, rss_kb
from broker.bench.scratch import DEFAULT_PG_URL
from broker.protocol.mqtt import MQTT_311

QOS_LEVELS = (0, 1, 2)
SHARED_QOS_LEVELS = (0, 1)
SHARE = "bench"  # the shared subscription's group name
IDLE_KEEPALIVE = 60
# The targets: ours / Mosquitto at least this, per QoS, in both workloads; p99 under 10 ms at
# 1,000/s before and after the floods, with at most 40 us of server CPU per QoS 1 delivery; the
# runs of one kind within 15 % of each other.
DELIVERY_TARGETS = {0: 0.8, 1: 1.0, 2: 1.2}
P99_TARGET_MS = 10.0
CPU_TARGET_US = 40.0
STABILITY_TARGET = 0.15
IDLE_TARGET_KB = 10.0  # resident memory per idle connection (KiB, as VmRSS counts)
CONNECT_FLOOD_TARGET_S = 1.0  # a new client's slowest step at p99, beside a CONNECT flood
CHURN_TARGET_MB = 10.0  # RSS growth from a tenth of the churn cycles to all of them


@dataclass(frozen=True, slots=True)
class Latency:
    server: str
    rate: int
    achieved: float
    deliveries: int
    missing: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    server_cpu: float = 0.0  # seconds, over the run

    @property
    def cpu_per_delivery_us(self) -> float:
        return 1e6 * self.server_cpu / self.deliveries if self.deliveries else float("nan")


@dataclass(frozen=True, slots=True)
class Idle:
    server: str
    connections: int
    rss_before_kb: int
    rss_after_kb: int

    @property
    def kb_per_connection(self) -> float:
        return (self.rss_after_kb - self.rss_before_kb) / self.connections


def throughput(
    server: Server, qos: int, load: Workload, processes: int, *, shared: bool = False
) -> Throughput:
    """Every publisher as fast as the server takes it for ``load.seconds``, then until the last
    delivery (or ``load.idle_seconds`` without one). ``shared``: ``load.shared`` subscribers in
    one shared subscription's group on topics of this run's own, each publication expected once
    in the group."""
    root = f"{ROOT}/{run_id()}" if shared else ROOT
    specs = [
        PublisherSpec(
            "127.0.0.1",
            server.port,
            qos,
            group,
            UNLIMITED,
            0.0,
            load.window,
            seconds=load.seconds,
            protocol=load.protocol,
            root=root,
        )
        for group in split(range(load.publishers), processes)
    ]
    subscribers = SubscriberSpec(
        "127.0.0.1",
        server.port,
        qos,
        (),
        run_id(),
        load.idle_seconds,
        protocol=load.protocol,
        root=root,
        share=SHARE if shared else "",
    )
    members = load.shared if shared else SUBSCRIBERS
    cpu = cpu_seconds(server.pid)
    published, received = run_clients(server, qos, specs, subscribers, processes, members=members)
    cpu = cpu_seconds(server.pid) - cpu
    started = min(r.started for r in published)
    total = sum(r.published for r in published)
    distinct = len(set().union(*(r.keys for r in received))) if shared else sum(r.distinct for r in received)
    return Throughput(
        server.name,
        qos,
        total,
        total if shared else total * SUBSCRIBERS,
        sum(r.received for r in received),
        distinct,
        max(r.finished for r in published) - started,
        max((r.last for r in received if r.received), default=started) - started,
        sum(r.cpu for r in published),
        sum(r.cpu for r in received),
        cpu,
    )


def latency(server: Server, load: Workload, processes: int) -> Latency:
    count = max(1, int(load.rate * load.latency_seconds))
    spec = PublisherSpec(
        "127.0.0.1", server.port, 1, (0,), count, 0.0, load.window, float(load.rate), protocol=load.protocol
    )
    subscribers = SubscriberSpec(
        "127.0.0.1", server.port, 1, (), run_id(), load.idle_seconds, latency=True, protocol=load.protocol
    )
    cpu = cpu_seconds(server.pid)
    (published,), received = run_clients(server, 1, [spec], subscribers, processes)
    cpu = cpu_seconds(server.pid) - cpu
    measured = sorted(ms for r in received for ms in r.latencies_ms)
    return Latency(
        server.name,
        load.rate,
        count / (published.finished - published.started),
        len(measured),
        count * SUBSCRIBERS - sum(r.distinct for r in received),
        _percentile(measured, 0.50),
        _percentile(measured, 0.99),
        measured[-1] if measured else float("nan"),
        cpu,
    )


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def idle(server: Server, count: int, level: int = MQTT_311) -> Idle:
    async def hold() -> tuple[int, int]:
        await asyncio.sleep(1.0)
        before = rss_kb(server.process.pid)
        connections = await open_idle("127.0.0.1", server.port, count, IDLE_KEEPALIVE, level)
        await asyncio.sleep(2.0)
        after = rss_kb(server.process.pid)
        await asyncio.gather(*(c.close() for c in connections))
        return before, after

    before, after = asyncio.run(hold())
    return Idle(server.name, count, before, after)


def measure(servers: Sequence[Server], load: Workload) -> list[dict[str, Any]]:
    """Every figure of each server, the servers taking turns: each one's idle connections (on a
    server that has carried no traffic), then each one's latency, then each one's connection
    scale, then the throughput runs QoS by QoS, each server's ``load.repeat`` runs of a QoS
    back to back (the stability target is about consecutive runs on one server process), then
    the shared subscription's runs alike. The machine
    moves during a benchmark of many minutes (other work, heat, a database writing back what a
    flood left); taking turns puts every server's runs of one kind within a minute or so of each
    other, so the ratios compare like with like, and the latency at a steady rate is measured
    before any flood, whose write-back would land on whichever server came next. On a shared
    machine the fastest run is the one least disturbed by others, and a delivery missed in any
    run is still reported."""
    results: list[dict[str, Any]] = [
        {"server": server.name, "idle": idle(server, load.idle, load.protocol)} for server in servers
    ]
    for server, result in zip(servers, results, strict=True):
        result["latency"] = latency(server, load, load.processes)
    for server, result in zip(servers, results, strict=True):
        result["scale"] = (
            connection_scale(server, load.connections, load.protocol) if load.connections else None
        )
        result["throughput"] = [[] for _ in QOS_LEVELS]
        result["shared"] = [[] for _ in SHARED_QOS_LEVELS] if load.shared else []
        result["floods"] = []
    for flood_load in load.floods:
        for server, result in zip(servers, results, strict=True):
            result["floods"].append(
                mqtt_flood.run(server.port, server.pid, server.name, flood_load, run_id(), load.protocol)
            )
    for server, result in zip(servers, results, strict=True):
        result["connect_flood"] = (
            mqtt_churn.connect_flood(
                server.port, server.name, run_id(), load.connect_flood_seconds, load.protocol
            )
            if load.connect_flood_seconds
            else None
        )
    for server, result in zip(servers, results, strict=True):
        result["latency_after"] = latency(server, load, load.processes)
    for index, qos in enumerate(QOS_LEVELS):
        for server, result in zip(servers, results, strict=True):
            for _ in range(load.repeat):
                result["throughput"][index].append(throughput(server, qos, load, load.processes))
    for index, qos in enumerate(SHARED_QOS_LEVELS if load.shared else ()):
        for server, result in zip(servers, results, strict=True):
            for _ in range(load.repeat):
                result["shared"][index].append(throughput(server, qos, load, load.processes, shared=True))
    for server, result in zip(servers, results, strict=True):
        result["churn"] = churn(server, load.churn, load.protocol) if load.churn else None
    return results


def churn(server: Server, cycles: int, level: int = MQTT_311) -> mqtt_churn.Churn:
    pid = server.process.pid
    return mqtt_churn.churn(server.port, lambda: rss_kb(pid), server.name, run_id(), cycles, level)


def connection_scale(server: Server, count: int, level: int = MQTT_311) -> mqtt_scale.Scale:
    """``count`` clients with one subscription each: connect rate, memory, one fan-out."""
    return asyncio.run(
        mqtt_scale.measure(
            "127.0.0.1", server.port, count, lambda: rss_kb(server.process.pid), server.name, level
        )
    )


def headroom(load: Workload) -> dict[int, Throughput]:
    """QoS 0 against Mosquitto with one generator process and with ``processes``: if more
    processes reach a higher rate, one was the limit; if not, the server (or the machine) is."""
    with mosquitto() as server:
        return {n: throughput(server, 0, load, n) for n in sorted({1, load.processes})}


def run(
    load: Workload,
    databases: Sequence[str] = DATABASES,
    *,
    pg_url: str = DEFAULT_PG_URL,
    target: str = "broker",
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "workload": load,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "servers": [],
    }
    if load.connections:
        mqtt_scale.raise_file_limit(load.connections + 256)  # the servers started here inherit it
    with ExitStack() as running_servers:
        servers = [running_servers.enter_context(mosquitto())]
        if target != "broker":
            servers.append(running_servers.enter_context(mosquitto("mosquitto (target)")))
        for kind in databases if target == "broker" else ():
            for processes in load.mqtt_processes:
                servers.append(running_servers.enter_context(broker(kind, pg_url, processes)))
        results["servers"] = measure(servers, load)
    results["headroom"] = headroom(load)
    results["cluster"] = clusters(load, pg_url) if target == "broker" else {"runs": [], "anchor": None}
    return results


def clusters(load: Workload, pg_url: str) -> dict[str, Any]:
    """The figures of an MQTT cluster of each node count in ``load.nodes``."""
    from broker.bench import mqtt_cluster

    if not load.nodes:
        return {"runs": [], "anchor": None}
    with mosquitto() as anchor:  # the storm's anchor, measured in the same run
        storm = mqtt_cluster.storm([anchor], load.connections or mqtt_cluster.MIN_CONNECTIONS, "anchor")
    runs = []
    for count in load.nodes:
        with mqtt_cluster.cluster(pg_url, count) as servers:
            runs.append(mqtt_cluster.measure(servers, load))
    return {"runs": runs, "anchor": storm}


# --- the report ---------------------------------------------------------------------------------


def _throughput_line(runs: Sequence[Throughput]) -> str:
    """The fastest run's rates, every run's deliveries/s and their spread; missing and duplicate
    deliveries of all the runs."""
    row = fastest(runs)
    missing, duplicates = sum(run.missing for run in runs), sum(run.duplicates for run in runs)
    each = " / ".join(f"{run.deliveries_per_second:,.0f}" for run in runs)
    return (
        f"{row.server:<26} {row.qos:>3} {rate(row.publications, row.publish_seconds):>10,.0f} "
        f"{row.deliveries_per_second:>13,.0f} {missing:>8,} {duplicates:>6,} "
        f"{row.cpu_per_delivery_us:>8.1f} {1e6 * row.publisher_cpu / max(1, row.publications):>9.1f} "
        f"{1e6 * row.subscriber_cpu / max(1, row.received):>9.1f} {row.generator_cores:>9.2f}   "
        f"runs {each} (spread {100 * spread(runs):.0f} %)"
    )


def spread(runs: Sequence[Throughput]) -> float:
    """How far apart the runs' deliveries/s are: (fastest - slowest) / fastest."""
    rates = [run.deliveries_per_second for run in runs]
    return (max(rates) - min(rates)) / max(rates) if rates and max(rates) > 0 else 0.0


def _shared_lines(runs: Sequence[Sequence[Throughput]], load: Workload) -> list[str]:
    """The shared subscription's rows, under the throughput's columns."""
    if not runs:
        return []
    return [
        f"shared subscription: {load.shared} subscribers on $share/{SHARE}/{ROOT}/<run>/#, "
        f"{load.publishers} publishers on {ROOT}/<run>/<n>/x, each publication once in the group "
        "(missing and dup: across the group)",
        *map(_throughput_line, runs),
    ]


def _latency_line(when: str, lat: Latency) -> str:
    return (
        f"latency QoS 1 at {lat.rate:,}/s {when} (achieved {lat.achieved:,.0f}/s, {lat.deliveries:,} "
        f"deliveries, {lat.missing:,} missing): p50 {lat.p50_ms:.2f} ms, p99 {lat.p99_ms:.2f} ms, "
        f"max {lat.max_ms:.2f} ms; server CPU {lat.cpu_per_delivery_us:.1f} us per delivery"
    )


def _flood_line(flood: mqtt_flood.Flood) -> str:
    return (
        f"{flood.label:<42} {rate(flood.published, flood.window_seconds):>9,.0f} "
        f"{flood.deliveries_per_second:>11,.0f} {100 * flood.loss:>6.2f} "
        f"{flood.percentile_ms(0.5):>7.1f} {flood.percentile_ms(0.99):>7.1f} "
        f"{max(flood.round_trips_ms, default=float('nan')):>7.1f} {flood.unanswered:>4} "
        f"{flood.new_client_seconds:>6.2f} {flood.rss_end_kb / 1024:>7.1f} {flood.cpu_per_delivery_us:>7.1f}"
    )


FLOOD_HEADER = (
    f"{'flood':<42} {'pubs/s':>9} {'dlv/s':>11} {'loss%':>6} {'rtt p50':>7} {'rtt p99':>7} "
    f"{'rtt max':>7} {'lost':>4} {'new s':>6} {'RSS MB':>7} {'us/dlv':>7}"
)


def _flood_targets(floods: Sequence[mqtt_flood.Flood]) -> list[str]:
    """The floods' absolute targets: loss, the probe's p99, the new client, memory."""
    lines = []
    for flood in floods:
        checks = [
            (flood.loss <= mqtt_flood.LOSS_TARGET, f"loss {100 * flood.loss:.2f} % <= 1 %"),
            (
                flood.percentile_ms(0.99) < mqtt_flood.PROBE_P99_TARGET_MS,
                f"probe p99 {flood.percentile_ms(0.99):.0f} ms < 100 ms",
            ),
            (
                flood.new_client_seconds < mqtt_flood.NEW_CLIENT_TARGET_SECONDS,
                f"new client {flood.new_client_seconds:.2f} s < 1 s",
            ),
            (
                flood.rss_end_kb / 1024 < mqtt_flood.RSS_TARGET_MB,
                f"RSS {flood.rss_end_kb / 1024:.0f} MB < 150 MB",
            ),
        ]
        verdicts = ", ".join(f"{text}: {'met' if ok else 'NOT met'}" for ok, text in checks)
        lines.append(f"  {flood.label}: {verdicts}")
    return lines


def _ratio(ours: float, anchor: float) -> str:
    return f"{ours / anchor:.2f}" if anchor > 0 else "-"


def _ratios(anchor: dict[str, Any], target: dict[str, Any]) -> list[str]:
    lines = []
    for mine_runs, their_runs in zip(target["throughput"], anchor["throughput"], strict=True):
        mine, theirs = fastest(mine_runs), fastest(their_runs)
        ours, base = mine.deliveries_per_second, theirs.deliveries_per_second
        goal = DELIVERY_TARGETS[mine.qos]
        met = "met" if base and ours / base >= goal else "NOT met"
        stable = "met" if spread(mine_runs) <= STABILITY_TARGET else "NOT met"
        lines.append(
            f"  QoS {mine.qos} deliveries/s      {_ratio(ours, base):>6}   target >= {goal}x: {met}; "
            f"runs within 15 %: {stable}"
        )
        ours_pub = rate(mine.publications, mine.publish_seconds)
        base_pub = rate(theirs.publications, theirs.publish_seconds)
        lines.append(f"  QoS {mine.qos} publications/s    {_ratio(ours_pub, base_pub):>6}")
    for mine_runs, their_runs in zip(target["shared"], anchor["shared"], strict=True):
        mine, theirs = fastest(mine_runs), fastest(their_runs)
        once = "met" if not any(run.missing or run.duplicates for run in mine_runs) else "NOT met"
        lines.append(
            f"  shared QoS {mine.qos} deliveries/s "
            f"{_ratio(mine.deliveries_per_second, theirs.deliveries_per_second):>6}   "
            f"each publication once in the group, every run: {once}"
        )
    for mine_flood, their_flood in zip(target["floods"], anchor["floods"], strict=True):
        ours, base = mine_flood.deliveries_per_second, their_flood.deliveries_per_second
        wanted = DELIVERY_TARGETS.get(mine_flood.qos) if mine_flood.readers > 1 else None
        verdict = (
            f"   target >= {wanted}x: {'met' if base and ours / base >= wanted else 'NOT met'}"
            if wanted
            else ""
        )
        lines.append(f"  {mine_flood.label:<42} deliveries/s {_ratio(ours, base):>6}{verdict}")
    for when in ("latency", "latency_after"):
        mine_l, theirs_l = target[when], anchor[when]
        said = "before the floods" if when == "latency" else "after the floods"
        met = "met" if mine_l.p99_ms < P99_TARGET_MS and mine_l.missing == 0 else "NOT met"
        cpu_met = "met" if mine_l.cpu_per_delivery_us <= CPU_TARGET_US else "NOT met"
        lines.append(f"  p50 latency {said:<17} {_ratio(mine_l.p50_ms, theirs_l.p50_ms):>6}")
        lines.append(
            f"  p99 latency {said:<17} {_ratio(mine_l.p99_ms, theirs_l.p99_ms):>6}   "
            f"target < {P99_TARGET_MS:.0f} ms at {mine_l.rate:,}/s QoS 1: {mine_l.p99_ms:.1f} ms, {met}; "
            f"CPU {mine_l.cpu_per_delivery_us:.1f} us per delivery, target <= {CPU_TARGET_US:.0f}: {cpu_met}"
        )
    lines += _flood_targets(target["floods"])
    mine_idle = target["idle"].kb_per_connection
    idle_ratio = _ratio(mine_idle, anchor["idle"].kb_per_connection)
    met = "met" if mine_idle < IDLE_TARGET_KB else "NOT met"
    target_text = f"target < {IDLE_TARGET_KB:.0f} KB: {mine_idle:.1f} KB, {met}"
    lines.append(f"  RSS per idle connection {idle_ratio:>6}   {target_text}")
    lines += _churn_ratios(anchor, target)
    mine, theirs = target["scale"], anchor["scale"]
    if mine is not None and theirs is not None:
        lines += [
            f"  connections/s           {_ratio(mine.connects_per_second, theirs.connects_per_second):>6}",
            f"  RSS per subscribed one  {_ratio(mine.kb_per_connection, theirs.kb_per_connection):>6}",
            *(
                f"  fan-out time QoS {ours.qos}      {_ratio(ours.seconds, base.seconds):>6}"
                for ours, base in zip(mine.fanouts, theirs.fanouts, strict=True)
            ),
        ]
    return lines


def _steps(steps: mqtt_churn.Steps) -> str:
    return ", ".join(
        f"{name} p50 {1000 * mqtt_churn.percentile(times, 0.5):,.1f} / p99 "
        f"{1000 * mqtt_churn.percentile(times, 0.99):,.1f} ms"
        for name, times in (("CONNACK", steps.connack), ("SUBACK", steps.suback), ("PUBACK", steps.puback))
    )


def _connect_flood_lines(flood: mqtt_churn.ConnectFlood | None) -> list[str]:
    if flood is None:
        return []
    return [
        f"a new client, alone ({len(flood.alone.connack)} cycles): {_steps(flood.alone)}",
        f"a new client beside a CONNECT flood of {flood.flood_rate:,.0f} clients/s "
        f"({mqtt_churn.CONCURRENCY} at a time, each CONNECT/SUBSCRIBE/PUBLISH/DISCONNECT; "
        f"{flood.errors} failed) "
        f"({len(flood.flooded.connack)} cycles): {_steps(flood.flooded)}",
    ]


def _churn_lines(churn: mqtt_churn.Churn | None) -> list[str]:
    if churn is None:
        return []
    return [
        f"churn: {churn.cycles:,} clients connected, subscribed, published and left in {churn.seconds:.0f} s "
        f"({churn.rate:,.0f}/s, {churn.errors} failed): RSS "
        f"{churn.rss_start_kb / 1024:,.1f} MB at the start, {churn.rss_mark_kb / 1024:,.1f} MB after "
        f"{churn.mark:,}, {churn.rss_end_kb / 1024:,.1f} MB at the end"
    ]


def _churn_ratios(anchor: dict[str, Any], target: dict[str, Any]) -> list[str]:
    lines = []
    mine_flood, their_flood = target["connect_flood"], anchor["connect_flood"]
    if mine_flood is not None and their_flood is not None:
        worst = mine_flood.flooded.worst()
        met = "met" if worst < CONNECT_FLOOD_TARGET_S and not mine_flood.errors else "NOT met"
        lines += [
            f"  CONNECT flood clients/s {_ratio(mine_flood.flood_rate, their_flood.flood_rate):>6}",
            f"  new client's p99 step   {_ratio(worst, their_flood.flooded.worst()):>6}   target < "
            f"{CONNECT_FLOOD_TARGET_S:.0f} s beside the flood: {1000 * worst:,.0f} ms, {met}",
        ]
    mine_churn, their_churn = target["churn"], anchor["churn"]
    if mine_churn is not None and their_churn is not None:
        met = "met" if mine_churn.growth_mb <= CHURN_TARGET_MB and not mine_churn.errors else "NOT met"
        lines += [
            f"  churn clients/s         {_ratio(mine_churn.rate, their_churn.rate):>6}",
            f"  churn RSS growth          {mine_churn.growth_mb:+.1f} MB (Mosquitto "
            f"{their_churn.growth_mb:+.1f}) from {mine_churn.mark:,} to {mine_churn.cycles:,} cycles, "
            f"target <= {CHURN_TARGET_MB:.0f} MB: {met}",
        ]
    return lines


def _scale_lines(scale: mqtt_scale.Scale) -> list[str]:
    fanouts = ", ".join(
        f"QoS {f.qos} {1000 * f.seconds:,.0f} ms ({f.received:,} of {scale.connections:,} received)"
        for f in scale.fanouts
    )
    return [
        f"scale: {scale.connections:,} connections (keepalive {mqtt_scale.KEEPALIVE}, one subscription "
        "each): "
        f"connect {scale.connects_per_second:,.0f}/s ({scale.connect_seconds:.1f} s), "
        f"subscribe {scale.subscribe_seconds:.1f} s, RSS {scale.rss_before_kb / 1024:,.1f} -> "
        f"{scale.rss_after_kb / 1024:,.1f} MB, {scale.kb_per_connection:.1f} KB per connection",
        f"fan-out of one publication to all of them: {fanouts}",
    ]


def report(results: dict[str, Any]) -> str:
    load: Workload = results["workload"]
    lines = [
        f"MQTT {PROTOCOLS[load.protocol]}: {SUBSCRIBERS} subscribers on bench/#, "
        f"{load.publishers} publishers on bench/<n>/x, "
        f"256-byte payloads, {load.seconds:g} s of publishing per run, "
        f"window {load.window}, fastest of {load.repeat} runs (missing and dup: all runs; us/dlv: the "
        "server's CPU per delivery); "
        f"generator: {load.processes} publisher + {load.processes} subscriber processes; "
        f"machine: {results['machine']}",
        "",
    ]
    for server in results["servers"]:
        lines += [
            f"== {server['server']}",
            f"{'server':<26} {'QoS':>3} {'pubs/s':>10} {'deliveries/s':>13} {'missing':>8} {'dup':>6} "
            f"{'us/dlv':>8} {'gen us/pub':>9} {'gen us/dlv':>9} {'gen cores':>9}",
            *map(_throughput_line, server["throughput"]),
            *_shared_lines(server["shared"], load),
            _latency_line("before the floods", server["latency"]),
            _latency_line("after the floods", server["latency_after"]),
            FLOOD_HEADER,
            *map(_flood_line, server["floods"]),
        ]
        quiet: Idle = server["idle"]
        lines += [
            f"idle: {quiet.connections:,} connections (keepalive {IDLE_KEEPALIVE}): RSS "
            f"{quiet.rss_before_kb / 1024:,.1f} -> {quiet.rss_after_kb / 1024:,.1f} MB, "
            f"{quiet.kb_per_connection:.1f} KB per connection",
            *(_scale_lines(server["scale"]) if server["scale"] is not None else []),
            *_connect_flood_lines(server["connect_flood"]),
            *_churn_lines(server["churn"]),
            "",
        ]
    anchor, *targets = results["servers"]
    for target in targets:
        lines += [f"ratio {target['server']} / {anchor['server']}:", *_ratios(anchor, target), ""]
    lines.append(
        "generator headroom: QoS 0 against Mosquitto, by generator processes (publishers + subscribers)"
    )
    for processes, row in results["headroom"].items():
        lines.append(f"{processes} + {processes} processes: " + _throughput_line([row]))
    if results["cluster"]["runs"]:
        from broker.bench import mqtt_cluster

        lines += ["", *mqtt_cluster.lines(results["cluster"]["runs"], results["cluster"]["anchor"])]
    return "\n".join(lines)


# --- command line -------------------------------------------------------------------------------

QUICK = Workload(
    seconds=0.5,
    publishers=2,
    processes=2,
    rate=200,
    latency_seconds=1.0,
    idle=50,
    idle_seconds=2.0,
    repeat=1,
    connections=100,
    floods=mqtt_flood.QUICK_LOADS,
    connect_flood_seconds=0.5,
    churn=500,
    shared=4,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=2.0, help="publishing time of each throughput run")
    parser.add_argument("--publishers", type=positive, default=4, help="publisher connections")
    parser.add_argument(
        "--processes", type=positive, default=2, help="publisher processes (and subscriber ones)"
    )
    parser.add_argument("--window", type=positive, default=100, help="unacknowledged QoS 1/2 PUBLISHes each")
    parser.add_argument("--rate", type=positive, default=1_000, help="publications/s of the latency run")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="length of the latency run")
    parser.add_argument("--idle", type=positive, default=2_000, help="idle connections for the memory figure")
    parser.add_argument(
        "--repeat", type=positive, default=3, help="throughput runs per QoS (all shown, the fastest compared)"
    )
    parser.add_argument("--no-floods", action="store_true", help="leave out the publication floods")
    parser.add_argument(
        "--connect-flood-seconds",
        type=float,
        default=mqtt_churn.PROBE_SECONDS,
        metavar="S",
        help="a new client's waits, alone and beside a CONNECT flood, for S seconds each (0: not run)",
    )
    parser.add_argument(
        "--churn",
        type=int,
        default=100_000,
        metavar="N",
        help="clients that connect, subscribe, publish and leave, for the churn memory figure (0: none)",
    )
    parser.add_argument(
        "--databases",
        type=database_list,
        default=DATABASES,
        metavar="KIND,...",
        help="sqlite, postgresql or both (default both)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=0,
        metavar="N",
        help="also N clients with one subscription each: connect rate, memory, one fan-out (0: not run)",
    )
    parser.add_argument(
        "--mqtt-processes",
        type=process_counts,
        default=(1,),
        metavar="N,...",
        help="measure the broker with each of these MQTT listener process counts (default 1)",
    )
    parser.add_argument(
        "--nodes",
        type=process_counts,
        default=(),
        metavar="N,...",
        help="also an MQTT cluster of each of these node counts on PostgreSQL: QoS 1 throughput, "
        "CPU per delivery, connect rate, failover after SIGKILL (default: none)",
    )
    parser.add_argument(
        "--shared",
        type=int,
        default=10,
        metavar="N",
        help="subscribers in a shared subscription's group, at QoS 0 and 1 (0: not run)",
    )
    parser.add_argument(
        "--protocol",
        choices=sorted(LEVELS),
        default="3.1.1",
        help="the MQTT version every client speaks (default 3.1.1)",
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, metavar="URL")
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks the harness, not the speed")
    parser.add_argument("--json", action="store_true", help="print JSON")
    # Mosquitto as the target too: checks the harness against itself (the ratios should be ~1).
    parser.add_argument("--target", choices=("broker", "mosquitto"), default="broker", help=argparse.SUPPRESS)


def process_counts(text: str) -> tuple[int, ...]:
    counts = tuple(positive(part) for part in text.split(","))
    return tuple(dict.fromkeys(counts))


def command(args: argparse.Namespace) -> None:
    if shutil.which(MOSQUITTO) is None:
        raise SystemExit(f"{MOSQUITTO} not found: the benchmark's anchor is Debian's mosquitto package")
    load = (
        replace(QUICK, nodes=args.nodes, protocol=LEVELS[args.protocol])
        if args.quick
        else Workload(
            args.seconds,
            args.publishers,
            args.processes,
            args.window,
            args.rate,
            args.latency_seconds,
            args.idle,
            repeat=args.repeat,
            connections=args.connections,
            mqtt_processes=args.mqtt_processes,
            nodes=args.nodes,
            floods=() if args.no_floods else mqtt_flood.LOADS,
            connect_flood_seconds=args.connect_flood_seconds,
            churn=args.churn,
            protocol=LEVELS[args.protocol],
            shared=args.shared,
        )
    )
    results = run(load, args.databases, pg_url=args.pg_url, target=args.target)
    emit(args, _json(results), report(results))


def _json(results: dict[str, Any]) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if hasattr(value, "__dataclass_fields__"):
            return asdict(value)
        return value

    return plain(results)
