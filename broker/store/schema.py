"""Tables of the broker's state, beside the queue manager's (``queues.schema``).

Subscriptions and retained publications are keyed by a hash of their key
(identity, subscription point, topic, filter), because topics may be 10,240
characters long and PostgreSQL cannot index values that large. Every change is
recorded in ``psb_changes`` under a version taken from ``psb_meta`` in the same
transaction: a broker process compares one number per batch and re-reads only
what changed, so a subscription made through the admin API or by a second
broker process reaches every router within one batch.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

from queues.schema import NAMING, Id, mqmd_columns

metadata = MetaData(naming_convention=NAMING)

TOPIC_HEAD = 200
# "C" collation on PostgreSQL so that a prefix is a contiguous range whatever the
# database's locale (SQLite's default collation is already bytewise).
TopicHead = String(TOPIC_HEAD).with_variant(String(TOPIC_HEAD, collation="C"), "postgresql")

meta = Table(
    "psb_meta",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("version", BigInteger, nullable=False),
)

changes = Table(
    "psb_changes",
    metadata,
    Column("version", BigInteger, primary_key=True, autoincrement=False),
    Column("entity", String(16), primary_key=True),  # subscription | retained | acl | neighbour
    Column("entity_key", LargeBinary(24), primary_key=True),
    Column("changed_at", BigInteger, nullable=False),
)

subscriptions = Table(
    "psb_subscriptions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("key_hash", LargeBinary(24), nullable=False, unique=True),
    Column("q_mgr", String(48), nullable=False),
    Column("queue", String(48), nullable=False),
    Column("correl_id", LargeBinary(24), nullable=True),
    Column("sub_point", Text, nullable=False),
    Column("topic", Text, nullable=False),
    # The topic's first TOPIC_HEAD characters, bytewise-ordered: what a topic-prefix listing
    # filters on with an index range (a 10,240-character topic cannot be indexed itself).
    Column("topic_head", TopicHead, nullable=False),
    Column("filter", Text, nullable=True),
    Column("user_id", String(12), nullable=False),
    Column("options", Integer, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("sub_name", Text, nullable=True),
    Column("sub_user_data", Text, nullable=True),
    Column("expires_at", BigInteger, nullable=True),
    Column("temporary", SmallInteger, nullable=False),
    Column("members", Text, nullable=False),  # JSON list of SubIdentity values
    Column("exclusive", Text, nullable=True),
    Column("origin", String(48), nullable=True),
)
# Listings page by id within a queue or a user (admin API keyset paging): one index range per page.
Index("ix_psb_subscriptions_queue_id", subscriptions.c.queue, subscriptions.c.id)
Index("ix_psb_subscriptions_user_id_id", subscriptions.c.user_id, subscriptions.c.id)
Index("ix_psb_subscriptions_topic_head_id", subscriptions.c.topic_head, subscriptions.c.id)

retained = Table(
    "psb_retained",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("key_hash", LargeBinary(24), nullable=False, unique=True),
    Column("sub_point", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("retained_at", BigInteger, nullable=False),
    *mqmd_columns(),
    Column("priority", SmallInteger, nullable=False),
    Column("body", LargeBinary, nullable=False),
)

acl_rules = Table(
    "psb_acl_rules",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("principal", String(64), nullable=False),
    Column("kind", String(8), nullable=False),  # user | group
    Column("pattern", Text, nullable=False),
    Column("permission", String(16), nullable=False),  # publish | subscribe
    Column("allow", SmallInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    sqlite_autoincrement=True,  # ids are never reused: the audit log names rules by id
)

group_members = Table(
    "psb_group_members",
    metadata,
    Column("group_name", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
)

instances = Table(
    "psb_instances",
    metadata,
    Column("instance", String(96), primary_key=True),  # host:pid:start
    Column("role", String(16), nullable=False),  # router | api
    Column("started_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    Column("stats", Text, nullable=False),  # JSON counters and the last errors
)

# The links to neighbouring brokers: routing needs their names (``broker.network`` runs them).
neighbours = Table(
    "psb_neighbours",
    metadata,
    Column("name", String(48), primary_key=True),  # the neighbour's queue manager name
    Column("url", Text, nullable=False),  # its admin API base URL (inbound channel endpoint)
    Column("token", Text, nullable=False),  # the link's shared secret, sent and expected
    Column("epoch", String(32), nullable=False),  # fixed when this side defined the link
    Column("next_batch", BigInteger, nullable=False),  # sender: the next batch number
    Column("received_batch", BigInteger, nullable=False),  # receiver: the last batch taken
    Column("received_epoch", String(32), nullable=True),  # receiver: the sender's epoch
    Column("synced", SmallInteger, nullable=False),  # proxies sent to it since it was linked
    Column("sender_owner", String(96), nullable=True),  # which broker process runs the channel
    Column("sender_lease_until", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("last_sent_at", BigInteger, nullable=True),
    Column("last_received_at", BigInteger, nullable=True),
    Column("last_error", Text, nullable=True),
)

# Who may route a stream queue, and until when (``broker.store.leases``).
leases = Table(
    "psb_leases",
    metadata,
    Column("resource", String(96), primary_key=True),  # e.g. stream:SYSTEM.BROKER.DEFAULT.STREAM
    Column("owner", String(96), nullable=False),  # "" when free
    Column("until", BigInteger, nullable=False),  # epoch ms; the lease lapses after it
)

# MQTT sessions (``broker.store.mqtt``). Client ids may be 65,535 bytes long: rows are keyed
# by a hash of the id, as subscriptions are by a hash of their key.
mqtt_sessions = Table(
    "psb_mqtt_sessions",
    metadata,
    Column("session_key", LargeBinary(16), primary_key=True),
    Column("client_id", Text, nullable=False),
    Column("queue", String(48), nullable=False, unique=True),  # where its subscriptions deliver
    Column("user_id", String(64), nullable=False),
    Column("clean", SmallInteger, nullable=False),
    Column("protocol_level", SmallInteger, nullable=False),
    Column("address", String(64), nullable=False),  # of the last connection
    Column("created_at", BigInteger, nullable=False),
    Column("connected_at", BigInteger, nullable=False),
    # not read: outbound messages are ordered by one counter (psb_mqtt_outbound_runs.seq)
    Column("next_seq", BigInteger, nullable=False),
    Column("online", SmallInteger, nullable=False),  # a client is connected to it
    # epoch ms its client went (0 while online): session expiry counts from it
    Column("offline_since", BigInteger, nullable=False, server_default="0"),
    Column("dropped", BigInteger, nullable=False, server_default="0"),  # over the queued-message limit
    # publications and subscriptions of its client refused by the broker's authority
    Column("refused", BigInteger, nullable=False, server_default="0"),
    # the listener process its client is connected to (queues.owners), while online
    Column("owner", String(96), nullable=False, server_default=""),
    # the will of its connected client (NULL topic: none), published by whoever ends the
    # connection or, if its node dies, by the node that releases the session
    Column("will_topic", Text),
    Column("will_payload", LargeBinary),
    Column("will_qos", SmallInteger, nullable=False, server_default="0"),
    Column("will_retain", SmallInteger, nullable=False, server_default="0"),
    # MQTT 5.0: the will's properties, as a CONNECT holds them (NULL: none), and, once its
    # client has gone, when the will is due if it waits (epoch ms; NULL: it does not wait)
    Column("will_properties", LargeBinary),
    Column("will_due", BigInteger),
    Column("keepalive", Integer, nullable=False, server_default="0"),  # seconds, of its last CONNECT
    # bytes its client sent and was sent on its current (or last) connection, as its listener
    # last wrote them (every few seconds)
    Column("bytes_in", BigInteger, nullable=False, server_default="0"),
    Column("bytes_out", BigInteger, nullable=False, server_default="0"),
    # deliveries in flight to it that its node holds in memory alone (a session that ends with
    # its connection stores none), written with the bytes
    Column("in_flight_held", Integer, nullable=False, server_default="0"),
    # MQTT 5.0: seconds it outlives its client's connection (0xFFFFFFFF: never); NULL: 3.1 or
    # 3.1.1, whose sessions the broker-wide mqtt_session_expiry governs
    Column("expiry", BigInteger),
    # MQTT 5.0: its client's Receive Maximum and Topic Alias Maximum (NULL: none given, or 3.1.x)
    Column("receive_maximum", Integer),
    Column("topic_alias_maximum", Integer),
)

Index("ix_psb_mqtt_sessions_will_due", mqtt_sessions.c.will_due)

# The MQTT listener processes of the cluster's nodes (``broker.store.nodes``), a row each: it
# counts up its beat; one whose beat stops is declared dead by another, which releases its
# sessions. Sessions and bridge leases name a member by its owner name.
mqtt_nodes = Table(
    "psb_mqtt_nodes",
    metadata,
    Column("owner", String(96), primary_key=True),  # queues.owners: unique to one start
    Column("node", String(96), nullable=False),  # the node's name (setting node_name)
    Column("address", String(256), nullable=False),  # its MQTT listeners, for people
    Column("started_at", BigInteger, nullable=False),
    Column("beat", BigInteger, nullable=False),  # heartbeats so far: others watch it change
    Column("heartbeat_at", BigInteger, nullable=False),  # epoch ms of the last, its own clock
    Column("clients", Integer, nullable=False),  # connected at its last heartbeat
    Column("dead_at", BigInteger, nullable=False, server_default="0"),  # declared dead; 0: alive
    Column("released", SmallInteger, nullable=False, server_default="0"),  # its sessions released
    # Its $SYS counters at its last heartbeat, a JSON object of name -> count (broker.core.sys_status).
    Column("counters", Text, nullable=False, server_default="{}"),
)

# Each MQTT subscription's granted QoS (the broker subscription itself is in psb_subscriptions).
mqtt_subscriptions = Table(
    "psb_mqtt_subscriptions",
    metadata,
    Column("session_key", LargeBinary(16), primary_key=True),
    Column("filter_key", LargeBinary(16), primary_key=True),
    Column("filter", Text, nullable=False),
    Column("qos", SmallInteger, nullable=False),  # MQTT 5.0: the options, without Retain Handling
    # MQTT 5.0: the SUBSCRIBE's Subscription Identifier, carried by its deliveries (0: none)
    Column("subscription_id", Integer, nullable=False, server_default="0"),
)

# Received QoS 2 message ids routed and awaiting PUBREL: exactly once across restarts.
mqtt_inbound = Table(
    "psb_mqtt_inbound",
    metadata,
    Column("session_key", LargeBinary(16), primary_key=True),
    Column("packet_id", Integer, primary_key=True, autoincrement=False),
)

# Outbound QoS 1/2 messages sent and not yet acknowledged for good, one row per run: the
# messages one routing batch sent one session, in their sending order (``broker.store.mqtt``
# packs them). A row per message cost a B-tree insertion per delivery and a deletion per
# acknowledgement, more than the rest of the delivery; a run is written once, its bitmaps
# rewritten as a batch's acknowledgements come in, and deleted with the last of them.
mqtt_outbound_runs = Table(
    "psb_mqtt_outbound_runs",
    metadata,
    Column("session_key", LargeBinary(16), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),  # sending order
    Column("messages", LargeBinary, nullable=False),
    Column("acked", LargeBinary, nullable=False),  # one bit per message: acknowledged for good
    Column("released", LargeBinary, nullable=False),  # one bit per message: PUBREC came
    Column("pending", Integer, nullable=False),  # messages not yet acknowledged for good
)

# MQTT principals' passwords, as salted scrypt hashes (``broker.store.mqtt.hash_password``).
mqtt_principals = Table(
    "psb_mqtt_principals",
    metadata,
    Column("user_id", String(64), primary_key=True),
    Column("password_hash", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

# What operators ask of the MQTT listeners (``broker.store.mqtt_requests``): disconnect a
# client, delete a session. Written by any process (the admin API, the CLI), taken by the
# listener that holds the client; a request nobody takes lapses.
mqtt_requests = Table(
    "psb_mqtt_requests",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("client_id", Text, nullable=False),
    Column("action", String(16), nullable=False),  # disconnect | delete
    Column("reason", String(128), nullable=False),  # logged by the listener
    Column("requested_at", BigInteger, nullable=False),
    # the listener process that is to carry it out (its holder when asked); "" for any
    Column("owner", String(96), nullable=False, server_default=""),
    sqlite_autoincrement=True,
)

# -- the Spark pipeline ---------------------------------------------------------------------
# ``psb_spark_runs`` records the job running on a stream; ``psb_spark_parts`` has a row for
# every partition it has committed, written in the partition's own transaction
# (``broker.spark.commit``), so that a second attempt of a partition writes nothing and
# partition ``k + 1`` knows when its turn has come. Nothing outside the pipeline reads them.
# On PostgreSQL ``psb_spark_runs`` is UNLOGGED (migration 0006): a crash ends the run anyway.
# The markers are logged (migration 0012): they stand beside the deliveries their transaction
# made.

spark_runs = Table(
    "psb_spark_runs",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("stream", String(48), nullable=False),
    Column("watermark", BigInteger, nullable=False),  # the backlog is the stream's rows with id <= it
    Column("partitions", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
)

# One row per committed partition, inserted first in the partition's transaction.
spark_parts = Table(
    "psb_spark_parts",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("part", Integer, primary_key=True),
    *(
        Column(name, BigInteger, nullable=False)
        for name in (
            "rows_read",  # backlog messages it consumed, expired ones included
            "messages",  # of which routed
            "deliveries",
            "replies",
            "forwards",
            "dead_letters",
            "queue_full",
            "written",  # messages put on all queues
            "route_us",
            "wait_us",
            "write_us",
        )
    ),
)

SPARK_RUN_TABLES = (spark_parts, spark_runs)
