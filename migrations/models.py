"""Every table this product keeps, for Alembic's comparisons and autogenerate.

Each package keeps its tables in a ``schema`` module that imports nothing but SQLAlchemy
and ``queues.schema``, so reading them here loads no other code of the package.
"""

from __future__ import annotations

from broker.admin.schema import metadata as admin_metadata
from broker.network.schema import metadata as network_metadata
from broker.store.schema import metadata as broker_metadata
from queues.schema import metadata as queue_metadata

target_metadata = [queue_metadata, broker_metadata, network_metadata, admin_metadata]
