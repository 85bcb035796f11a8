"""A WebSphere MQ-compatible publish/subscribe broker over SQL queues.

The folders follow a command through the broker (``docs/architecture.md``):

* ``broker.protocol``: wire formats, pure (MQRFH2, ``<psc>``, ``<pscr>``, options,
  ``<brokerpath>``): bytes in, typed commands out, and back.
* ``broker.core``: routing decisions, pure: authority, topic matching, subscriptions,
  retained publications, the engine (command + state -> effects), what goes to neighbours.
* ``broker.store``: the broker's state in SQL, shared by every shell.
* ``broker.network``: channels to neighbouring brokers.
* ``broker.service``: the running broker: routing loop, router pool, settings, logs, metrics.
* ``broker.spark``: backlogs routed on Apache Spark by the same core.
* ``broker.client``: what applications use; ``broker.cli`` and ``broker.bench`` on top.

A package imports only from the ones listed before it (``tests/test_layers.py``).
Nothing is imported here, so ``broker --help`` loads no more than it needs.
"""
