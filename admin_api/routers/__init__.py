"""One router per resource of the admin API."""

from __future__ import annotations
