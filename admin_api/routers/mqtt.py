"""MQTT sessions: the connected clients and the persistent sessions of the MQTT listener
(``broker serve --mqtt``), read from the store, whichever process serves the API."""

from __future__ import annotations

from fastapi import APIRouter

from admin_api.models import MqttSession
from admin_api.security import ViewerToken
from admin_api.services import Svc
from broker.store import mqtt

router = APIRouter(prefix="/api/v1/mqtt", tags=["mqtt"])


@router.get(
    "/sessions",
    response_model=list[MqttSession],
    summary="MQTT sessions: connected clients and persistent sessions",
)
def list_sessions(_: ViewerToken, svc: Svc) -> list[MqttSession]:
    with svc.qm.reading() as conn:
        found = mqtt.list_sessions(conn)
    depths = svc.qm.inquire_queues([s.queue for s in found])
    return [
        MqttSession(
            client_id=s.client_id,
            user=s.user_id,
            address=s.address,
            since=s.connected_at,
            protocol_version="3.1.1" if s.protocol_level == 4 else "3.1",
            clean_session=s.clean,
            connected=s.online,
            in_flight=s.in_flight,
            queued=(d.depth if (d := depths.get(s.queue)) is not None else 0),
            queue=s.queue,
            offline_since=s.offline_since,
            dropped=s.dropped,
        )
        for s in found
    ]
