"""The broker's records as table rows, and the keys that name them.

Subscriptions and retained publications are keyed by a hash of their key, because
topics may be 10,240 characters long and PostgreSQL cannot index values that large
(``broker.store.schema``). A retained publication is stored as its MQMD fields and
body, and read back by decoding it again, so the row holds nothing the wire does not.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.retained import RetainedPublication
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.protocol import brokerpath, psc, rfh2
from broker.store.schema import TOPIC_HEAD
from queues.message import USER_ID_LENGTH, Message


def subscription_hash(key: SubscriptionKey) -> bytes:
    identity = key.identity
    parts = (identity.q_mgr, identity.queue, (identity.correl_id or b"").hex(), key.sub_point, key.topic)
    text = "\x00".join((*parts, "\x01" if key.filter is None else "\x02" + key.filter))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=24).digest()


def retained_hash(sub_point: str, topic: str) -> bytes:
    return hashlib.blake2b(
        f"{sub_point}\x00{topic}".encode("utf-8", "surrogatepass"), digest_size=24
    ).digest()


def subscription_row(sub: Subscription) -> dict[str, Any]:
    key = sub.key
    return {
        "key_hash": subscription_hash(key),
        "q_mgr": key.identity.q_mgr,
        "queue": key.identity.queue,
        "correl_id": key.identity.correl_id,
        "sub_point": key.sub_point,
        "topic": key.topic,
        "topic_head": key.topic[:TOPIC_HEAD],
        "filter": key.filter,
        "user_id": sub.user_id[:USER_ID_LENGTH],
        "options": int(sub.options),
        "seq": sub.seq,
        "created_at": sub.created_at,
        "sub_name": sub.sub_name,
        "sub_user_data": sub.sub_user_data,
        "expires_at": sub.expires_at,
        "temporary": int(sub.temporary),
        "members": json.dumps(list(sub.members)),
        "exclusive": sub.exclusive,
        "origin": sub.origin,
    }


def subscription_from_row(row: Any) -> Subscription:
    return Subscription(
        key=SubscriptionKey(
            Identity(row.q_mgr, row.queue, row.correl_id), row.sub_point, row.topic, row.filter
        ),
        user_id=row.user_id,
        options=row.options,
        created_at=row.created_at,
        seq=row.seq,
        sub_name=row.sub_name,
        sub_user_data=row.sub_user_data,
        expires_at=row.expires_at,
        temporary=bool(row.temporary),
        members=tuple(json.loads(row.members)),
        exclusive=row.exclusive,
        origin=row.origin,
    )


# A retained publication is stored as its descriptor, field by field, and its body.
_MQMD_FIELDS = tuple(name for name in Message._fields if name not in ("body", "backout_count"))


def retained_row(pub: RetainedPublication) -> dict[str, Any]:
    row = {name: getattr(pub.message, name) for name in _MQMD_FIELDS}
    row.update(
        key_hash=retained_hash(pub.sub_point, pub.topic),
        sub_point=pub.sub_point,
        topic=pub.topic,
        retained_at=pub.retained_at,
        body=pub.message.body,
    )
    return row


def retained_from_row(row: Any) -> RetainedPublication:
    """Rebuild a retained publication; its headers are decoded and its command parsed
    again, which cannot fail for what the broker itself stored."""
    message = Message(body=row.body, **{name: getattr(row, name) for name in _MQMD_FIELDS})
    headers = rfh2.decode(message.body, message.encoding, message.format)
    commands, others = rfh2.find(headers.folders, psc.FOLDER)
    command = psc.parse(commands[-1])
    assert isinstance(command, psc.Publish)
    paths = rfh2.find(others, brokerpath.FOLDER)[0]
    path = brokerpath.parse(paths[-1]) if paths else None
    return RetainedPublication(
        row.sub_point, row.topic, message, command, headers, row.retained_at, path=path
    )


def acl_from_row(row: Any) -> AclRule:
    return AclRule(
        principal=row.principal,
        kind=PrincipalKind(row.kind),
        pattern=row.pattern,
        permission=Permission(row.permission),
        allow=bool(row.allow),
        rule_id=row.id,
    )
