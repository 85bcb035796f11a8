"""The Spark pipeline: drain a stream queue's backlog on Apache Spark with the
service's routing core, and the service's exact results.

A shell around :func:`broker.engine.route`, like the routing service: nothing
here re-implements routing, authority or matching. The modules follow the data:

* ``lease``: the lease on a stream queue that keeps a routing service and a job
  from both routing it;
* ``snapshot``: the state every task routes against, broadcast once;
* ``partition``: one partition's rows routed and staged (runs in the executors);
* ``staging``: every SQL statement on the staging tables (``schema``);
* ``merge``: the final merge, one transaction that makes the result visible;
* ``job``: the driver that runs them in order.

Only ``job`` and ``partition`` need PySpark, and import it where they use it, so
the service can use ``lease`` without it.
"""
