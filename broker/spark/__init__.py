"""The Spark pipeline: drain a stream queue's backlog on Apache Spark with the
service's routing core, and the service's exact results.

A shell around :func:`broker.core.engine.route`, like the routing service: nothing
here re-implements routing, authority or matching. The modules follow the data:

* ``lease``: the lease on a stream queue that keeps a routing service and a job
  from both routing it;
* ``snapshot``: the state every task routes against, broadcast once;
* ``plan``: the backlog cut into partitions of whole service batches, in get order;
* ``partition``: one partition's rows routed into message rows (pure);
* ``commit``: a partition's turn, the one transaction that makes its results
  visible and consumes its backlog;
* ``runs``: every SQL statement of the pipeline's bookkeeping (``schema``);
* ``task``: the executor side, a task that routes and commits one partition;
* ``job``: the driver that runs them in order.

Only ``job`` and ``task`` need PySpark, and import it where they use it, so the
service can use ``lease`` without it.
"""
