"""Access-control rules and groups, as operators define them (CLI and admin API).

Every change is logged (``broker.store.changes``), so each router reloads its
:class:`~broker.core.authority.Authority` within one batch.
"""

from __future__ import annotations

from sqlalchemy import Connection, Delete, Insert, delete, insert, select, update

from broker.core.authority import AclRule
from broker.store.changes import ACL, ACL_KEY, log_changes
from broker.store.rows import acl_from_row
from broker.store.schema import acl_rules, group_members
from queues.ids import now_ms
from queues.sql import insert_new


def list_acl_rules(conn: Connection) -> list[AclRule]:
    return [acl_from_row(row) for row in conn.execute(select(acl_rules).order_by(acl_rules.c.id))]


def add_acl_rule(conn: Connection, rule: AclRule) -> AclRule:
    result = conn.execute(
        insert(acl_rules).values(
            principal=rule.principal,
            kind=str(rule.kind),
            pattern=rule.pattern,
            permission=str(rule.permission),
            allow=int(rule.allow),
            created_at=now_ms(),
        )
    )
    log_changes(conn, [(ACL, ACL_KEY)])
    rule_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
    return AclRule(rule.principal, rule.kind, rule.pattern, rule.permission, rule.allow, rule_id)


def update_acl_rule(conn: Connection, rule_id: int, rule: AclRule) -> bool:
    values = {
        "principal": rule.principal,
        "kind": str(rule.kind),
        "pattern": rule.pattern,
        "permission": str(rule.permission),
        "allow": int(rule.allow),
    }
    if not conn.execute(update(acl_rules).where(acl_rules.c.id == rule_id).values(**values)).rowcount:
        return False
    log_changes(conn, [(ACL, ACL_KEY)])
    return True


def remove_acl_rule(conn: Connection, rule_id: int) -> bool:
    if not conn.execute(delete(acl_rules).where(acl_rules.c.id == rule_id)).rowcount:
        return False
    log_changes(conn, [(ACL, ACL_KEY)])
    return True


def list_groups(conn: Connection) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for row in conn.execute(
        select(group_members).order_by(group_members.c.group_name, group_members.c.user_id)
    ):
        groups.setdefault(row.group_name, []).append(row.user_id)
    return groups


def set_group_member(conn: Connection, group: str, user: str, member: bool) -> bool:
    """Add (member=True) or remove a user; returns whether anything changed.

    One statement each way, so that two administrators doing the same at once both succeed
    (PostgreSQL: the second insert finds the first's row, the second delete waits for the first)
    instead of racing a read against a write."""
    table = group_members
    stmt: Insert | Delete
    if member:
        stmt = insert_new(conn, table, ("group_name", "user_id")).values(group_name=group, user_id=user)
    else:
        stmt = delete(table).where(table.c.group_name == group, table.c.user_id == user)
    if conn.execute(stmt.returning(table.c.user_id)).first() is None:
        return False
    log_changes(conn, [(ACL, ACL_KEY)])
    return True


def rule_json(rule: AclRule) -> dict[str, object]:
    return {
        "id": rule.rule_id,
        "principal": rule.principal,
        "kind": str(rule.kind),
        "topic": rule.pattern,
        "permission": str(rule.permission),
        "allow": rule.allow,
    }
