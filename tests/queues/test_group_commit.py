"""Group commit: callers queued behind a running commit share the next one."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from queues import MQError, Reason, group_commit
from queues.group_commit import GroupCommit


class Recorder:
    """A commit function that records its groups and can be held mid-commit."""

    def __init__(self, outcome: Callable[[str], object] = str.upper) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self._outcome = outcome

    def __call__(self, items: list[str]) -> list[object]:
        self.groups.append(list(items))
        self.entered.set()
        assert self.release.wait(10)
        return [self._outcome(item) for item in items]


def submit_in_threads(group: GroupCommit, items: list[str]) -> dict[str, object]:
    """Submit each item from its own thread; returns each item's result or exception."""
    outcomes: dict[str, object] = {}

    def submit(item: str) -> None:
        try:
            outcomes[item] = group.submit(item)
        except BaseException as exc:
            outcomes[item] = exc

    threads = [threading.Thread(target=submit, args=(item,), daemon=True) for item in items]
    for thread in threads:
        thread.start()
    return outcomes if all(_joined(t) for t in threads) else {}


def _joined(thread: threading.Thread) -> bool:
    thread.join(10)
    return not thread.is_alive()


def submitted_behind_a_held_commit(recorder: Recorder, group: GroupCommit, items: list[str]) -> dict:
    """Hold a commit of "first", submit ``items`` from threads meanwhile, then release it;
    returns each item's outcome."""
    recorder.release.clear()
    leader = threading.Thread(target=group.submit, args=("first",))
    leader.start()
    assert recorder.entered.wait(10)
    outcomes: dict[str, object] = {}
    threading.Thread(target=lambda: outcomes.update(submit_in_threads(group, items))).start()
    for _ in range(1000):
        if len(group._queued) == len(items):
            break
        threading.Event().wait(0.005)
    recorder.release.set()
    leader.join(10)
    for _ in range(1000):
        if len(outcomes) == len(items):
            break
        threading.Event().wait(0.005)
    return outcomes


def test_a_caller_alone_commits_at_once_in_a_group_of_one() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder)
    assert group.submit("a") == "A"
    assert group.submit("b") == "B"
    assert recorder.groups == [["a"], ["b"]]


def test_callers_arriving_during_a_commit_share_the_next_one() -> None:
    recorder = Recorder()
    outcomes = submitted_behind_a_held_commit(recorder, GroupCommit(recorder), list("bcde"))
    assert outcomes == {"b": "B", "c": "C", "d": "D", "e": "E"}
    assert recorder.groups[0] == ["first"]
    assert sorted(recorder.groups[1]) == list("bcde")
    assert len(recorder.groups) == 2


def test_an_item_that_fails_fails_alone() -> None:
    def outcome(item: str) -> object:
        return MQError(Reason.MQRC_Q_FULL, item) if item == "full" else item.upper()

    recorder = Recorder(outcome)
    results = submitted_behind_a_held_commit(recorder, GroupCommit(recorder), ["ok", "full"])
    assert results["ok"] == "OK"
    assert isinstance(results["full"], MQError) and results["full"].reason == Reason.MQRC_Q_FULL


def test_a_failed_commit_is_every_callers_error_and_the_next_group_still_runs() -> None:
    calls = []

    def commit(items: list[str]) -> list[object]:
        calls.append(items)
        if len(calls) == 1:
            raise MQError(Reason.MQRC_CONNECTION_BROKEN, "gone")
        return [item.upper() for item in items]

    group = GroupCommit(commit)
    with pytest.raises(MQError) as caught:
        group.submit("a")
    assert caught.value.reason == Reason.MQRC_CONNECTION_BROKEN
    assert group.submit("b") == "B"


def test_a_commit_that_miscounts_its_outcomes_fails_the_group_rather_than_hang_it() -> None:
    group: GroupCommit[str, str] = GroupCommit(lambda items: [])
    outcomes = submit_in_threads(group, ["a", "b", "c"])
    assert len(outcomes) == 3
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes.values())


def test_a_caller_that_gives_up_waiting_leaves_with_its_put(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt in a waiting caller: its put is not made, and the callers after
    it are still led (without the clean-up the lead went to the caller that left)."""

    class Interrupted(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            raise KeyboardInterrupt

    class Quitting(group_commit._Ticket):
        def __init__(self, item: str) -> None:
            super().__init__(item)
            if item == "gone":
                self.woken = Interrupted()

    monkeypatch.setattr(group_commit, "_Ticket", Quitting)
    recorder = Recorder()
    group: GroupCommit[str, object] = GroupCommit(recorder)
    recorder.release.clear()
    leader = threading.Thread(target=group.submit, args=("first",))
    leader.start()
    assert recorder.entered.wait(10)
    with pytest.raises(KeyboardInterrupt):
        group.submit("gone")
    recorder.release.set()
    leader.join(10)
    assert submit_in_threads(group, ["after"]) == {"after": "AFTER"}
    assert recorder.groups == [["first"], ["after"]]


def test_a_lead_handed_to_a_caller_that_gives_up_goes_to_the_next() -> None:
    group: GroupCommit[str, object] = GroupCommit(Recorder())
    group._leading = True  # a leader is committing
    gone, following = group_commit._Ticket("gone"), group_commit._Ticket("next")
    group._queued = [gone, following]
    gone.lead = True  # handed the lead just as it gave up
    group._abandon(gone)
    assert group._queued == [following] and following.lead and following.woken.is_set()
    following.lead = False
    group._queued = []
    group._abandon(following)
    assert group._leading  # it had no lead to pass on
    group._queued, following.lead = [following], True
    group._abandon(following)
    assert group._queued == [] and not group._leading
