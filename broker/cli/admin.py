"""``broker subscriptions/retained/acl/group``: the broker's state, administered.

These read and change the state tables directly (through ``broker.store``, the
same functions the admin API uses); a running broker picks the changes up at
its next batch.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from broker.cli.context import EXIT_MQ_ERROR, Context
from queues.errors import MQError
from queues.reasons import Reason

if TYPE_CHECKING:
    from broker.core.authority import AclRule

PERMISSIONS = ("publish", "subscribe")  # broker.core.authority.Permission, without loading it


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subs = commands.add_parser("subscriptions", help="list the broker's subscriptions")
    sub = subs.add_subparsers(dest="subscriptions_command", required=True, metavar="COMMAND")
    listing = sub.add_parser("list", help="subscriptions, filtered and paged")
    listing.add_argument("--topic", help="MQ pattern the subscription topic must match")
    listing.add_argument("--queue")
    listing.add_argument("--qmgr", dest="subscriber_qmgr", help="subscriber queue manager")
    listing.add_argument("--user")
    listing.add_argument("--sub-point")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--after", type=int, default=0, help="id of the last row of the previous page")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_subscriptions)

    ret = commands.add_parser("retained", help="list retained publications")
    rsub = ret.add_subparsers(dest="retained_command", required=True, metavar="COMMAND")
    rlist = rsub.add_parser("list", help="retained publications matching a topic pattern")
    rlist.add_argument("--topic", default="#", help="MQ topic pattern (default #)")
    rlist.add_argument("--sub-point")
    rlist.add_argument("--limit", type=int, default=100)
    rlist.add_argument("--after", type=int, default=0)
    rlist.add_argument("--json", action="store_true")
    rlist.set_defaults(handler=list_retained)

    acl = commands.add_parser("acl", help="who may publish and subscribe where")
    asub = acl.add_subparsers(dest="acl_command", required=True, metavar="COMMAND")
    add = asub.add_parser("add", help="add a rule")
    add.add_argument("--principal", required=True, help="user id, or group name with --group")
    add.add_argument("--group", action="store_true", help="the principal is a group")
    add.add_argument("--topic", required=True, help="topic (its whole subtree) or #/+ pattern")
    add.add_argument("--permission", required=True, choices=PERMISSIONS)
    decision = add.add_mutually_exclusive_group(required=True)
    decision.add_argument("--allow", action="store_true")
    decision.add_argument("--deny", action="store_true")
    add.add_argument("--json", action="store_true")
    add.set_defaults(handler=add_rule)
    alist = asub.add_parser("list", help="every rule and group")
    alist.add_argument("--json", action="store_true")
    alist.set_defaults(handler=list_rules)
    remove = asub.add_parser("remove", help="remove a rule by id")
    remove.add_argument("rule_id", type=int)
    remove.add_argument("--json", action="store_true")
    remove.set_defaults(handler=remove_rule)
    check = asub.add_parser(
        "check", help="dry run: may USER publish/subscribe on TOPIC, and which rule decides"
    )
    check.add_argument("user")
    check.add_argument("permission", choices=PERMISSIONS)
    check.add_argument("topic")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=check_rule)

    group = commands.add_parser("group", help="group membership for ACL rules")
    gsub = group.add_subparsers(dest="group_command", required=True, metavar="COMMAND")
    for name, member in (("add", True), ("remove", False)):
        cmd = gsub.add_parser(name, help=f"{name} a user {'to' if member else 'from'} a group")
        cmd.add_argument("group")
        cmd.add_argument("user")
        cmd.add_argument("--json", action="store_true")
        cmd.set_defaults(handler=change_group, member=member)


def list_subscriptions(ctx: Context) -> None:
    from broker import store
    from broker.protocol.options import RegOpt, option_names
    from broker.store.listings import subscription_json

    a = ctx.args
    where = store.SubscriptionFilter(
        topic=a.topic, sub_point=a.sub_point, queue=a.queue, q_mgr=a.subscriber_qmgr, user_id=a.user
    )
    with ctx.qm.reading() as conn:
        page = store.list_subscriptions(conn, where, after_id=a.after, limit=a.limit)
    rows = [subscription_json(i, s) for i, s in page]
    text = [f"{'ID':>8}  {'TOPIC':<40} {'QUEUE':<30} {'USER':<12} OPTIONS"]
    for i, s in page:
        options = ",".join(option_names(RegOpt(s.options)))
        text.append(f"{i:>8}  {s.key.topic:<40} {s.identity.queue:<30} {s.user_id:<12} {options}")
    ctx.emit(rows, "\n".join(text))


def list_retained(ctx: Context) -> None:
    from broker import store
    from broker.protocol.messages import decode_publication
    from queues.formatting import body_text

    a = ctx.args
    with ctx.qm.reading() as conn:
        page = store.list_retained(conn, a.topic, a.sub_point, after_id=a.after, limit=a.limit)
    rows = []
    for row_id, pub in page:
        body = decode_publication(pub.message).body if pub.message.format.startswith("MQHRF2") else b""
        rows.append(
            {
                "id": row_id,
                "sub_point": pub.sub_point,
                "topic": pub.topic,
                "retained_at": pub.retained_at,
                "expires_at": pub.expires_at,
                "body_text": body_text(body),
                "body_length": len(body),
            }
        )
    text = [f"{'ID':>8}  {'TOPIC':<50} BODY"]
    text += [
        f"{r['id']:>8}  {r['topic']:<50} {r['body_text'] if r['body_text'] is not None else '(binary)'}"
        for r in rows
    ]
    ctx.emit(rows, "\n".join(text))


def _rule_text(rule: AclRule) -> str:
    from broker.core.authority import PrincipalKind

    who = f"group {rule.principal}" if rule.kind == PrincipalKind.GROUP else rule.principal
    return (
        f"#{rule.rule_id}: {'allow' if rule.allow else 'deny'} {who} to {rule.permission} on {rule.pattern}"
    )


def add_rule(ctx: Context) -> None:
    from broker import store
    from broker.core.authority import AclRule, Permission, PrincipalKind, check_principal
    from broker.store.acl import rule_json

    a = ctx.args
    rule = AclRule(
        principal=check_principal(a.principal),
        kind=PrincipalKind.GROUP if a.group else PrincipalKind.USER,
        pattern=a.topic,
        permission=Permission(a.permission),
        allow=bool(a.allow),
    )
    with ctx.qm.engine.begin() as conn:
        added = store.add_acl_rule(conn, rule)
    ctx.emit(rule_json(added), f"added {_rule_text(added)}")


def list_rules(ctx: Context) -> None:
    from broker import store
    from broker.store.acl import rule_json

    with ctx.qm.reading() as conn:
        rules = store.list_acl_rules(conn)
        groups = store.list_groups(conn)
    text = [_rule_text(r) for r in rules] or ["(no rules: the default policy decides)"]
    text += [f"group {g}: {', '.join(users)}" for g, users in groups.items()]
    ctx.emit({"rules": [rule_json(r) for r in rules], "groups": groups}, "\n".join(text))


def remove_rule(ctx: Context) -> None:
    from broker import store

    with ctx.qm.engine.begin() as conn:
        removed = store.remove_acl_rule(conn, ctx.args.rule_id)
    if not removed:
        raise MQError(Reason.MQRC_UNKNOWN_OBJECT_NAME, f"no rule #{ctx.args.rule_id}")
    ctx.emit({"removed": ctx.args.rule_id}, f"removed rule #{ctx.args.rule_id}")


def check_rule(ctx: Context) -> None:
    """The dry run; exits 1 when the answer is "may not", so scripts can branch on it."""
    from broker import store
    from broker.core.authority import Permission
    from broker.core.topics import is_wildcard
    from broker.store.acl import rule_json

    a = ctx.args
    settings = ctx.settings
    if a.permission == "publish" and is_wildcard(a.topic):
        allowed, rule, why = False, None, "the topic: a publication topic has no wildcard level"
    else:
        with ctx.qm.reading() as conn:
            authority = store.load_authority(
                conn, default_allow=settings.default_policy == "allow", admin_group=settings.admin_group
            )
        decision = authority.decide(a.user, Permission(a.permission), a.topic)
        allowed, rule = decision.allowed, decision.rule
        why = _rule_text(rule) if rule is not None else f"the default policy ({settings.default_policy})"
    ctx.emit(
        {
            "allowed": allowed,
            "rule": rule_json(rule) if rule else None,
            "decided_by": why,
            "default_policy": settings.default_policy,
        },
        f"{a.user} {'may' if allowed else 'may not'} {a.permission} on {a.topic}: decided by {why}",
    )
    if not allowed:
        raise SystemExit(EXIT_MQ_ERROR)


def change_group(ctx: Context) -> None:
    from broker import store
    from broker.core.authority import check_principal

    a = ctx.args
    if a.member:  # a membership that cannot exist can still be removed
        check_principal(a.group)
        check_principal(a.user)
    with ctx.qm.engine.begin() as conn:
        changed = store.set_group_member(conn, a.group, a.user, a.member)
    verb = "added to" if a.member else "removed from"
    ctx.emit(
        {"group": a.group, "user": a.user, "changed": changed},
        f"{a.user} {verb} {a.group}" if changed else "no change",
    )
