"""Every table this product keeps, for Alembic's comparisons and autogenerate."""

from __future__ import annotations

from broker.network.schema import metadata as network_metadata
from broker.schema import metadata as broker_metadata
from broker.spark.schema import metadata as spark_metadata
from queues.schema import metadata as queue_metadata

target_metadata = [queue_metadata, broker_metadata, network_metadata, spark_metadata]
