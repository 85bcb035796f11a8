from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.authority import (
    AclError,
    AclRule,
    Authority,
    CheckResult,
    Decision,
    Permission,
    PrincipalKind,
)
from broker.core.topics import TopicError

PUB = Permission.PUBLISH
SUB = Permission.SUBSCRIBE
USER = PrincipalKind.USER
GROUP = PrincipalKind.GROUP


def user(principal: str, pattern: str, allow: bool, permission: Permission = PUB) -> AclRule:
    return AclRule(principal, USER, pattern, permission, allow)


def group(principal: str, pattern: str, allow: bool, permission: Permission = PUB) -> AclRule:
    return AclRule(principal, GROUP, pattern, permission, allow)


def test_no_rules_default_allow_is_the_default_decision() -> None:
    authority = Authority()
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, None)
    assert authority.decide("fred", SUB, "#") == Decision(True, None)
    assert authority.default_allow is True
    assert authority.rules == ()
    assert dict(authority.groups) == {}


def test_no_rules_default_deny() -> None:
    authority = Authority(default_allow=False)
    assert authority.decide("fred", PUB, "Sport") == Decision(False, None)
    assert authority.default_allow is False
    result = authority.check("fred", PUB, ["a", "b"])
    assert result == CheckResult(allowed=(), refused=("a", "b"))


def test_the_fast_path_still_refuses_bad_topics() -> None:
    authority = Authority()
    with pytest.raises(TopicError):
        authority.decide("fred", PUB, "Sport/#")
    with pytest.raises(TopicError):
        authority.decide("fred", SUB, "")
    with pytest.raises(AclError) as caught:
        authority.decide("fred", "browse", "Sport")  # type: ignore[arg-type]
    assert caught.value.reason == 3008


def test_the_rule_path_refuses_bad_topics() -> None:
    authority = Authority([user("fred", "Sport", True)])
    with pytest.raises(TopicError):
        authority.decide("fred", PUB, "+/Soccer")
    with pytest.raises(TopicError):
        authority.decide("fred", PUB, "")
    with pytest.raises(AclError):
        authority.decide("fred", "browse", "Sport")  # type: ignore[arg-type]


def test_a_literal_rule_covers_its_topic_and_subtree_only() -> None:
    rule = user("fred", "Sport", False)
    authority = Authority([rule])
    assert authority.decide("fred", PUB, "Sport") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport/Soccer/Results") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sports") == Decision(True, None)
    assert authority.decide("fred", PUB, "Weather/Sport") == Decision(True, None)
    assert authority.decide("fred", PUB, "Sport#") == Decision(True, None)
    assert authority.decide("anne", PUB, "Sport") == Decision(True, None)
    assert authority.decide("fred", SUB, "Sport") == Decision(True, None)


def test_a_wildcard_rule_is_inherited_below_what_it_matches() -> None:
    rule = user("fred", "Sport/+", False)
    authority = Authority([rule])
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport/Soccer/Results/Today") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport") == Decision(True, None)


def test_a_mid_topic_multi_level_rule() -> None:
    rule = user("fred", "Sport/#/Results", False)
    authority = Authority([rule])
    assert authority.decide("fred", PUB, "Sport/Results") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport/Soccer/Results/Final") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, None)


def test_the_most_specific_rule_wins() -> None:
    sport = user("fred", "Sport", False)
    soccer = user("fred", "Sport/Soccer", True)
    authority = Authority([sport, soccer], default_allow=False)
    assert authority.decide("fred", PUB, "Sport/Soccer/Results") == Decision(True, soccer)
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, soccer)
    assert authority.decide("fred", PUB, "Sport/Tennis") == Decision(False, sport)
    assert authority.decide("fred", PUB, "Weather") == Decision(False, None)


def test_literal_levels_outrank_single_level_wildcards() -> None:
    wild = user("fred", "+/+/Results", True)  # 1 literal, 2 '+'
    soccer = user("fred", "Sport/Soccer", False)  # 2 literals, inherited
    authority = Authority([wild, soccer])
    assert authority.decide("fred", PUB, "Sport/Soccer/Results") == Decision(False, soccer)
    assert authority.decide("fred", PUB, "Sport/Tennis/Results") == Decision(True, wild)


def test_a_single_level_wildcard_outranks_a_multi_level_one() -> None:
    plus = user("fred", "Sport/+/Results", True)  # 2 literals, 1 '+'
    soccer = user("fred", "Sport/Soccer", False)  # 2 literals, 0 '+'
    hashed = user("fred", "Sport/#/Results", False)  # 2 literals, 0 '+'
    authority = Authority([plus, soccer, hashed])
    assert authority.decide("fred", PUB, "Sport/Soccer/Results") == Decision(True, plus)


def test_a_direct_match_outranks_inheritance() -> None:
    below = user("fred", "Sport/#", True)
    sport = user("fred", "Sport", False)
    authority = Authority([below, sport])
    # Both have one literal level and no '+'; "Sport/#" matches Sport/Soccer itself, while
    # "Sport" only covers it by inheritance.
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, below)
    # On "Sport" both match directly: a tie, and deny wins.
    assert authority.decide("fred", PUB, "Sport") == Decision(False, sport)


def test_a_user_rule_outranks_a_group_rule() -> None:
    staff_deny = group("staff", "Sport", False)
    fred_allow = user("fred", "Sport", True)
    authority = Authority([staff_deny, fred_allow], groups={"staff": ["fred", "anne"]})
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, fred_allow)
    assert authority.decide("anne", PUB, "Sport/Soccer") == Decision(False, staff_deny)
    assert authority.decide("bob", PUB, "Sport/Soccer") == Decision(True, None)


def test_a_direct_group_rule_outranks_an_inherited_user_rule() -> None:
    fred_allow = user("fred", "Sport", True)
    staff_deny = group("staff", "Sport/#", False)
    authority = Authority([fred_allow, staff_deny], groups={"staff": ["fred"]})
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(False, staff_deny)
    # On "Sport" both match directly, and the user rule wins before deny-wins-ties applies.
    assert authority.decide("fred", PUB, "Sport") == Decision(True, fred_allow)


def test_a_more_specific_group_rule_outranks_a_user_rule() -> None:
    fred_deny = user("fred", "Sport", False)
    staff_allow = group("staff", "Sport/Soccer", True)
    authority = Authority([fred_deny, staff_allow], groups={"staff": ["fred"]})
    assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(True, staff_allow)
    assert authority.decide("fred", PUB, "Sport/Tennis") == Decision(False, fred_deny)


def test_deny_wins_ties() -> None:
    allow = group("staff", "Sport", True)
    deny = group("ops", "Sport", False)
    groups = {"staff": ["fred"], "ops": ["fred"]}
    for rules in ([allow, deny], [deny, allow]):
        authority = Authority(rules, groups=groups)
        assert authority.decide("fred", PUB, "Sport/Soccer") == Decision(False, deny)


def test_equal_rules_report_the_first_given() -> None:
    first = AclRule("fred", USER, "Sport", PUB, True, rule_id=7)
    second = AclRule("fred", USER, "Sport", PUB, True, rule_id=8)
    authority = Authority([first, second], default_allow=False)
    decision = authority.decide("fred", PUB, "Sport")
    assert decision == Decision(True, first)
    assert decision.rule is not None
    assert decision.rule.rule_id == 7


def test_group_rules_apply_to_members_only() -> None:
    rule = group("staff", "Sport", True)
    authority = Authority([rule], groups={"staff": ["fred"]}, default_allow=False)
    assert authority.decide("fred", PUB, "Sport") == Decision(True, rule)
    assert authority.decide("anne", PUB, "Sport") == Decision(False, None)
    # A user named like the group is not the group.
    assert authority.decide("staff", PUB, "Sport") == Decision(False, None)


def test_rules_are_per_permission() -> None:
    publish = user("fred", "Sport", False, PUB)
    authority = Authority([publish])
    assert authority.decide("fred", PUB, "Sport") == Decision(False, publish)
    assert authority.decide("fred", SUB, "Sport") == Decision(True, None)


def test_a_wildcard_subscription_is_decided_on_its_literal_prefix() -> None:
    soccer = user("fred", "Sport/Soccer", True, SUB)
    everything = user("anne", "#", True, SUB)
    one_level = user("bob", "+", True, SUB)
    authority = Authority([soccer, everything, one_level], default_allow=False)
    assert authority.decide("fred", SUB, "Sport/Soccer/#") == Decision(True, soccer)
    assert authority.decide("fred", SUB, "Sport/Soccer/+/Results") == Decision(True, soccer)
    # The subscription is made at "Sport", above what fred may see.
    assert authority.decide("fred", SUB, "Sport/+/Results") == Decision(False, None)
    assert authority.decide("fred", SUB, "#") == Decision(False, None)
    # "#" and "+/x" are made at the root, which only a '#' rule reaches.
    assert authority.decide("anne", SUB, "#") == Decision(True, everything)
    assert authority.decide("anne", SUB, "+/Soccer") == Decision(True, everything)
    assert authority.decide("bob", SUB, "+/Soccer") == Decision(False, None)
    assert authority.decide("bob", SUB, "Sport/#") == Decision(True, one_level)


def test_an_empty_first_level_is_not_the_root() -> None:
    rule = user("fred", "+", True, SUB)
    authority = Authority([rule], default_allow=False)
    assert authority.decide("fred", SUB, "/+") == Decision(True, rule)
    assert authority.decide("fred", SUB, "+") == Decision(False, None)


def test_principals_are_compared_exactly_after_stripping_trailing_blanks() -> None:
    rule = AclRule("fred  ", USER, "Sport", PUB, False)
    staff = AclRule("staff ", GROUP, "Weather", PUB, False)
    authority = Authority([rule, staff], groups={"staff   ": ["anne        "]})
    assert authority.decide("fred        ", PUB, "Sport") == Decision(False, rule)
    assert authority.decide("fred", PUB, "Sport") == Decision(False, rule)
    assert authority.decide("Fred", PUB, "Sport") == Decision(True, None)
    assert authority.decide(" fred", PUB, "Sport") == Decision(True, None)
    assert authority.decide("anne", PUB, "Weather") == Decision(False, staff)
    assert authority.groups == {"staff": ("anne",)}


def test_groups_are_normalised_and_deduplicated_in_order() -> None:
    authority = Authority(groups={"ops": ["b", "a ", "b  "], "ops ": ["c"]})
    assert dict(authority.groups) == {"ops": ("b", "a", "c")}


def test_admin_group_membership() -> None:
    authority = Authority(groups={"mqm": ["root        ", "admin"], "staff": ["fred"]})
    assert authority.is_admin("root") is True
    assert authority.is_admin("admin       ") is True
    assert authority.is_admin("fred") is False
    assert authority.is_admin("mqm") is True  # the broker's own user, as MQ's mqm
    custom = Authority(groups={"brokeradm": ["fred"], "mqm": ["root"]}, admin_group="brokeradm")
    assert custom.is_admin("fred") is True
    assert custom.is_admin("brokeradm") is True
    assert custom.is_admin("root") is False
    assert custom.is_admin("mqm") is False
    assert Authority().is_admin("root") is False


def test_administrators_are_subject_to_the_rules() -> None:
    deny = user("root", "Sport", False)
    authority = Authority([deny], groups={"mqm": ["root"]})
    assert authority.is_admin("root") is True
    assert authority.decide("root", PUB, "Sport") == Decision(False, deny)


def test_check_keeps_input_order_on_both_sides() -> None:
    authority = Authority([user("fred", "Secret", False)])
    topics = ["a", "Secret/x", "b", "Secret", "a", "Secrets"]
    assert authority.check("fred", PUB, topics) == CheckResult(
        allowed=("a", "b", "a", "Secrets"), refused=("Secret/x", "Secret")
    )
    assert authority.check("fred", PUB, []) == CheckResult((), ())


def test_rules_accept_string_enum_values_and_validate_them() -> None:
    rule = AclRule("fred", "user", "Sport", "publish", True)  # type: ignore[arg-type]
    assert rule.kind is PrincipalKind.USER
    assert rule.permission is Permission.PUBLISH
    with pytest.raises(AclError, match="kind must be one of user, group"):
        AclRule("fred", "robot", "Sport", PUB, True)  # type: ignore[arg-type]
    with pytest.raises(AclError, match="permission must be one of"):
        AclRule("fred", USER, "Sport", "read", True)  # type: ignore[arg-type]
    with pytest.raises(TopicError):
        AclRule("fred", USER, "", PUB, True)


def test_the_cache_does_not_change_answers() -> None:
    rules = [
        user("fred", "Sport", False),
        user("fred", "Sport/Soccer", True),
        group("staff", "#", False),
        group("staff", "Weather/+", True, SUB),
    ]
    groups = {"staff": ["fred", "anne"]}
    questions = [
        (principal, permission, topic)
        for principal in ("fred", "anne", "bob")
        for permission, topic in (
            (PUB, "Sport"),
            (PUB, "Sport/Soccer/x"),
            (PUB, "Weather"),
            (SUB, "Weather/+/Rain"),
            (SUB, "Weather/London/#"),
        )
    ]
    uncached = Authority(rules, groups, cache_size=0)
    tiny = Authority(rules, groups, cache_size=2)
    default = Authority(rules, groups)
    expected = [uncached.decide(*question) for question in questions]
    for _ in range(3):
        assert [tiny.decide(*question) for question in questions] == expected
        assert [default.decide(*question) for question in questions] == expected
    assert expected[0] == Decision(False, rules[0])
    assert expected[1] == Decision(True, rules[1])
    assert expected[8] == Decision(True, None)  # Weather/+ does not reach "Weather"
    assert expected[9] == Decision(True, rules[3])


# ---------------------------------------------------------------------------------------------
# The documented rule, evaluated by brute force with its own matcher.


def naive(pattern: Sequence[str], topic: Sequence[str]) -> bool:
    if not pattern:
        return not topic
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return naive(rest, topic) or (bool(topic) and naive(pattern, topic[1:]))
    if not topic:
        return False
    return (head == "+" or head == topic[0]) and naive(rest, topic[1:])


def brute_force(
    rules: Sequence[AclRule],
    groups: Mapping[str, Sequence[str]],
    default_allow: bool,
    principal: str,
    permission: Permission,
    topic: str,
) -> Decision:
    levels = topic.split("/")
    if permission is SUB:
        wild = [i for i, level in enumerate(levels) if level in ("#", "+")]
        levels = levels[: wild[0]] if wild else levels
    member_of = {g for g, members in groups.items() if principal in members}
    best: tuple[tuple[int, int, bool, bool, bool, int], AclRule] | None = None
    for position, rule in enumerate(rules):
        if rule.permission != permission:
            continue
        names = {principal} if rule.kind is USER else member_of
        if rule.principal not in names:
            continue
        pattern = rule.pattern.split("/")
        if not any(naive(pattern, levels[:depth]) for depth in range(len(levels) + 1)):
            continue
        rank = (
            sum(level not in ("#", "+") for level in pattern),
            pattern.count("+"),
            naive(pattern, levels),
            rule.kind is USER,
            not rule.allow,
            -position,
        )
        if best is None or rank > best[0]:
            best = (rank, rule)
    return Decision(default_allow, None) if best is None else Decision(best[1].allow, best[1])


PRINCIPALS = ["fred", "anne", "bob"]
GROUPS = {"staff": ["fred", "anne"], "ops": ["fred"], "fred": ["bob"]}
RULE_LEVELS = st.sampled_from(["a", "b", "", "+", "#"])
TOPIC_LEVELS = st.sampled_from(["a", "b", ""])
rule_patterns = st.lists(RULE_LEVELS, min_size=1, max_size=3).map("/".join).filter(bool)
concrete = st.lists(TOPIC_LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
acl_rules = st.builds(
    AclRule,
    principal=st.sampled_from([*PRINCIPALS, "staff", "ops"]),
    kind=st.sampled_from(list(PrincipalKind)),
    pattern=rule_patterns,
    permission=st.sampled_from(list(Permission)),
    allow=st.booleans(),
)
questions = st.one_of(
    st.tuples(st.sampled_from(PRINCIPALS), st.just(PUB), concrete),
    st.tuples(st.sampled_from(PRINCIPALS), st.just(SUB), rule_patterns),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(acl_rules, max_size=12),
    st.booleans(),
    st.lists(questions, min_size=1, max_size=8),
)
def test_decide_equals_the_documented_rule(
    rules: list[AclRule],
    default_allow: bool,
    asked: list[tuple[str, Permission, str]],
) -> None:
    authority = Authority(rules, GROUPS, default_allow=default_allow, cache_size=4)
    for principal, permission, topic in asked + asked:
        expected = brute_force(rules, GROUPS, default_allow, principal, permission, topic)
        assert authority.decide(principal, permission, topic) == expected


def test_authority_survives_pickling() -> None:
    deny = user("fred  ", "Sport", False)
    allow = group("staff", "Sport/Soccer", True)
    authority = Authority(
        [deny, allow],
        {"staff": ["fred"], "brokeradm": ["anne"]},
        default_allow=False,
        admin_group="brokeradm",
        cache_size=8,
    )
    authority.decide("fred", PUB, "Sport")  # a warm cache must not get in the way
    copy = pickle.loads(pickle.dumps(authority))
    assert copy.rules == (deny, allow)
    assert copy.groups == authority.groups
    assert copy.default_allow is False
    assert copy.is_admin("anne") is True
    assert copy.decide("fred", PUB, "Sport/Soccer/x") == Decision(True, allow)
    assert copy.decide("fred", PUB, "Sport") == Decision(False, deny)
    assert copy.decide("bob", PUB, "Weather") == Decision(False, None)
