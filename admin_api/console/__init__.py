"""The web console: the broker seen in a browser, served by the admin API at ``/console/``.

Server-rendered pages (Jinja2) over the same handlers, roles and audit log as the
``/api/v1`` endpoints: a console change calls the API's own handler function with the
signed-in token. Its routes are left out of the OpenAPI document, which stays the API's.
"""

from __future__ import annotations

from admin_api.console.app import install

__all__ = ["install"]
