"""ACL rules, groups and the dry run over HTTP."""

from __future__ import annotations

from broker import store
from tests.admin_api.conftest import Api, assert_problem

RULES = "/api/v1/acl/rules"


def add(api: Api, **rule: object) -> dict[str, object]:
    response = api.post(RULES, json=rule)
    assert response.status_code == 201, response.text
    return response.json()


def check(api: Api, user: str, permission: str, topic: str) -> dict[str, object]:
    response = api.get(
        "/api/v1/acl/check", "viewer", params={"user": user, "permission": permission, "topic": topic}
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_add_change_list_and_remove_rules(api: Api) -> None:
    rule = add(api, principal="alice", topic="Sport/Tennis", permission="publish", allow=False)
    assert rule == {
        "id": rule["id"],
        "principal": "alice",
        "kind": "user",
        "topic": "Sport/Tennis",
        "permission": "publish",
        "allow": False,
    }
    group_rule = add(
        api, principal="traders", kind="group", topic="Prices/#", permission="subscribe", allow=True
    )
    with_id = api.request("PUT", f"{RULES}/{rule['id']}", json={**rule, "allow": True})
    assert_problem(with_id, 422)  # "id" is not a field of a rule body
    body = {k: v for k, v in rule.items() if k != "id"} | {"allow": True}
    assert api.request("PUT", f"{RULES}/{rule['id']}", json=body).json() == {**rule, "allow": True}

    listing = api.get(RULES, "viewer").json()
    assert (listing["total"], [r["id"] for r in listing["items"]]) == (2, [rule["id"], group_rule["id"]])
    assert [r["id"] for r in api.get(RULES, params={"offset": 1}).json()["items"]] == [group_rule["id"]]

    assert api.delete(f"{RULES}/{rule['id']}").status_code == 204
    with api.qm.reading() as conn:
        assert [r.rule_id for r in store.list_acl_rules(conn)] == [group_rule["id"]]
    assert_problem(api.delete(f"{RULES}/{rule['id']}"), 404)
    assert_problem(api.request("PUT", f"{RULES}/{rule['id']}", json=body), 404)


def test_invalid_rules_are_422(api: Api) -> None:
    for rule in (
        {"principal": "alice", "topic": "", "permission": "publish", "allow": True},
        {"principal": "alice", "topic": "a", "permission": "read", "allow": True},
        {"principal": "al ice", "topic": "a", "permission": "publish", "allow": True},
        {"principal": "alice", "kind": "role", "topic": "a", "permission": "publish", "allow": True},
        {"principal": "alice", "topic": "a", "permission": "publish"},
        {"principal": "thirteen_char", "topic": "a", "permission": "publish", "allow": False},
        {
            "principal": "thirteen_char",
            "kind": "group",
            "topic": "a",
            "permission": "publish",
            "allow": False,
        },
    ):
        assert_problem(api.post(RULES, json=rule), 422)
    assert api.get(RULES).json()["total"] == 0
    rule = add(api, principal="twelve_chars", topic="a", permission="publish", allow=False)
    changed = {"principal": "thirteen_char", "topic": "a", "permission": "publish", "allow": False}
    assert_problem(api.request("PUT", f"{RULES}/{rule['id']}", json=changed), 422)
    for group, user in (("thirteen_char", "bob"), ("traders", "thirteen_char")):
        assert_problem(api.request("PUT", f"/api/v1/acl/groups/{group}/members/{user}"), 422)
    assert api.get("/api/v1/acl/groups").json() == {"groups": {}}


def test_a_removed_rule_id_is_never_given_again(api: Api) -> None:
    """The audit log names rules by id: a new rule must not take a removed rule's."""
    first = add(api, principal="alice", topic="a", permission="publish", allow=False)
    last = add(api, principal="bob", topic="b", permission="publish", allow=False)
    assert api.delete(f"{RULES}/{last['id']}").status_code == 204
    again = add(api, principal="carol", topic="c", permission="publish", allow=False)
    assert (first["id"], last["id"], again["id"]) == (1, 2, 3)


def test_dry_run_names_the_deciding_rule_or_the_default_policy(api: Api) -> None:
    deny = add(api, principal="alice", topic="Sport/Tennis", permission="publish", allow=False)
    assert check(api, "alice", "publish", "Sport/Tennis/Final") == {
        "user": "alice",
        "permission": "publish",
        "topic": "Sport/Tennis/Final",
        "allowed": False,
        "rule": deny,
        "decided_by": f"rule #{deny['id']}",
        "default_policy": "allow",
    }
    default = check(api, "alice", "publish", "Sport/Soccer")
    assert (default["allowed"], default["rule"], default["decided_by"]) == (
        True,
        None,
        "the default policy (allow)",
    )
    wildcard = api.get("/api/v1/acl/check", params={"user": "a", "permission": "publish", "topic": "Sport/#"})
    assert (wildcard.status_code, wildcard.json()["allowed"], wildcard.json()["decided_by"]) == (
        200,
        False,
        "the topic: a publication topic has no wildcard level",
    )


def test_groups_take_part_in_decisions(api: Api) -> None:
    add(api, principal="traders", kind="group", topic="Prices", permission="subscribe", allow=False)
    membership = api.request("PUT", "/api/v1/acl/groups/traders/members/bob")
    assert membership.json() == {"group": "traders", "user": "bob", "member": True, "changed": True}
    assert api.request("PUT", "/api/v1/acl/groups/traders/members/bob").json()["changed"] is False
    assert api.get("/api/v1/acl/groups", "viewer").json() == {"groups": {"traders": ["bob"]}}
    assert check(api, "bob", "subscribe", "Prices/#")["allowed"] is False
    assert api.delete("/api/v1/acl/groups/traders/members/bob").status_code == 204
    assert check(api, "bob", "subscribe", "Prices/#")["allowed"] is True
    assert_problem(api.delete("/api/v1/acl/groups/traders/members/bob"), 404)
    assert api.get("/api/v1/acl/groups").json() == {"groups": {}}
