"""Network and ACL pages: read by every role, rules and groups changed by admins (both dialects)."""

from __future__ import annotations

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


def test_the_network_page_lists_neighbours_and_proxy_subscriptions(console: Console) -> None:
    page = console.get("/console/network").text
    assert "No neighbours are defined" in page
    assert "No subscription matches" in page
