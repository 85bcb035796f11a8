"""Request models: what they let through, what they refuse, and what they turn into."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from admin_api.models import MessageIn, QueueAttributes, QueueCreate, RuleIn, SubscriptionCreate
from broker.protocol.options import RegOpt
from broker.protocol.psc import MAX_TOPIC_LENGTH


def test_queue_changes_are_only_the_attributes_given() -> None:
    assert QueueAttributes(max_depth=10, put_enabled=False).changes() == {
        "max_depth": 10,
        "put_enabled": False,
    }
    assert QueueCreate(name="Q", replace=True, description="d").changes() == {"description": "d"}


@pytest.mark.parametrize(
    "fields",
    [{"name": "Q" * 49}, {"name": ""}, {"name": "A B"}, {"name": "Q", "backout_requeue_q": "no good"}],
)
def test_queue_names_follow_mq_rules(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        QueueCreate.model_validate(fields)


def test_message_bodies_are_text_or_base64() -> None:
    assert MessageIn(body_text="héllo").body() == "héllo".encode()
    assert MessageIn(body_base64="AP8=").body() == b"\x00\xff"
    assert MessageIn().body() == b""
    for fields in ({"body_text": "a", "body_base64": "YQ=="}, {"body_base64": "YQ"}, {"body_base64": "Y*=="}):
        with pytest.raises(ValidationError):
            MessageIn.model_validate(fields)


def test_registration_options_become_regopt_bits() -> None:
    body = SubscriptionCreate(
        topics=["a"],
        queue="Q",
        inform_if_retained=True,
        local=True,
        persistence="as-queue",
        correl_id="ab" * 24,
        join_exclusive=True,
    )
    assert body.options() == RegOpt.InformIfRet | RegOpt.Local | RegOpt.PersAsQueue | RegOpt.CorrelAsId | (
        RegOpt.JoinExcl
    )
    assert SubscriptionCreate(topics=["a"], queue="Q").options() == RegOpt(0)


@pytest.mark.parametrize("topic", ["", "a\x00b", "a\x1fb", "bad\ufffe", "x" * (MAX_TOPIC_LENGTH + 1)])
def test_topics_must_be_topics_and_xml_text(topic: str) -> None:
    with pytest.raises(ValidationError):
        SubscriptionCreate(topics=[topic], queue="Q")
    with pytest.raises(ValidationError):
        RuleIn(principal="p", topic=topic, permission="publish", allow=True)


def test_long_and_unusual_topics_are_accepted() -> None:
    topics = ["x" * MAX_TOPIC_LENGTH, "a//b", "USA#", "Spört/ñ/+/#", "tab\there"]
    assert SubscriptionCreate(topics=topics, queue="Q").topics == topics


@pytest.mark.parametrize("user_id", ["", "thirteen-char", "a b", "é"])
def test_user_ids_fit_the_mqmd(user_id: str) -> None:
    with pytest.raises(ValidationError):
        SubscriptionCreate(topics=["a"], queue="Q", user_id=user_id)
    assert SubscriptionCreate(topics=["a"], queue="Q", user_id="twelve_chars").user_id == "twelve_chars"


def test_unknown_fields_are_errors_not_ignored() -> None:
    with pytest.raises(ValidationError, match="inform_if_retaned"):
        SubscriptionCreate.model_validate({"topics": ["a"], "queue": "Q", "inform_if_retaned": True})
