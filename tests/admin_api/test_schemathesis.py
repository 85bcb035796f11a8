"""schemathesis against the API's own OpenAPI document: no 5xx, and every response matches its schema.

Every operation gets a bounded number of generated requests, valid and invalid
(schemathesis's positive and negative modes), sent with an admin token while a
router serves (subscription commands need one); the document is read from the
running app, so it cannot drift from what is tested. Three operations are
left out: revoking tokens (a generated id could be the test's own token; the
authorisation matrix covers that route) and the two network operations that
connect to the URLs and neighbours they are given.

Two of schemathesis's checks are about something else than this contract and are
left out: "schema-valid data is accepted" (the queue manager and the broker refuse
valid-looking requests with 422, a subscription to a queue that does not exist
say) and "schema-violating data is refused" (its negative generator takes some
valid query strings, which carry no type, for invalid ones). Invalid requests are
still sent, and must still get a documented 4xx and never a 5xx.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.admin_api.conftest import Api
from tests.e2e.harness import ServiceThread

EXAMPLES = 15
EXCLUDED_CHECKS: list[schemathesis.CheckFunction] = [positive_data_acceptance, negative_data_rejection]
SKIPPED = {
    ("DELETE", "/api/v1/tokens/{token_id}"),  # could revoke the test's own token
    ("POST", "/api/v1/neighbours"),  # connects to the URL it is given
    ("GET", "/api/v1/channel/reachable"),  # connects to the neighbours
}


def test_the_api_keeps_its_own_contract(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    schema = schemathesis.openapi.from_asgi("/openapi.json", api.app)
    tested = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        if (operation.method.upper(), operation.path) in SKIPPED:
            continue
        cases = st.one_of(
            operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
            operation.as_strategy(schemathesis.GenerationMode.NEGATIVE),
        )

        @given(case=cases)
        @settings(
            max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def conforms(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=api.auth("admin"), excluded_checks=EXCLUDED_CHECKS)

        conforms()
        tested.append(operation.label)
    documented = sum(len(item) for item in api.app.openapi()["paths"].values())
    assert len(tested) == documented - len(SKIPPED)
