"""The broker's admin REST API (FastAPI): ``create_app(qm, settings)`` and serve it with uvicorn.

``create_app`` is loaded on first use, so that importing the package loads no FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from admin_api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name != "create_app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from admin_api.app import create_app

    return create_app
