"""A WebSphere MQ-compatible publish/subscribe broker over SQL queues.

The folders follow a command through the broker; ``docs/architecture.md`` has them bottom to
top, in the order of ``tests/test_layers.py``: a package imports only from the ones below it.
Nothing is imported here, so ``broker --help`` loads no more than it needs.
"""
