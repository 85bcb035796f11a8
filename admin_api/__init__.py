"""The broker's admin REST API (FastAPI): ``create_app(qm, settings)`` and serve it with uvicorn."""

from __future__ import annotations

from admin_api.app import create_app

__all__ = ["create_app"]
