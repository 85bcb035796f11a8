"""Network and security in the console: neighbours with their channel state and backlog, the
proxy subscriptions they registered here, ACL rules and groups. Every role reads them; the
admin role also adds and removes rules and group members, through the admin API's handlers.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, outcome, render
from admin_api.console.params import RowId
from admin_api.console.sessions import Administering, FormValues, Viewing, field
from admin_api.models import RuleIn
from admin_api.routers import acl as acl_api
from admin_api.routers import subscriptions as subscriptions_api
from admin_api.services import Svc
from broker import store
from broker.admin import neighbours
from broker.core.authority import check_principal
from broker.store.acl import rule_json

router = APIRouter(prefix=PREFIX, include_in_schema=False)

PROXIES = 50
SECURITY = f"{PREFIX}/security"


@router.get("/network")
def network(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    with svc.qm.reading() as conn:
        proxies = store.list_subscriptions(conn, store.SubscriptionFilter(proxy=True), limit=PROXIES)
    return render(
        request,
        "network.html",
        session,
        neighbours=neighbours.neighbour_status(svc.qm),
        proxies=[subscriptions_api.subscription_out(i, s) for i, s in proxies],
        more_proxies=len(proxies) == PROXIES,
    )


@router.get("/security")
def security(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    with svc.qm.reading() as conn:
        rules = [rule_json(rule) for rule in store.list_acl_rules(conn)]
        groups = store.list_groups(conn)
    return render(request, "security.html", session, rules=rules, groups=groups)


@router.post("/security/rules")
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

    return outcome(request, SECURITY, add)


@router.post("/security/rules/{rule_id}/delete")
def remove_rule(request: Request, session: Administering, svc: Svc, rule_id: RowId) -> Response:
    def remove() -> str:
        acl_api.remove_rule(session.token, svc, rule_id)
        return f"Rule {rule_id} removed"

    return outcome(request, SECURITY, remove)


@router.post("/security/members")
def add_member(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def add() -> str:
        group, user = check_principal(field(values, "group")), check_principal(field(values, "user"))
        acl_api.add_member(session.token, svc, group, user)
        return f"{user} added to {group}"

    return outcome(request, SECURITY, add)


@router.post("/security/members/delete")
def remove_member(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def remove() -> str:
        group, user = field(values, "group"), field(values, "user")
        acl_api.remove_member(session.token, svc, group, user)
        return f"{user} removed from {group}"

    return outcome(request, SECURITY, remove)
