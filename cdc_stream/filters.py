"""Which databases and tables flow: the same rules in producer and consumer.

A table passes when its database passes include_dbs/exclude_dbs AND "db.table"
passes include_tables/exclude_tables (shell globs, case-sensitive like MySQL on
Linux). DDL goes by the objects it creates, changes or drops (`Statement.writes`), never by
what it reads: a view in an excluded database over an included table is filtered,
and a statement changing objects on both sides of the filters stops the program
(CrossesFilters). Statements that change no database object (GRANT, SET, ...) pass
when any database or table they name passes (`Statement.targets`). What a statement
names is cdc_stream.classify's to say; this module only applies the rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from cdc_stream.classify import Statement, Written, classify
from cdc_stream.errors import CrossesFilters
from cdc_stream.mysql import quote_ident

if TYPE_CHECKING:
    from cdc_stream.profile import Filters


@dataclass(frozen=True)
class TableFilter:
    """The [filters] section of a profile, as a predicate."""

    include_dbs: tuple[str, ...] = ()
    exclude_dbs: tuple[str, ...] = ()
    include_tables: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    _cache: dict[tuple[str | None, str], bool] = field(default_factory=dict, compare=False, repr=False)
    _db_cache: dict[str | None, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_profile(cls, filters: Filters) -> TableFilter:
        """Build from a profile's Filters section."""
        return cls(
            tuple(filters.include_dbs), tuple(filters.exclude_dbs),
            tuple(filters.include_tables), tuple(filters.exclude_tables),
        )

    def allows_db(self, db: str | None) -> bool:
        """Whether anything of this database can flow (asked for every binlog event: kept per name)."""
        hit = self._db_cache.get(db)
        if hit is None:
            hit = self._db_cache[db] = self._allows_db(db)
        return hit

    def _allows_db(self, db: str | None) -> bool:
        if db is None:
            return not self.include_dbs and not self.include_tables
        if self.include_dbs and not _any(db, self.include_dbs):
            return False
        if _any(db, self.exclude_dbs):
            return False
        return not self.include_tables or any(fnmatchcase(db, p.split(".", 1)[0]) for p in self.include_tables)

    def allows_table(self, db: str | None, table: str) -> bool:
        """Whether row changes of db.table flow."""
        key = (db, table)
        hit = self._cache.get(key)
        if hit is None:
            name = f"{db}.{table}"
            hit = (
                self.allows_db(db)
                and (not self.include_tables or _any(name, self.include_tables))
                and not _any(name, self.exclude_tables)
            )
            self._cache[key] = hit
        return hit

    def allows_query(self, sql: str, default_db: str | None) -> bool:
        """`allows_statement` of the statement `sql` run with `default_db` as the session's database."""
        return self.allows_statement(classify(sql, default_db))

    def allows_statement(self, statement: Statement) -> bool:
        """Whether a statement flows: every object it creates, changes or drops passes (False when none
        does). A statement changing objects on both sides raises CrossesFilters: neither the whole of it
        nor a part can make the follower what the leader's included objects are. A statement changing no
        database object (GRANT, SET, ...) flows when any database or table it names passes."""
        writes = statement.writes
        if writes is None:
            return any(self._allows(db, name) for db, name in statement.targets)
        passes = [self._allows(db, name) for db, name in writes]
        if all(passes):
            return True
        if any(passes):
            raise crosses_filters(statement.text, [w for w, ok in zip(writes, passes) if ok],
                                 [w for w, ok in zip(writes, passes) if not ok])
        return False

    def _allows(self, db: str | None, name: str | None) -> bool:
        return self.allows_db(db) if name is None else self.allows_table(db, name)


def crosses_filters(sql: str, included: list[Written], excluded: list[Written]) -> CrossesFilters:
    """The error for a statement that changes objects on both sides of the filters (its cause and fix)."""
    shown = " ".join(sql.split())
    shown = shown if len(shown) <= 200 else shown[:197] + "..."
    detail = (
        f"the statement {shown!r} changes objects on both sides of [filters]: {_names(included)} "
        f"(included) and {_names(excluded)} (excluded); run whole it would change what the filters "
        "exclude, run in part the follower would no longer hold what the leader holds"
    )
    tables = [f"{db}.{name}" for db, name in dict.fromkeys(included) if name is not None]
    dbs = [db for db, name in dict.fromkeys(included) if name is None and db is not None]
    rules = " and ".join(f"{key} = {json.dumps(values)}" for key, values in
                         (("exclude_dbs", dbs), ("exclude_tables", tables)) if values)
    fix = (
        f"put all of them on one side of [filters] in both profiles and restart: exclude the included ones "
        f"too (add {rules or 'them'}), then do by hand on the follower what the statement did to them on "
        "the leader (such as dropping a table it renamed or dropped away); or include the excluded ones, "
        "which must then exist on the follower (create them, or cdc-producer PROFILE --snapshot db.table)"
    )
    return CrossesFilters(detail, fix)


def _names(objects: list[Written]) -> str:
    def one(db: str | None, name: str | None) -> str:
        if name is None:
            return f"database {quote_ident(db or '?')}"
        return f"{quote_ident(db)}.{quote_ident(name)}" if db is not None else quote_ident(name)

    return ", ".join(one(db, name) for db, name in dict.fromkeys(objects))


def _any(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)
