"""A statement's context: the INTVAR, RAND and USER_VAR events logged before it -> its QuerySession (pure).

A statement logged as a statement (DML of a session with binlog_format STATEMENT or MIXED, and DDL
whose text the leader evaluates, such as `CREATE EVENT e ON SCHEDULE EVERY @s SECOND` or a view
with RAND()) is preceded by events holding what it ran with: the auto-increment value it used and
what LAST_INSERT_ID() returned (INTVAR), RAND()'s seeds (RAND), and each user variable it read
(USER_VAR). A native replica sets them before running it, as mariadb-binlog prints them:
`SET INSERT_ID=..`, `SET LAST_INSERT_ID=..`, `SET @@RAND_SEED1=.., @@RAND_SEED2=..`,
`SET @`name`:=..`. `read_context` reads one event's body (MariaDB's and MySQL's sql/log_event.cc),
`with_context` puts what the events before a statement held into that statement's session, where
the consumer sets it (cdc_consumer/session.py).

Bodies (after the 19-byte header, before the checksum if the stream has one):
- INTVAR: type (1: 1 LAST_INSERT_ID, 2 INSERT_ID), value (8, little-endian unsigned).
- RAND: seed1 (8), seed2 (8).
- USER_VAR: name length (4), name, is_null (1); unless NULL: value type (1: 0 STRING, 1 REAL, 2 INT,
  4 DECIMAL), collation id (4), value length (4), the value, then an optional flags byte (bit 0x01:
  UNSIGNED; the leader writes it for INT values, and a reader takes it when a byte is left).
  REAL is a double (8, little-endian); INT 8 bytes little-endian; DECIMAL is precision (1), scale
  (1), then MySQL's binary DECIMAL (unpack.decimal_reader).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass

import msgspec

from cdc_producer.unpack import DIG2BYTES, decimal_reader
from cdc_stream.events import QuerySession, UserVar, UserVarKind

INTVAR_EVENT, RAND_EVENT, USER_VAR_EVENT = 5, 13, 14
_LAST_INSERT_ID, _INSERT_ID = 1, 2
_KINDS: dict[int, UserVarKind] = {0: "string", 1: "real", 2: "int", 4: "decimal"}
_UNSIGNED = 0x01
_MAX_DECIMAL_DIGITS = 65


@dataclass(frozen=True, slots=True)
class InsertId:
    """An INTVAR event: the statement's INSERT_ID, or (`last`) its LAST_INSERT_ID."""

    last: bool
    value: int


@dataclass(frozen=True, slots=True)
class RandSeeds:
    """A RAND event: the seeds RAND() started from in the statement."""

    seed1: int
    seed2: int


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A context event cdc-producer cannot read (`why`): the statement it belongs to cannot be published."""

    why: str


StatementContext = InsertId | RandSeeds | UserVar | Unreadable


def read_context(event_type: int, body: bytes) -> StatementContext:
    """One INTVAR, RAND or USER_VAR event's body (without header and checksum) -> what it holds."""
    try:
        if event_type == INTVAR_EVENT:
            kind, value = struct.unpack_from("<BQ", _need(body, 9))
            if kind not in (_LAST_INSERT_ID, _INSERT_ID):
                return Unreadable(f"an INTVAR event of unknown type {kind}")
            return InsertId(kind == _LAST_INSERT_ID, value)
        if event_type == RAND_EVENT:
            return RandSeeds(*struct.unpack_from("<QQ", _need(body, 16)))
        if event_type == USER_VAR_EVENT:
            return _user_var(body)
    except struct.error:  # (_need's, or struct's own): the body ends before a field it must hold
        return Unreadable(f"a truncated event of type {event_type} ({len(body)} bytes)")
    return Unreadable(f"an event of type {event_type}")


def _need(body: bytes, size: int) -> bytes:
    if len(body) < size:
        raise struct.error(f"{size} bytes needed")
    return body


def _user_var(body: bytes) -> StatementContext:
    (name_len,) = struct.unpack_from("<I", _need(body, 4))
    pos = 4 + name_len
    name = _need(body, pos + 1)[4:pos].decode("utf-8", "surrogateescape")  # the server's names are utf8mb3
    if body[pos]:
        return UserVar(name)
    kind_code, collation, size = struct.unpack_from("<BII", _need(body, pos + 10), pos + 1)
    start = pos + 10
    raw = _need(body, start + size)[start:start + size]
    flags = body[start + size] if len(body) > start + size else 0
    kind = _KINDS.get(kind_code)
    if kind is None:
        return Unreadable(f"a user variable @{name} whose value has type {kind_code}, which cdc-producer cannot read")
    if kind == "string":
        return UserVar(name, kind, base64.b64encode(raw).decode("ascii"), collation)
    if kind == "real":
        (real,) = struct.unpack("<d", _need(raw, 8)[:8])
        return UserVar(name, kind, repr(real))
    if kind == "int":
        unsigned = bool(flags & _UNSIGNED)
        return UserVar(name, kind, str(int.from_bytes(_need(raw, 8)[:8], "little", signed=not unsigned)),
                       unsigned=unsigned)
    precision, scale = _need(raw, 2)[0], raw[1]
    if not scale <= precision <= _MAX_DECIMAL_DIGITS or len(raw) != 2 + _decimal_size(precision, scale):
        return Unreadable(f"a user variable @{name} holding a DECIMAL({precision},{scale}) of {len(raw) - 2} bytes, "
                          "which cdc-producer cannot read")
    tagged, _ = decimal_reader(precision, scale)(raw, 2)
    return UserVar(name, kind, tagged["Decimal"])


def _decimal_size(precision: int, scale: int) -> int:
    """The bytes of MySQL's binary DECIMAL(precision, scale) (strings/decimal.c decimal_bin_size)."""
    intg = precision - scale
    return 4 * (intg // 9) + DIG2BYTES[intg % 9] + 4 * (scale // 9) + DIG2BYTES[scale % 9]


def with_context(session: QuerySession | None, context: list[StatementContext]) -> QuerySession | None:
    """The statement's session with what the context events before it held (the last of each kind
    wins, as on a replica; user variables in the leader's order). None/[] -> the session unchanged."""
    if not context:
        return session
    insert_id = last_insert_id = seeds = None
    user_vars: list[UserVar] = []
    for item in context:
        if isinstance(item, InsertId):
            if item.last:
                last_insert_id = item.value
            else:
                insert_id = item.value
        elif isinstance(item, RandSeeds):
            seeds = item
        elif isinstance(item, UserVar):
            user_vars.append(item)
    return msgspec.structs.replace(
        session if session is not None else QuerySession(), insert_id=insert_id, last_insert_id=last_insert_id,
        rand_seed1=seeds.seed1 if seeds else None, rand_seed2=seeds.seed2 if seeds else None,
        user_vars=tuple(user_vars))


def unreadable(context: list[StatementContext]) -> list[str]:
    """Why each context event that could not be read could not (none: the statement can be published)."""
    return [item.why for item in context if isinstance(item, Unreadable)]
