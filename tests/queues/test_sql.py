"""The SQL seam's own rules (``queues.sql``): lists of keys in a few statement texts (one
array parameter on PostgreSQL, IN lists padded to a few lengths elsewhere)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, event

from queues import QueueManager, sql


@pytest.mark.parametrize(
    ("length", "padded_to"),
    [(0, 0), (1, 1), (2, 4), (4, 4), (5, 16), (17, 64), (200, 256), (1000, 1024), (1025, 2048), (3000, 3072)],
)
def test_in_lists_are_padded_with_their_last_value_to_a_few_lengths(length: int, padded_to: int) -> None:
    values = list(range(length))
    padded = sql.padded(values)
    assert len(padded) == padded_to
    assert padded[:length] == values and set(padded[length:]) <= {length - 1}


def test_lists_of_every_length_are_a_few_statements_and_the_same_rows(
    engine: Engine, qm: QueueManager
) -> None:
    """Deleting queues by lists of 1 to 300 names: the rows each list names go, and the database
    sees one statement text on PostgreSQL (an array), six elsewhere, not three hundred (each text
    is prepared and kept per connection)."""
    names = [f"APP.{n}" for n in range(300)]
    for name in names:
        qm.define_queue(name)
    texts: set[str] = set()
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: texts.add(statement))
    with engine.connect() as conn:
        for length in range(1, len(names) + 1):
            assert sql.delete_queues(conn, names[:length]) == length
            conn.rollback()  # each list finds every queue there
    deletes = {text for text in texts if text.lstrip().upper().startswith("DELETE FROM")}
    if engine.dialect.name == "postgresql":
        assert len(deletes) == 1 and "ANY" in deletes.pop()
    else:
        assert 1 < len(deletes) <= len(sql.IN_LIST_LENGTHS)
