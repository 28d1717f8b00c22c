"""definitions.py: the trigger guard and the definer of stored objects' DDL (pure, no server)."""

from __future__ import annotations

import pytest

from cdc_consumer.definitions import guard_trigger, is_guarded, stored_object, with_definer


@pytest.mark.parametrize("sql, guarded", [
    ("CREATE DEFINER=`root`@`localhost` TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW SET NEW.v = NEW.v * 2",
     "CREATE DEFINER=`root`@`localhost` TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW "
     "IF @cdc_consumer IS NULL THEN SET NEW.v = NEW.v * 2; END IF"),
    # BEGIN ... END with a label, a trailing comment and `;`: they stay after END IF
    ("CREATE TRIGGER IF NOT EXISTS a AFTER DELETE ON t FOR EACH ROW FOLLOWS b\nmain: BEGIN\n  DECLARE n INT;\n"
     "  LEAVE main;\nEND main; -- done",
     "CREATE TRIGGER IF NOT EXISTS a AFTER DELETE ON t FOR EACH ROW FOLLOWS b\n"
     "IF @cdc_consumer IS NULL THEN main: BEGIN\n  DECLARE n INT;\n  LEAVE main;\nEND main; END IF; -- done"),
    # mysqldump's executable comments: the body ends before the comment's end
    ("/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER `t_bu` BEFORE UPDATE ON `t` "
     "FOR EACH ROW SET NEW.note = 'FOR EACH ROW' */",
     "/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER `t_bu` BEFORE UPDATE ON `t` "
     "FOR EACH ROW IF @cdc_consumer IS NULL THEN SET NEW.note = 'FOR EACH ROW'; END IF */"),
    ('CREATE OR REPLACE TRIGGER "q" BEFORE INSERT ON "t" FOR EACH ROW PRECEDES "x" SET NEW."v" = \'\xe9\'',
     'CREATE OR REPLACE TRIGGER "q" BEFORE INSERT ON "t" FOR EACH ROW PRECEDES "x" '
     'IF @cdc_consumer IS NULL THEN SET NEW."v" = \'\xe9\'; END IF'),
])
def test_a_trigger_body_is_wrapped_in_the_guard(sql, guarded):
    assert guard_trigger(sql, ansi_quotes=True) == guarded
    assert guard_trigger(guarded, ansi_quotes=True) is None  # already guarded
    body = guarded[guarded.index("IF @cdc_consumer"):]
    assert is_guarded(body[:body.rindex("END IF") + 6])


def test_only_create_trigger_is_guarded():
    for sql in ("CREATE TABLE t (id INT)", "DROP TRIGGER t_bi", "CREATE PROCEDURE p() SET @x = 1",
                "CREATE DEFINER=root@localhost VIEW v AS SELECT 1", "ALTER TABLE t ADD c INT"):
        assert guard_trigger(sql) is None, sql


def test_is_guarded_reads_information_schemas_action_statement():
    assert is_guarded("IF @cdc_consumer IS NULL THEN SET NEW.v = 1; END IF")
    assert not is_guarded("SET NEW.v = 1")
    assert not is_guarded("IF @cdc_consumer IS NULL THEN SET NEW.v = 1; ELSE SET NEW.v = 2; END IF x")


@pytest.mark.parametrize("sql, kind, replaced", [
    ("CREATE DEFINER=`root`@`localhost` TRIGGER t BEFORE INSERT ON t FOR EACH ROW SET NEW.v = 1", "TRIGGER",
     "CREATE DEFINER=CURRENT_USER TRIGGER t BEFORE INSERT ON t FOR EACH ROW SET NEW.v = 1"),
    ("CREATE OR REPLACE ALGORITHM=MERGE DEFINER='a'@'%' SQL SECURITY DEFINER VIEW v AS SELECT 1", "VIEW",
     "CREATE OR REPLACE ALGORITHM=MERGE DEFINER=CURRENT_USER SQL SECURITY DEFINER VIEW v AS SELECT 1"),
    ("ALTER DEFINER = root@localhost EVENT e DISABLE", "EVENT", "ALTER DEFINER=CURRENT_USER EVENT e DISABLE"),
    ("CREATE DEFINER=`root`@`localhost` AGGREGATE FUNCTION f(x INT) RETURNS INT BEGIN RETURN 1; END", "FUNCTION",
     "CREATE DEFINER=CURRENT_USER AGGREGATE FUNCTION f(x INT) RETURNS INT BEGIN RETURN 1; END"),
    ("/*!50003 CREATE*/ /*!50020 DEFINER=`root`@`localhost`*/ /*!50003 PROCEDURE p() SELECT 1 */", "PROCEDURE",
     "/*!50003 CREATE*/ /*!50020 DEFINER=CURRENT_USER*/ /*!50003 PROCEDURE p() SELECT 1 */"),
    ("CREATE DEFINER=CURRENT_USER() PACKAGE pk AS FUNCTION f() RETURNS INT; END", "PACKAGE",
     "CREATE DEFINER=CURRENT_USER PACKAGE pk AS FUNCTION f() RETURNS INT; END"),
    ("CREATE SQL SECURITY INVOKER VIEW v AS SELECT 1", "VIEW", "CREATE SQL SECURITY INVOKER VIEW v AS SELECT 1"),
])
def test_the_definer_clause_is_replaced(sql, kind, replaced):
    obj = stored_object(sql)
    assert obj is not None and obj.kind == kind
    assert with_definer(sql) == replaced


def test_other_statements_keep_their_definer_words():
    for sql in ("CREATE TABLE t (definer INT)", "INSERT INTO t VALUES ('DEFINER=`root`@`localhost`')",
                "GRANT SELECT ON *.* TO root@localhost", "CREATE USER definer@localhost"):
        assert stored_object(sql) is None and with_definer(sql) == sql
