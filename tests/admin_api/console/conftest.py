"""A signed-in console session over the admin API's ``api`` fixture."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from admin_api.console.sessions import csrf_token
from tests.admin_api.conftest import Api


@dataclass
class Console:
    api: Api
    role: str

    def sign_in(self, role: str) -> Console:
        response = self.api.client.post("/console/signin", data={"token": self.api.secrets[role]})
        assert response.status_code == 200, response.text
        self.role = role
        return self

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.api.client.get(path, **kwargs)

    def post(self, path: str, **fields: Any) -> httpx.Response:
        """A form POST with the session's CSRF token, followed to the page it leads back to."""
        data = {"csrf": csrf_token(self.api.secrets[self.role]), **fields}
        return self.api.client.post(path, data=data)


@pytest.fixture
def console(api: Api) -> Console:
    return Console(api, "operator").sign_in("operator")
