"""privileges.needs: what --check warns a follower user lacks (pure)."""

from __future__ import annotations

from cdc_consumer.privileges import FEATURES, UserGrants, needs

EVERYTHING = frozenset(p for p, _ in FEATURES)


def test_a_user_with_every_feature_privilege_and_the_setting_needs_nothing():
    assert needs(UserGrants("'a'@'%'", EVERYTHING, True, True), "consumer") == []
    assert needs(UserGrants("'a'@'%'", frozenset({"ALL PRIVILEGES"}), True, False), "leader") == []  # SUPER too


def test_without_super_binary_logging_asks_for_log_bin_trust_function_creators():
    [line] = needs(UserGrants("'a'@'%'", EVERYTHING, True, False), "consumer")
    assert line.startswith("CREATE TRIGGER and CREATE FUNCTION will fail (error 1419")
    assert needs(UserGrants("'a'@'%'", EVERYTHING, False, False), "consumer") == []  # no binlog: no 1419
    assert needs(UserGrants("'a'@'%'", EVERYTHING | {"SUPER"}, True, False), "leader") == []


def test_a_leaders_definer_needs_set_user():
    [line] = needs(UserGrants("'a'@'%'", EVERYTHING, True, True), "leader")
    assert line.startswith("views, triggers, events and routines whose DEFINER is another account will fail (error "
                           "1227")
    assert needs(UserGrants("'a'@'%'", EVERYTHING | {"SET USER"}, True, True), "leader") == []


def test_missing_privileges_are_named_with_the_grant():
    [line] = needs(UserGrants("'a'@'%'", EVERYTHING - {"EVENT", "TRIGGER"}, True, True), "consumer")
    assert line == ("'a'@'%' lacks TRIGGER (for CREATE/DROP TRIGGER), EVENT (for CREATE/ALTER/DROP EVENT): "
                    "GRANT TRIGGER, EVENT ON *.* TO 'a'@'%' if the leader uses them")
