from __future__ import annotations

import os
import time

import pytest

from queues.ids import derived_id, mq_date_time, new_msg_id, now_ms, pad_id

IDS_PER_PROCESS = 5_000


def test_msg_id_is_24_bytes_stamped_like_ibms():
    msg_id = new_msg_id("QM1")
    assert len(msg_id) == 24
    assert msg_id[:16] == b"AMQ QM1         "


def test_long_qmgr_names_are_cut_to_12_characters():
    assert new_msg_id("A.VERY.LONG.QMGR.NAME")[:16] == b"AMQ A.VERY.LONG."


def test_consecutive_ids_are_unique_and_differ_only_in_the_last_8_bytes():
    ids = [new_msg_id("QM1") for _ in range(IDS_PER_PROCESS)]
    assert len(set(ids)) == IDS_PER_PROCESS
    assert {i[:16] for i in ids} == {b"AMQ QM1         "}


def _ids_from_forked_child(count: int) -> list[bytes]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        try:
            with os.fdopen(write_end, "wb") as out:
                out.write(b"".join(new_msg_id("QM1") for _ in range(count)))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as incoming:
        data = incoming.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return [data[i : i + 24] for i in range(0, len(data), 24)]


def test_ids_stay_unique_across_fork():
    """A child that inherited the parent's counter would repeat the parent's next ids."""
    before = [new_msg_id("QM1") for _ in range(10)]
    children = [_ids_from_forked_child(IDS_PER_PROCESS) for _ in range(3)]
    after = [new_msg_id("QM1") for _ in range(IDS_PER_PROCESS)]
    everything = before + after + [i for child in children for i in child]
    assert all(len(child) == IDS_PER_PROCESS for child in children)
    assert len(set(everything)) == len(everything)
    # Each child re-seeded: its random prefix differs from the parent's and from its siblings'.
    prefixes = {after[0][16:20]} | {child[0][16:20] for child in children}
    assert len(prefixes) == 4


def test_derived_id_is_deterministic_and_24_bytes():
    first = derived_id(b"QM1", b"\x01" * 24, b"SUB.Q")
    assert first == derived_id(b"QM1", b"\x01" * 24, b"SUB.Q")
    assert len(first) == 24
    assert first != derived_id(b"QM1", b"\x01" * 24, b"SUB.R")


def test_derived_id_parts_are_length_delimited():
    assert derived_id(b"ab", b"c") != derived_id(b"a", b"bc")
    assert derived_id(b"abc") != derived_id(b"ab", b"c")
    assert derived_id() != derived_id(b"")


@pytest.mark.parametrize(
    ("value", "padded"),
    [
        (b"", b"\x00" * 24),
        (b"abc", b"abc" + b"\x00" * 21),
        (b"x" * 24, b"x" * 24),
    ],
)
def test_pad_id_pads_with_nuls_to_24(value, padded):
    assert pad_id(value) == padded


def test_now_ms_is_wall_clock_milliseconds():
    before = time.time_ns() // 1_000_000
    value = now_ms()
    after = time.time_ns() // 1_000_000
    assert before <= value <= after


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (0, ("19700101", "00000000")),
        (1_700_000_000_123, ("20231114", "22132012")),
        (951_782_400_999, ("20000229", "00000099")),
        (1_735_689_599_990, ("20241231", "23595999")),
    ],
)
def test_mq_date_time_is_gmt_yyyymmdd_and_hhmmssth(ms, expected):
    assert mq_date_time(ms) == expected
