"""Publishing through the broker: the API sends the Publish command an application would send.

The publication is an MQRFH2 message with a ``<psc>`` Publish folder (and the caller's extra
folders after it) put on the broker's default stream queue, as a request: the routing service
handles it as it handles any application's, with the caller's principal (or ``user_id``) as
MQMD UserIdentifier, so its authority checks, retained store and neighbours apply, and the
broker's ``<pscr>`` answer comes back. A topic with a wildcard level or a folder that is not
one XML element is the broker's refusal (MQRCCF_TOPIC_ERROR 3072, MQRC_RFH_ERROR 2334,
MQRC_RFH_PARM_ERROR 2337), not a schema error.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from admin_api.auditing import note
from admin_api.models import PublicationIn, Published
from admin_api.problems import responses
from admin_api.routers.subscriptions import warnings_of
from admin_api.security import OperatorToken
from admin_api.services import Svc
from broker.client import BrokerClient, BrokerResponse
from broker.protocol import psc, pscr, rfh2
from broker.protocol.options import PubOpt
from queues.errors import MQError
from queues.reasons import Reason

router = APIRouter(prefix="/api/v1/publications", tags=["publications"])

COMMAND_FOLDERS = (psc.FOLDER, pscr.FOLDER)


def checked_folder(text: str) -> str:
    """``text`` as an MQRFH2 folder: one well-formed XML element, the blanks around it dropped
    (they would read back as padding); 2334 or 2337 otherwise."""
    folder = text.strip()
    psc.load_folder(folder, rfh2.folder_name(folder))
    return folder


def _extra_folder(text: str) -> str:
    folder = checked_folder(text)
    if rfh2.folder_name(folder) in COMMAND_FOLDERS:
        raise MQError(
            Reason.MQRC_RFH_PARM_ERROR,
            f"a <{rfh2.folder_name(folder)}> folder is the broker's: the API writes the Publish command",
        )
    return folder


@router.post(
    "",
    response_model=Published,
    summary="Publish on topics through the broker (a Publish command on its stream queue)",
    responses=responses(403, 409, 503),
)
def publish(
    token: OperatorToken,
    svc: Svc,
    body: PublicationIn,
    request: Request,
) -> Published:
    user = body.user_id or token.principal
    folders = [_extra_folder(folder) for folder in body.folders]
    options = (PubOpt.RetainPub if body.retain else PubOpt(0)) | (PubOpt.Local if body.local else PubOpt(0))
    payload = body.body_text.encode("utf-8")
    note(request.state, topics=body.topics, retain=body.retain, user_id=user, body_length=len(payload))

    def publish_it(client: BrokerClient) -> BrokerResponse | None:
        return client.publish(
            body.topics,
            body.body_text,
            options=options,
            sub_point=body.sub_point,
            folders=folders,
            user_id=user,
            persistence=body.persistence,
            priority=body.priority,
            expiry=body.expiry,
        )

    response = svc.commands.send(publish_it)
    return Published(
        completion="ok" if response.ok else "warning", topics=body.topics, warnings=warnings_of(response)
    )
