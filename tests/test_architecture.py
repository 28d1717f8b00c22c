"""One owner per concept, checked on the source (no server, no import of the product: `ast` only).

The rules, over the product code (the packages cdc_*/ and spark/):

1. SQL statement parsing: only SQLGLOT_MODULE imports sqlglot.
2. GTID text: only POSITIONS_MODULE parses it. A module parses GTID text when it imports the library's
   GTID parser (`pymysqlreplication.gtid`: `Gtid`, `GtidSet`), splits or partitions a value whose
   expression names a GTID (`gtid_set.split(",")`, `ev.gtid.rsplit("-", 1)`, `gtid.partition(":")`: the
   separators of a MariaDB state "0-1-42,1-2-7" and of a MySQL set "uuid:1-42"), or holds a regular
   expression of a MariaDB GTID (`\\d+-\\d+-\\d+`). Anything else asks positions.py.
3. Package dependencies point one way: Spark code (cdc_spark/, spark/) does not import cdc_consumer.
4. Errors: an exception class (deriving, through any chain of the product's classes, from a built-in
   exception or a class named ...Error/...Exception) is defined in ERRORS_MODULE, unless it is control
   flow that never reaches a user (CONTROL_FLOW_EXCEPTIONS, each with why).
5. Identifier quoting goes through QUOTING_MODULE's `quote_ident`/`qualified`: elsewhere no
   `.replace("`", "``")`, no f-string or concatenation that puts backticks around a value
   (f"`{db}`"), no "`%s`" % ... or "`{}`".format(...).

Each rule has an allow-list of today's offenders that other work of issue 25 is removing
("TODO issue 25: being moved"); an entry that no longer offends fails `test_allow_lists_are_not_stale`,
so the lists only shrink.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SQLGLOT_MODULE = "cdc_stream/classify.py"  # the statement classifier
POSITIONS_MODULE = "cdc_stream/positions.py"
ERRORS_MODULE = "cdc_stream/errors.py"
QUOTING_MODULE = "cdc_stream/mysql.py"
SPARK_PACKAGES = ("cdc_spark/", "spark/")

# Rule 1: modules other than SQLGLOT_MODULE that import sqlglot today.
SQLGLOT_TODO = set[str]()

# Rule 2: modules other than POSITIONS_MODULE that parse GTID text today.
GTID_TODO = set[str]()

# Rule 3: Spark modules that import cdc_consumer today.
SPARK_IMPORTS_CONSUMER_TODO = set[str]()

# Rule 4: exceptions that stay where they are used: control flow, caught inside the product and never
# shown to a user as they are ("module:Class").
CONTROL_FLOW_EXCEPTIONS = {
    "cdc_stream/shutdown.py:Shutdown",  # out of a blocking read when a stop was requested; the CLIs exit cleanly
    "cdc_producer/assemble.py:RereadTransaction",  # run.py reads the open transaction again from its start
    "cdc_consumer/batch.py:StatementFailed",  # the Replayer turns a follower's failure into its DataError
    "cdc_consumer/failures.py:EventProblem",  # the Replayer's own, turned into its DataError with the offset
    "cdc_consumer/versioning.py:Refused",  # a reason the Replayer puts into its DataError
    "cdc_spark/convert.py:Untypable",  # a value kept in _cdc_raw instead of its typed column
    "cdc_stream/values.py:BadValue",  # callers (replayer, convert, audit) turn it into their own error
    "cdc_producer/chunks.py:CopyError",  # run.py turns it into a retry or a DataError naming the table
    "cdc_spark/lakefiles.py:GroupError",  # caught in lakefiles.py, which names the offset
    "cdc_producer/library_patches.py:UnreadableTableMap",  # the table-map wrapper turns it into a DataError
    "cdc_stream/events.py:_RowsNotDecoded",  # decode_event decodes the record again, which says what is wrong
}
# Rule 4: user-visible exceptions defined outside ERRORS_MODULE today.
EXCEPTIONS_TODO = set[str]()

# Rule 5: hand quoting outside QUOTING_MODULE today, as "module piece" (a line number would change with
# every edit). None of them doubles a backtick inside the name.
QUOTING_TODO = set[str]()
# Rule 5: backticks around a value that is not an identifier (they stay).
NOT_IDENTIFIERS = {
    "cdc_spark/lake.py `{r.ddl}`",  # a DDL statement shown in a message
}


@dataclass(frozen=True)
class Module:
    path: str  # relative to the repository, with "/"
    tree: ast.Module


@cache
def product_modules() -> tuple[Module, ...]:
    paths = sorted(p for d in [*ROOT.glob("cdc_*"), ROOT / "spark"] if d.is_dir() for p in d.rglob("*.py"))
    assert len(paths) > 50, f"found only {len(paths)} product modules under {ROOT}"
    return tuple(Module(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(), str(p))) for p in paths)


def imported(module: Module) -> set[str]:
    """The absolute module names `module` imports (at any depth: lazy imports count)."""
    names = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imports(module: Module, package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in imported(module))


# -- the rules: each returns the offending modules (or classes) ------------------------------------


@cache
def sqlglot_importers() -> frozenset[str]:
    return frozenset(m.path for m in product_modules() if imports(m, "sqlglot")) - {SQLGLOT_MODULE}


_SPLITS = {"split", "rsplit", "partition", "rpartition"}
_GTID_SEPARATORS = {"-", ":", ","}
_MARIADB_GTID_REGEX = re.compile(r"(?:\\d|\[0-9\])[+*]?-" * 2 + r"(?:\\d|\[0-9\])")  # \d+-\d+-\d (or [0-9])
_REGEX_GROUPS = re.compile(r"\(\?:|\(\?P<\w+>|[()]")  # (, (?:, (?P<name> and ) go before the search


def parses_gtid_text(module: Module) -> bool:
    if imports(module, "pymysqlreplication.gtid"):
        return True
    for node in ast.walk(module.tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SPLITS
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in _GTID_SEPARATORS
                and "gtid" in ast.unparse(node.func.value).lower()):
            return True
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and _MARIADB_GTID_REGEX.search(_REGEX_GROUPS.sub("", node.value))):
            return True
    return False


@cache
def gtid_parsers() -> frozenset[str]:
    return frozenset(m.path for m in product_modules() if parses_gtid_text(m)) - {POSITIONS_MODULE}


@cache
def spark_importing_consumer() -> frozenset[str]:
    return frozenset(m.path for m in product_modules()
                     if m.path.startswith(SPARK_PACKAGES) and imports(m, "cdc_consumer"))


_BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


def _base_name(base: ast.expr) -> str:
    return ast.unparse(base).rsplit(".", 1)[-1].split("[", 1)[0]


@cache
def exception_classes(modules: tuple[Module, ...] | None = None) -> frozenset[str]:
    """Every exception class of `modules` (the product's) as "module:Class": a class deriving from one."""
    classes = [(m.path, node) for m in modules or product_modules() for node in ast.walk(m.tree)
               if isinstance(node, ast.ClassDef)]
    known = set(_BUILTIN_EXCEPTIONS)
    found: set[str] = set()
    grew = True
    while grew:  # through chains of the product's own classes, in whatever order they are defined
        grew = False
        for path, node in classes:
            bases = {_base_name(b) for b in node.bases}
            if f"{path}:{node.name}" not in found and (
                    bases & known or any(b.endswith(("Error", "Exception")) for b in bases)):
                found.add(f"{path}:{node.name}")
                known.add(node.name)
                grew = True
    return frozenset(found)


@cache
def exceptions_outside_errors() -> frozenset[str]:
    return frozenset(c for c in exception_classes() if not c.startswith(ERRORS_MODULE + ":")) - CONTROL_FLOW_EXCEPTIONS


_FORMAT_QUOTING = re.compile(r"`(%s|\{[^{}]*\})`")


def _is_str(node: ast.expr, test) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and test(node.value)


def _backticks_around_a_value(parts: list[ast.expr]) -> list[str]:
    """In pieces of a string built in order (an f-string's, a + chain's): each "...`", value, "`..."."""
    return [f"`{{{ast.unparse(v.value if isinstance(v, ast.FormattedValue) else v)}}}`"
            for a, v, b in zip(parts, parts[1:], parts[2:])
            if _is_str(a, lambda s: s.endswith("`")) and not isinstance(v, ast.Constant)
            and _is_str(b, lambda s: s.startswith("`"))]


def _added(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _added(node.left) + _added(node.right)
    return [node]


def hand_quoting(module: Module) -> set[str]:
    """The hand quoting in `module`, each as a short piece of its source: "`{name}`", "name.replace('`', '``')"."""
    found = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if node.func.attr == "replace" and args[:2] == ["`", "``"]:
                found.add(ast.unparse(node))
            if node.func.attr == "format" and isinstance(node.func.value, ast.Constant):
                found |= {m[0] for m in _FORMAT_QUOTING.finditer(str(node.func.value.value))}
        if isinstance(node, ast.JoinedStr):
            found |= set(_backticks_around_a_value(node.values))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            found |= set(_backticks_around_a_value(_added(node)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
            found |= {m[0] for m in _FORMAT_QUOTING.finditer(str(node.left.value))}
    return found


@cache
def hand_quoters() -> frozenset[str]:
    """Hand quoting outside QUOTING_MODULE, each as "module piece"."""
    return frozenset(f"{m.path} {piece}" for m in product_modules() if m.path != QUOTING_MODULE
                     for piece in hand_quoting(m))


# -- the tests -------------------------------------------------------------------------------------


def test_only_one_module_imports_sqlglot():
    assert sqlglot_importers() <= SQLGLOT_TODO, (
        f"only {SQLGLOT_MODULE} parses SQL statements with sqlglot; ask it instead")


def test_only_positions_parses_gtid_text():
    assert gtid_parsers() <= GTID_TODO, f"only {POSITIONS_MODULE} parses GTID text; use its functions"


def test_spark_code_does_not_import_the_consumer():
    assert spark_importing_consumer() <= SPARK_IMPORTS_CONSUMER_TODO, (
        "cdc_spark/ and spark/ must not import cdc_consumer: move what both need to cdc_stream")


def test_user_visible_exceptions_are_defined_in_errors():
    assert exceptions_outside_errors() <= EXCEPTIONS_TODO, (
        f"define a user-visible error in {ERRORS_MODULE}'s hierarchy; an exception that is only control "
        "flow (caught inside the product) goes into CONTROL_FLOW_EXCEPTIONS with why")


def test_identifiers_are_quoted_only_by_mysql_module():
    assert hand_quoters() <= QUOTING_TODO | NOT_IDENTIFIERS, (
        f"quote identifiers with {QUOTING_MODULE}'s quote_ident/qualified")


@pytest.mark.parametrize(("allowed", "offenders"), [
    (SQLGLOT_TODO, sqlglot_importers),
    (GTID_TODO, gtid_parsers),
    (SPARK_IMPORTS_CONSUMER_TODO, spark_importing_consumer),
    (CONTROL_FLOW_EXCEPTIONS, exception_classes),
    (EXCEPTIONS_TODO, exceptions_outside_errors),
    (QUOTING_TODO, hand_quoters),
    (NOT_IDENTIFIERS, hand_quoters),
], ids=["sqlglot", "gtid", "spark-imports-consumer", "control-flow-exceptions", "exceptions", "quoting",
        "not-identifiers"])
def test_allow_lists_are_not_stale(allowed, offenders):
    """An entry that no longer offends (moved, renamed, deleted) must leave its list: the lists only shrink."""
    assert allowed - offenders() == set()


# -- the detectors themselves, on small sources ----------------------------------------------------


def _module(source: str) -> Module:
    return Module("x.py", ast.parse(source))


@pytest.mark.parametrize("source", [
    "from pymysqlreplication.gtid import GtidSet",
    "import pymysqlreplication.gtid",
    "domain, server, seq = ev.gtid.split('-')",
    "for part in gtid_set.split(','): pass",
    "uuid, _, rest = self.gtid.partition(':')",
    "n = int(gtid.rsplit('-', 1)[1])",
    r"GTID = re.compile(r'(\d+)-(\d+)-(\d+)')",
    r"GTID = re.compile(r'(?P<domain>[0-9]+)-(?P<server>[0-9]+)-(?P<seq>[0-9]+)')",
])
def test_gtid_parsing_is_detected(source):
    assert parses_gtid_text(_module(source))


@pytest.mark.parametrize("source", [
    "from cdc_stream.positions import mariadb_state",
    "file, _, pos = position.rpartition(':')",
    "words = line.split(',')",
    "gtid = row[0]",
])
def test_other_code_is_not_gtid_parsing(source):
    assert not parses_gtid_text(_module(source))


@pytest.mark.parametrize("source", [
    'q = "`" + name.replace("`", "``") + "`"',
    'q = "`" + name + "`"',
    'sql = f"SELECT * FROM `{db}`.`{table}`"',
    'sql = "DROP TABLE `%s`" % table',
    'sql = "DROP TABLE `{}`".format(table)',
])
def test_hand_quoting_is_detected(source):
    assert hand_quoting(_module(source))


@pytest.mark.parametrize("source", [
    "sql = f'SELECT * FROM {qualified(db, table)}'",
    "doc = 'run `cdc-producer --check` first'",
    "msg = f'set `[replay] rows` to {value}'",
    "text = name.replace('``', '`')",
])
def test_other_code_is_not_hand_quoting(source):
    assert not hand_quoting(_module(source))


def test_exceptions_are_found_through_chains_in_any_order():
    late = Module("late.py", ast.parse("class Late(Middle): pass\nclass Plain: pass\nclass Generic(list[int]): pass"))
    early = Module("early.py", ast.parse("class Middle(errors.CdcError): pass\nclass Stop(BaseException): pass\n"
                                         "class Odd(KeyError): pass\nclass Data: pass"))
    assert exception_classes((late, early)) == {"late.py:Late", "early.py:Middle", "early.py:Stop", "early.py:Odd"}
