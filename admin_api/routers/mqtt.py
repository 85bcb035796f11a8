"""MQTT sessions: the connected clients and the persistent sessions of the MQTT listeners
(``broker serve --mqtt``, one or more nodes), read from the store, whichever process serves
the API; the nodes of the cluster; and the operator's two actions on sessions, disconnect
and delete, which travel to the listener holding the client through the database
(``broker.store.mqtt_requests``), since it may run in another process or on another node.

The MQTT principals (the user names clients log in with) are the admin's, as with ``broker
mqtt passwd``: the same store functions, a password taken in and stored only as a salted
scrypt hash, never returned, logged or put in the audit entry.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Path, Request, Response
from pydantic import SecretStr

from admin_api.auditing import note
from admin_api.models import (
    USER_ID,
    MqttGrant,
    MqttNode,
    MqttPasswordIn,
    MqttPrincipal,
    MqttPrincipalIn,
    MqttSession,
    MqttSessionDetail,
)
from admin_api.problems import responses
from admin_api.security import AdminToken, OperatorToken, ViewerToken
from admin_api.services import Services, Svc
from broker.core import cluster
from broker.protocol.mqtt.packets import SubscriptionOptions
from broker.store import mqtt, mqtt_requests, nodes
from broker.store.mqtt_requests import NoSuchSession
from queues.ids import now_ms

router = APIRouter(prefix="/api/v1/mqtt", tags=["mqtt"])

# MQTT allows ids of 65,535 bytes, but a path that long (percent-encoded, up to 12 characters a
# character) exceeds what the HTTP server reads in a request line; the CLI takes any id.
MAX_CLIENT_ID = 1024
ClientId = Path(
    min_length=1, max_length=MAX_CLIENT_ID, description="the MQTT client identifier (/ sent as %2F)"
)


def session_out(svc: Services, found: list[mqtt.StoredSession]) -> list[MqttSession]:
    """The sessions as the API shows them, each with the depth of its queue (one read for all)."""
    depths = svc.qm.inquire_queues([s.queue for s in found])
    return [
        MqttSession(
            client_id=s.client_id,
            user=s.user_id,
            address=s.address,
            since=s.connected_at,
            protocol_version=s.version,
            clean_session=s.clean,
            connected=s.online,
            node=s.node,
            in_flight=s.in_flight,
            queued=(d.depth if (d := depths.get(s.queue)) is not None else 0),
            queue=s.queue,
            offline_since=s.offline_since,
            dropped=s.dropped,
            refused=s.refused,
            keepalive=s.keepalive,
            bytes_in=s.bytes_in,
            bytes_out=s.bytes_out,
            session_expiry=s.expiry,
            receive_maximum=s.receive_maximum,
            topic_alias_maximum=s.topic_alias_maximum,
        )
        for s in found
    ]


@router.get(
    "/sessions",
    response_model=list[MqttSession],
    summary="MQTT sessions: connected clients and persistent sessions",
)
def list_sessions(_: ViewerToken, svc: Svc) -> list[MqttSession]:
    with svc.qm.reading() as conn:
        found = mqtt.list_sessions(conn)
    return session_out(svc, found)


def session_detail(svc: Services, client_id: str) -> MqttSessionDetail:
    """One session as the list shows it, with its subscriptions; 404 (2085) if there is none."""
    with svc.qm.reading() as conn:
        found = mqtt.show_session(conn, client_id)
        granted = mqtt.granted(conn, client_id) if found is not None else {}
    if found is None:
        raise NoSuchSession(client_id)
    shown = session_out(svc, [found])[0]
    grants = [grant_out(text, grant) for text, grant in sorted(granted.items())]
    return MqttSessionDetail(**shown.model_dump(), subscriptions=grants)


def grant_out(text: str, grant: int) -> MqttGrant:
    """One subscription of a session, its grant read (``broker.store.mqtt.ID_SHIFT``)."""
    options = SubscriptionOptions(grant & mqtt.OPTION_BITS)
    return MqttGrant(
        filter=text,
        qos=options.qos,
        no_local=options.no_local,
        retain_as_published=options.retain_as_published,
        subscription_identifier=grant >> mqtt.ID_SHIFT or None,
    )


@router.get(
    "/sessions/{client_id:name}",
    response_model=MqttSessionDetail,
    summary="One MQTT session, with its subscriptions",
    responses=responses(404),
)
def get_session(_: ViewerToken, svc: Svc, client_id: str = ClientId) -> MqttSessionDetail:
    return session_detail(svc, client_id)


def nodes_out(svc: Services) -> list[MqttNode]:
    """The cluster view: each node, alive or not, with its clients and last heartbeat."""
    with svc.qm.reading() as conn:
        found = nodes.members(conn)
    view = cluster.nodes(found, now_ms(), int(svc.settings.node_timeout * 1000))
    return [
        MqttNode(
            name=n.name,
            state=n.state,
            clients=n.clients,
            processes=n.processes,
            last_heartbeat=n.last_heartbeat,
            started_at=n.started_at,
            address=n.address,
        )
        for n in view
    ]


@router.get(
    "/nodes",
    response_model=list[MqttNode],
    summary="The nodes of the MQTT cluster",
    description="One entry per node name (each `broker serve --mqtt` of one database): whether it is alive,"
    " its connected clients and its last heartbeat. A node that stops heartbeating is declared dead"
    " by another after `node_timeout` seconds, which releases its sessions.",
)
def list_nodes(_: ViewerToken, svc: Svc) -> list[MqttNode]:
    return nodes_out(svc)


@router.post(
    "/clients/{client_id:name}/disconnect",
    status_code=202,
    response_model=MqttSession,
    summary="Disconnect a connected MQTT client",
    description="The listener holding the client, on whichever node, closes its connection within a"
    " second; the client did not send DISCONNECT, so its will is published. A persistent session"
    " stays (offline); a clean one ends. The answer is the session as it was when the request was made.",
    responses=responses(404),
)
def disconnect(token: OperatorToken, svc: Svc, request: Request, client_id: str = ClientId) -> MqttSession:
    note(request.state, client_id=client_id)
    stored = mqtt_requests.disconnect(svc.qm, client_id, f"{token.principal} through the admin API")
    return session_out(svc, [stored])[0]


@router.delete(
    "/sessions/{client_id:name}",
    status_code=204,
    response_class=Response,
    summary="Delete an MQTT session (its client disconnected first)",
    description="Its subscriptions, its queue with the messages waiting and its in-flight state go;"
    " the client's next connection starts a new session (session present 0). Carried out by the"
    " MQTT listener: 503 if none did within the API's command timeout (10 s by default).",
    responses=responses(404, 503),
)
def delete_session(token: OperatorToken, svc: Svc, request: Request, client_id: str = ClientId) -> Response:
    note(request.state, client_id=client_id)
    reason = f"{token.principal} through the admin API"
    stored = mqtt_requests.delete_session(svc.qm, client_id, reason, timeout=svc.commands.timeout)
    note(request.state, user=stored.user_id, queue=stored.queue)
    return Response(status_code=204)


# -- principals ----------------------------------------------------------------------------

User = Path(pattern=USER_ID, description="the principal's name (at most 12 characters)")


def hashed_password(password: SecretStr) -> str:
    """The password's salted scrypt hash, made before any transaction (it takes a while)."""
    return mqtt.hash_password(password.get_secret_value().encode("utf-8"))


@router.get("/principals", response_model=list[MqttPrincipal], summary="The MQTT principals, by name")
def list_principals(_: AdminToken, svc: Svc) -> list[MqttPrincipal]:
    with svc.qm.reading() as conn:
        found = mqtt.list_principals(conn)
    return [MqttPrincipal(user=user, created_at=at) for user, at in found]


@router.post(
    "/principals",
    status_code=201,
    response_model=MqttPrincipal,
    summary="Add an MQTT principal with its password",
    description="Clients then log in with this user name and password. 409 if the principal exists"
    " (its password is changed with PUT .../password). The password is stored as a salted scrypt"
    " hash; it is never returned, logged or audited.",
    responses=responses(409),
)
def add_principal(
    _: AdminToken, svc: Svc, body: MqttPrincipalIn, request: Request, response: Response
) -> MqttPrincipal:
    note(request.state, user=body.user)
    hashed, now = hashed_password(body.password), now_ms()
    with svc.qm.unit_of_work() as uow:
        mqtt.add_principal(uow.connection, body.user, hashed, now)
    response.headers["Location"] = f"/api/v1/mqtt/principals/{quote(body.user, safe='')}"
    return MqttPrincipal(user=body.user, created_at=now)


@router.put(
    "/principals/{user:name}/password",
    status_code=204,
    response_class=Response,
    summary="Set an MQTT principal's password",
    description="Its clients connected now stay; their next connection needs the new password.",
    responses=responses(404),
)
def set_password(_: AdminToken, svc: Svc, body: MqttPasswordIn, user: str = User) -> Response:
    hashed = hashed_password(body.password)
    with svc.qm.unit_of_work() as uow:
        mqtt.change_password(uow.connection, user, hashed)
    return Response(status_code=204)


@router.delete(
    "/principals/{user:name}",
    status_code=204,
    response_class=Response,
    summary="Remove an MQTT principal",
    description="It can no longer connect; its clients connected now stay until they reconnect"
    " (disconnect them to make them). Its sessions and ACL rules are kept.",
    responses=responses(404),
)
def remove_principal(_: AdminToken, svc: Svc, user: str = User) -> Response:
    with svc.qm.unit_of_work() as uow:
        mqtt.delete_principal(uow.connection, user)
    return Response(status_code=204)
