"""The security page (both dialects): ACL rules and groups, read by every role and changed by
admins, and the effective permission check, which answers as ``GET /api/v1/acl/check`` and
``broker acl check`` do."""

from __future__ import annotations

import pytest

from broker import store
from tests.admin_api.console.conftest import Console


def test_admins_add_and_remove_rules_and_members(console: Console) -> None:
    console.sign_in("admin")
    added = console.post(
        "/console/security/rules",
        principal="alice",
        kind="user",
        topic="Sport/#",
        permission="publish",
        allow="deny",
    )
    assert "Rule 1 added" in added.text
    assert (
        "Refused" in console.post("/console/security/rules", principal="alice", topic="", permission="x").text
    )
    for refused in (
        console.post("/console/security/rules", principal="thirteen_char", topic="a", permission="publish"),
        console.post("/console/security/members", group="thirteen_char", user="alice"),
    ):
        assert "principal &#39;thirteen_char&#39; must be 1 to 12 printable ASCII characters" in refused.text
    console.post("/console/security/members", group="traders", user="alice")
    with console.api.qm.reading() as conn:
        rules = store.list_acl_rules(conn)
        assert store.list_groups(conn) == {"traders": ["alice"]}
    assert [(r.principal, r.pattern, str(r.permission), r.allow) for r in rules] == [
        ("alice", "Sport/#", "publish", False)
    ]
    page = console.get("/console/security").text
    assert "<td>Sport/#</td><td>publish</td><td>deny</td>" in page
    console.post("/console/security/members/delete", group="traders", user="alice")
    assert "Rule 1 removed" in console.post("/console/security/rules/1/delete").text
    with console.api.qm.reading() as conn:
        assert (store.list_acl_rules(conn), store.list_groups(conn)) == ([], {})


def test_an_operator_reads_rules_but_may_not_change_them(console: Console) -> None:
    assert "No rules" in console.get("/console/security").text
    refused = console.post("/console/security/members", group="traders", user="alice")
    assert refused.status_code == 403 and "needs the admin role" in refused.text


def check(console: Console, user: str, permission: str, topic: str) -> str:
    page = console.get("/console/security", params={"user": user, "permission": permission, "topic": topic})
    assert page.status_code == 200, page.text
    return page.text


def api_check(console: Console, user: str, permission: str, topic: str) -> dict[str, object]:
    answer: dict[str, object] = console.api.get(
        "/api/v1/acl/check", "viewer", params={"user": user, "permission": permission, "topic": topic}
    ).json()
    return answer


def test_the_check_names_the_deciding_rule_as_the_api_does(console: Console) -> None:
    console.sign_in("admin")
    console.post(
        "/console/security/rules",
        principal="traders",
        kind="group",
        topic="Sport",
        permission="publish",
        allow="allow",
    )
    console.post(
        "/console/security/rules", principal="alice", topic="Sport/Tennis", permission="publish", allow="deny"
    )
    console.post("/console/security/members", group="traders", user="alice")
    console.post("/console/security/members", group="traders", user="bob")
    console.sign_in("viewer")  # every role runs the check
    denied = check(console, "alice", "publish", "Sport/Tennis/Final")
    assert api_check(console, "alice", "publish", "Sport/Tennis/Final")["decided_by"] == "rule #2"
    assert (
        'data-allowed="false">alice <strong>may not</strong> publish on Sport/Tennis/Final: '
        "decided by rule #2" in denied
    )
    assert "(deny publish on Sport/Tennis for user alice)" in denied
    assert '<tr data-rule="2" class="decided"><td>2 (decides)</td>' in denied
    assert 'value="alice"' in denied and 'value="Sport/Tennis/Final"' in denied  # the form keeps the question
    allowed = check(console, "bob", "publish", "Sport/Tennis/Final")
    assert (
        'data-allowed="true">bob <strong>may</strong> publish on Sport/Tennis/Final: decided by rule #1'
        in allowed
    )
    assert "(allow publish on Sport for group traders)" in allowed
    nobody = check(console, "carol", "subscribe", "Sport/#")  # the tests' policy allows what no rule denies
    assert api_check(console, "carol", "subscribe", "Sport/#")["decided_by"] == "the default policy (allow)"
    assert "carol <strong>may</strong> subscribe to Sport/#: decided by the default policy (allow)" in nobody
    assert 'class="decided"' not in nobody
    assert "<td>traders</td>" in nobody and ">alice<" in nobody and ">bob<" in nobody  # the groups


def test_a_wildcard_publication_is_answered_by_the_topic(console: Console) -> None:
    wildcard = check(console, "alice", "publish", "Sport/#")
    assert (
        "alice <strong>may not</strong> publish on Sport/#: decided by the topic: a publication topic "
        "has no wildcard level" in wildcard
    )


def test_no_question_no_answer(console: Console) -> None:
    page = console.get("/console/security", params={"user": "alice", "topic": ""}).text
    assert 'id="verdict"' not in page


@pytest.mark.parametrize(
    "params",
    [
        {"user": "with blank", "topic": "Sport"},
        {"user": "a" * 65, "topic": "Sport"},
        {"user": "alice", "topic": "Sport\x00"},
        {"user": "alice", "topic": "Sport", "permission": "delete"},
    ],
)
def test_a_question_edited_by_hand_is_a_400_page(console: Console, params: dict[str, str]) -> None:
    answer = console.get("/console/security", params=params)
    assert answer.status_code == 400 and "Not a console address" in answer.text
