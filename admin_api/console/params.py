"""The forms the console's query and path parameters take, as the API's own are checked: a
value edited by hand (a page cursor, a NUL byte) gets a 400 page (``app.install``) before it
reaches SQL."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from admin_api.models import (
    CURSOR,
    MAX_ID,
    MAX_SUB_POINT_LENGTH,
    MAX_TOPIC_LENGTH,
    QUEUE_NAME,
    QUEUE_PATTERN,
    XML_TEXT,
)


def _or_empty(pattern: str) -> str:
    """``pattern``, or nothing: the console's forms send their empty fields."""
    return f"^$|{pattern}"


NO_NUL = r"^[^\x00]*$"  # MQTT client ids hold no U+0000 (MQTT 3.1.1, 1.5.3); PostgreSQL text neither

MessageCursor = Annotated[str, Query(pattern=_or_empty(CURSOR))]
RowCursor = Annotated[int, Query(ge=0, le=MAX_ID)]
RowId = Annotated[int, Path(ge=1, le=MAX_ID)]
QueueName = Annotated[str, Path(pattern=QUEUE_NAME)]
QueueFilter = Annotated[str, Query(pattern=_or_empty(QUEUE_NAME))]
QueuePattern = Annotated[str, Query(pattern=_or_empty(QUEUE_PATTERN))]
NameCursor = Annotated[str, Query(pattern=r"^[A-Za-z0-9._/%]{0,48}$")]  # the last name of a page
TopicText = Annotated[str, Query(max_length=MAX_TOPIC_LENGTH, pattern=XML_TEXT)]
SubPointText = Annotated[str, Query(max_length=MAX_SUB_POINT_LENGTH, pattern=XML_TEXT)]
ClientCursor = Annotated[str, Query(pattern=NO_NUL)]
