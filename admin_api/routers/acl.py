"""ACL rules and groups (admins change them, everyone with a token reads them), and the dry run.

Rules and memberships are written with ``broker.store``, the functions the CLI
uses; each change bumps the state version, so every router applies it from its
next batch. The dry run answers with the same :class:`~broker.core.authority.Authority`
the routers build, so the rule it names is the rule that decides.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Path, Query, Request, Response

from admin_api.auditing import note
from admin_api.models import (
    DEFAULT_LIMIT,
    MAX_ID,
    MAX_LIMIT,
    MAX_TOPIC_LENGTH,
    PRINCIPAL,
    USER_ID,
    XML_TEXT,
    AclCheck,
    Groups,
    Membership,
    Rule,
    RuleIn,
    RulePage,
)
from admin_api.problems import not_found, responses
from admin_api.security import AdminToken, ViewerToken
from admin_api.services import Svc
from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.topics import is_wildcard
from broker.store.acl import rule_json

router = APIRouter(prefix="/api/v1/acl", tags=["acl"])

RuleId = Path(ge=1, le=MAX_ID)
PrincipalPath = Path(pattern=PRINCIPAL, examples=["traders"])


def _rule(rule: AclRule) -> Rule:
    return Rule.model_validate(rule_json(rule))


def _acl_rule(body: RuleIn) -> AclRule:
    return AclRule(
        principal=body.principal,
        kind=PrincipalKind(body.kind),
        pattern=body.topic,
        permission=Permission(body.permission),
        allow=body.allow,
    )


@router.get(
    "/rules",
    response_model=RulePage,
    summary="ACL rules, in the order they were added",
)
def list_rules(
    _: ViewerToken,
    svc: Svc,
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    offset: int = Query(0, ge=0, le=MAX_ID),
) -> RulePage:
    with svc.qm.reading() as conn:
        rules = store.list_acl_rules(conn)
    return RulePage(
        items=[_rule(r) for r in rules[offset : offset + limit]], total=len(rules), offset=offset, limit=limit
    )


@router.post(
    "/rules",
    status_code=201,
    response_model=Rule,
    summary="Add a rule",
)
def add_rule(
    _: AdminToken,
    svc: Svc,
    body: RuleIn,
    request: Request,
    response: Response,
) -> Rule:
    note(request.state, rule=body.model_dump())
    with svc.qm.unit_of_work() as uow:
        added = store.add_acl_rule(uow.connection, _acl_rule(body))
    note(request.state, rule_id=added.rule_id)
    response.headers["Location"] = f"/api/v1/acl/rules/{added.rule_id}"
    return _rule(added)


@router.put(
    "/rules/{rule_id}",
    response_model=Rule,
    summary="Change a rule",
    responses=responses(404),
)
def change_rule(
    _: AdminToken,
    svc: Svc,
    body: RuleIn,
    request: Request,
    rule_id: int = RuleId,
) -> Rule:
    note(request.state, rule=body.model_dump())
    rule = _acl_rule(body)
    with svc.qm.unit_of_work() as uow:
        changed = store.update_acl_rule(uow.connection, rule_id, rule)
    if not changed:
        raise not_found(f"rule {rule_id}")
    return _rule(AclRule(rule.principal, rule.kind, rule.pattern, rule.permission, rule.allow, rule_id))


@router.delete(
    "/rules/{rule_id}",
    status_code=204,
    response_class=Response,
    summary="Remove a rule",
    responses=responses(404),
)
def remove_rule(_: AdminToken, svc: Svc, rule_id: int = RuleId) -> Response:
    with svc.qm.unit_of_work() as uow:
        removed = store.remove_acl_rule(uow.connection, rule_id)
    if not removed:
        raise not_found(f"rule {rule_id}")
    return Response(status_code=204)


@router.get(
    "/check",
    response_model=AclCheck,
    summary="Dry run: may USER publish/subscribe on TOPIC, and which rule decides",
)
def check(
    _: ViewerToken,
    svc: Svc,
    user: str = Query(pattern=PRINCIPAL, examples=["alice"]),
    permission: Literal["publish", "subscribe"] = Query(),
    topic: str = Query(
        min_length=1, max_length=MAX_TOPIC_LENGTH, pattern=XML_TEXT, examples=["Sport/Tennis"]
    ),
) -> AclCheck:
    policy = svc.settings.default_policy
    answer = AclCheck(
        user=user,
        permission=permission,
        topic=topic,
        allowed=False,
        rule=None,
        decided_by="",
        default_policy=policy,
    )
    if permission == "publish" and is_wildcard(topic):  # nobody publishes on a pattern
        return answer.model_copy(
            update={"decided_by": "the topic: a publication topic has no wildcard level"}
        )
    with svc.qm.reading() as conn:
        authority = store.load_authority(
            conn, default_allow=svc.default_allow, admin_group=svc.settings.admin_group
        )
    decision = authority.decide(user, Permission(permission), topic)
    rule = decision.rule
    return answer.model_copy(
        update={
            "allowed": decision.allowed,
            "rule": _rule(rule) if rule is not None else None,
            "decided_by": f"rule #{rule.rule_id}" if rule is not None else f"the default policy ({policy})",
        }
    )


@router.get("/groups", response_model=Groups, summary="Groups and their members")
def list_groups(
    _: ViewerToken,
    svc: Svc,
) -> Groups:
    with svc.qm.reading() as conn:
        return Groups(groups=store.list_groups(conn))


@router.put(
    "/groups/{group}/members/{user}",
    response_model=Membership,
    summary="Add a user to a group",
)
def add_member(
    _: AdminToken,
    svc: Svc,
    group: str = Path(pattern=USER_ID, examples=["traders"]),
    user: str = Path(pattern=USER_ID, examples=["alice"]),
) -> Membership:
    with svc.qm.unit_of_work() as uow:
        changed = store.set_group_member(uow.connection, group, user, True)
    return Membership(group=group, user=user, member=True, changed=changed)


@router.delete(
    "/groups/{group}/members/{user}",
    status_code=204,
    response_class=Response,
    summary="Remove a user from a group",
    responses=responses(404),
)
def remove_member(
    _: AdminToken,
    svc: Svc,
    group: str = PrincipalPath,
    user: str = Path(pattern=PRINCIPAL, examples=["alice"]),
) -> Response:
    with svc.qm.unit_of_work() as uow:
        removed = store.set_group_member(uow.connection, group, user, False)
    if not removed:
        raise not_found(f"membership of {user} in {group}")
    return Response(status_code=204)
