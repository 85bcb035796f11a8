"""broker.store.acl: rules and groups, each change logged so that routers rebuild their authority."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Connection, Engine

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from tests.broker.store.records import (
    version,
)
from tests.overlap import overlapping


def test_acl_rules_add_update_remove(engine: Engine) -> None:
    with engine.begin() as conn:
        first = store.add_acl_rule(
            conn, AclRule("bob", PrincipalKind.USER, "Sport/#", Permission.PUBLISH, True)
        )
        second = store.add_acl_rule(
            conn, AclRule("ops", PrincipalKind.GROUP, "News", Permission.SUBSCRIBE, False)
        )
    assert first.rule_id is not None and second.rule_id == first.rule_id + 1
    assert version(engine) == 2
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [first, second]

    changed = AclRule("bob", PrincipalKind.USER, "Sport/Tennis", Permission.SUBSCRIBE, False)
    with engine.begin() as conn:
        assert store.update_acl_rule(conn, first.rule_id, changed)
        assert not store.update_acl_rule(conn, 9999, changed)
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [replace(changed, rule_id=first.rule_id), second]
    assert version(engine) == 3

    with engine.begin() as conn:
        assert store.remove_acl_rule(conn, second.rule_id or 0)
        assert not store.remove_acl_rule(conn, second.rule_id or 0)
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [replace(changed, rule_id=first.rule_id)]
    assert version(engine) == 4


def test_groups(engine: Engine) -> None:
    with engine.begin() as conn:
        assert store.set_group_member(conn, "traders", "bob", True)
        assert store.set_group_member(conn, "traders", "alice", True)
        assert store.set_group_member(conn, "mqm", "root", True)
        assert not store.set_group_member(conn, "traders", "bob", True)
        assert not store.set_group_member(conn, "traders", "zed", False)
    assert version(engine) == 3  # no-op changes take no version
    with engine.connect() as conn:
        assert store.list_groups(conn) == {"mqm": ["root"], "traders": ["alice", "bob"]}
        authority = store.load_authority(conn, default_allow=False, admin_group="traders")
    assert authority.is_admin("bob")
    assert not authority.is_admin("root")
    assert not authority.decide("bob", Permission.PUBLISH, "x").allowed
    with engine.begin() as conn:
        assert store.set_group_member(conn, "traders", "bob", False)
        assert store.list_groups(conn) == {"mqm": ["root"], "traders": ["alice"]}


def test_concurrent_group_changes_both_succeed(engine: Engine) -> None:
    def add(conn: Connection) -> bool:
        return store.set_group_member(conn, "traders", "bob", True)

    def remove(conn: Connection) -> bool:
        return store.set_group_member(conn, "traders", "bob", False)

    assert overlapping(engine, add, add) == (True, False)
    assert overlapping(engine, remove, remove) == (True, False)
    with engine.connect() as conn:
        assert store.list_groups(conn) == {}
