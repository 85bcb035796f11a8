"""broker.service.event_loop: the ``event_loop`` setting names the loop, and asyncio's own serves
where uvloop is missing."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest
import uvloop

from broker.service.event_loop import loop_factory, uvicorn_loop


def _loop_of(name: str) -> asyncio.AbstractEventLoop:
    loop = loop_factory(name)()
    loop.close()
    return loop


def test_the_setting_names_the_loop() -> None:
    assert isinstance(_loop_of("uvloop"), uvloop.Loop)
    assert not isinstance(_loop_of("asyncio"), uvloop.Loop)
    assert (uvicorn_loop("uvloop"), uvicorn_loop("asyncio")) == ("uvloop", "asyncio")


def test_without_uvloop_asyncio_serves_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with caplog.at_level(logging.WARNING, logger="broker.service"):
        loop = _loop_of("uvloop")
    assert not isinstance(loop, uvloop.Loop)
    assert "uvloop is not installed" in caplog.text
    assert uvicorn_loop("uvloop") == "asyncio"
