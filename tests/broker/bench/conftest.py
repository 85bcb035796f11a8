"""What the benchmark smoke tests share."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``broker bench`` sends the root logger to its own file: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
