"""Security in the console: the ACL rules, the groups and their members, and the effective
permission check. Every role reads them and runs the check; the admin role also adds and
removes rules and group members, through the admin API's handlers.

The check is the API's dry run (``GET /api/v1/acl/check``, the same decision as
``broker acl check``): whether a principal may publish on or subscribe to a topic, and the
rule, or the default policy, that decides.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, outcome, render
from admin_api.console.params import RowId, TopicText
from admin_api.console.sessions import Administering, FormValues, Viewing, field
from admin_api.models import RuleIn
from admin_api.routers import acl as acl_api
from admin_api.services import Svc
from broker import store
from broker.core.authority import check_principal
from broker.store.acl import rule_json

router = APIRouter(prefix=f"{PREFIX}/security", include_in_schema=False)

BACK = f"{PREFIX}/security"
# The check's principal, as the API's dry run takes it (``PRINCIPAL``), or nothing yet.
PrincipalText = Annotated[str, Query(max_length=64, pattern=r"^[!-~]*$")]


@router.get("")
def security(
    request: Request,
    session: Viewing,
    svc: Svc,
    user: PrincipalText = "",
    permission: Literal["publish", "subscribe"] = "publish",
    topic: TopicText = "",
) -> HTMLResponse:
    with svc.qm.reading() as conn:
        rules = [rule_json(rule) for rule in store.list_acl_rules(conn)]
        groups = store.list_groups(conn)
    checked = acl_api.check(session.token, svc, user, permission, topic) if user and topic else None
    return render(
        request,
        "security.html",
        session,
        rules=rules,
        groups=groups,
        asked={"user": user, "permission": permission, "topic": topic},
        checked=checked,
    )


@router.post("/rules")
def add_rule(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def add() -> str:
        body = RuleIn.model_validate(
            {
                "principal": check_principal(field(values, "principal")),
                "kind": field(values, "kind", "user"),
                "topic": field(values, "topic"),
                "permission": field(values, "permission"),
                "allow": field(values, "allow") == "allow",
            }
        )
        rule = acl_api.add_rule(session.token, svc, body, request, Response())
        return f"Rule {rule.id} added"

    return outcome(request, BACK, add)


@router.post("/rules/{rule_id}/delete")
def remove_rule(request: Request, session: Administering, svc: Svc, rule_id: RowId) -> Response:
    def remove() -> str:
        acl_api.remove_rule(session.token, svc, rule_id)
        return f"Rule {rule_id} removed"

    return outcome(request, BACK, remove)


@router.post("/members")
def add_member(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def add() -> str:
        group, user = check_principal(field(values, "group")), check_principal(field(values, "user"))
        acl_api.add_member(session.token, svc, group, user)
        return f"{user} added to {group}"

    return outcome(request, BACK, add)


@router.post("/members/delete")
def remove_member(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def remove() -> str:
        group, user = field(values, "group"), field(values, "user")
        acl_api.remove_member(session.token, svc, group, user)
        return f"{user} removed from {group}"

    return outcome(request, BACK, remove)
