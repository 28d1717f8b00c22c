"""TOML profiles: loading, ${ENV} interpolation, ~ expansion, validation.

Every problem is reported as a ConfigError naming the file and the field, because
a typo in a profile silently ignored is how CDC pipelines lose data.
The Fluvio tutorial's field names are accepted as they are.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from cdc_stream.errors import ConfigError

DEFAULT_TOPIC = "rust-mysql-cdc"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class LeaderDatabase(_Section, kw_only=True):
    """[database] of a producer profile: the leader, read as a replica."""

    ip_or_host: str = "127.0.0.1"
    port: int = 3306
    user: str
    password: str = ""
    server_id: int = 5401
    connect_timeout: float = 10.0

    def __repr__(self) -> str:  # secrets never reach logs
        return f"LeaderDatabase({self.user}@{self.ip_or_host}:{self.port}, server_id={self.server_id})"


class FollowerDatabase(_Section, kw_only=True):
    """[database] of a consumer profile: the follower the events are replayed on."""

    ip_or_host: str = "127.0.0.1"
    port: int = 3306
    user: str
    password: str = ""
    connect_timeout: float = 10.0

    def __repr__(self) -> str:
        return f"FollowerDatabase({self.user}@{self.ip_or_host}:{self.port})"


class Data(_Section, kw_only=True):
    """[data]: where the program keeps local state."""

    base_path: str = "~/mysql-cdc/state"
    # The tutorial's file names: accepted so its profiles load, not used
    # (positions live on the topic and in the follower, not in local files).
    binlog_index_file: str | None = None
    resume_offset_file: str | None = None
    local_store_file: str | None = None
    last_offset_file: str | None = None


class Filters(_Section, kw_only=True):
    """[filters]: which databases and tables flow (globs; tables as "db.table")."""

    include_dbs: list[str] = []
    exclude_dbs: list[str] = []
    include_tables: list[str] = []
    exclude_tables: list[str] = []


class Stream(_Section, kw_only=True):
    """[stream]: where the topic lives."""

    backend: Literal["embedded", "fluvio"] | None = None
    path: str = "~/mysql-cdc/stream"
    topic: str = DEFAULT_TOPIC  # or a per-table template such as "{database}_{table}"
    transaction_topic: str = "mysql-cdc-transactions"  # orders per-table topics (used with a template)
    fluvio_endpoint: str | None = None
    fluvio_profile: str | None = None
    partitions: int = 1
    retention_seconds: int | None = None


class Snapshot(_Section, kw_only=True):
    """[snapshot]: copying existing tables before streaming."""

    mode: Literal["initial", "never", "always"] = "initial"
    chunk_size: int = 1000
    # "consistent": every table in one consistent-snapshot transaction, then the binlog (snapshot.py);
    # "watermark": chunks interleaved with the binlog, each its own short read (cdc_producer/chunks.py).
    # Consistent is the default: a live copy cannot keep foreign keys between the tables it copies (a
    # streamed child row may reference a parent row no chunk has copied yet), which many schemas have.
    method: Literal["watermark", "consistent"] = "consistent"
    parallel: int = 1  # chunks of one table read at once, by key range (watermark method)
    rate_limit: float = 0.0  # rows per second at most (0: no limit)
    # "db.table" on the leader: a row inserted there asks the running producer to copy tables
    signal_table: str | None = None


class Events(_Section, kw_only=True):
    """[events]: what the producer puts on row events beside the changed rows."""

    # The leader's own binlog events of each row batch (`binlog`), for a follower of the same kind to
    # replay exactly with BINLOG (triggers, system versioning). Off: a smaller topic and a faster
    # producer; followers then apply rows as SQL (bench/README.md has the figures).
    binlog: bool = True


class Metrics(_Section, kw_only=True):
    """[metrics]: the Prometheus endpoint (/metrics and /healthz), off unless `listen` is set."""

    listen: str | None = None  # "HOST:PORT", e.g. "127.0.0.1:9108"


class Logging(_Section, kw_only=True):
    """[logging]: how status and error lines are written on stderr."""

    format: Literal["human", "json"] = "human"


class Fluvio(_Section, kw_only=True):
    """[fluvio]: the tutorial's section; `topic` is an alias of [stream] topic."""

    topic: str | None = None
    replicas: int | None = None


class Container(_Section, kw_only=True):
    """[container]: used by the tutorial's docker scripts; accepted and ignored."""

    name: str | None = None
    host_port: int | None = None


class Replay(_Section, kw_only=True):
    """[replay] of a consumer profile: how rows and account statements are applied on the follower."""

    # "auto": BINLOG replay (the follower's own row applier, exactly as a native replica) where the event
    # carries the leader's binlog events, the follower is the leader's kind and its user may run BINLOG;
    # SQL otherwise. "binlog": refuse to start unless BINLOG replay is possible. "sql": always SQL.
    rows: Literal["auto", "binlog", "sql"] = "auto"
    # "skip": account statements (CREATE/ALTER/DROP/RENAME USER, GRANT, REVOKE, SET PASSWORD, roles) are
    # logged and counted, not run; "apply": run them (an account that already exists/is missing is logged).
    accounts: Literal["skip", "apply"] = "skip"
    # Replicated CREATE TRIGGER: "guarded": the body wrapped in IF @cdc_consumer IS NULL THEN ... END IF, so
    # the consumer's SQL rows do not fire it (every other session does); "leader": the leader's text (rows
    # of such a table that take SQL are refused); "auto": "guarded" when rows take SQL (rows = "sql", or the
    # follower user may not run BINLOG), else "leader".
    triggers: Literal["auto", "guarded", "leader"] = "auto"
    # The definer of replicated views, triggers, events and routines: "leader" (the leader's DEFINER: the
    # follower user needs SET USER or SUPER unless it is that account), "consumer" (the consumer's user).
    definer: Literal["leader", "consumer"] = "leader"
    # Follower sessions applying groups of transactions at once (parallel.py): groups touching different
    # rows run side by side, commits stay in the leader's order, each with its checkpoint. 1: one session.
    workers: typing.Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    # Rows that take SQL on a MariaDB follower: inserted and upserted rows of larger events travel as
    # parameters of one prepared statement run by MariaDB's bulk execution (the follower parses the
    # statement once, not every row's literals). false: every row as literals in SQL text, as on MySQL.
    bulk: bool = True


class StreamProfile(msgspec.Struct, kw_only=True):
    """Just the parts cdc-topic needs; other sections are ignored."""

    stream: Stream = msgspec.field(default_factory=Stream)
    fluvio: Fluvio | None = None


class ProducerProfile(_Section, kw_only=True):
    """A cdc-producer profile."""

    mysql_resource_name: str
    database: LeaderDatabase
    data: Data = msgspec.field(default_factory=Data)
    filters: Filters = msgspec.field(default_factory=Filters)
    stream: Stream = msgspec.field(default_factory=Stream)
    snapshot: Snapshot = msgspec.field(default_factory=Snapshot)
    events: Events = msgspec.field(default_factory=Events)
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    logging: Logging = msgspec.field(default_factory=Logging)
    fluvio: Fluvio | None = None
    container: Container | None = None


class ConsumerProfile(_Section, kw_only=True):
    """A cdc-consumer profile."""

    database: FollowerDatabase
    mysql_resource_name: str | None = None
    data: Data = msgspec.field(default_factory=Data)
    filters: Filters = msgspec.field(default_factory=Filters)
    stream: Stream = msgspec.field(default_factory=Stream)
    replay: Replay = msgspec.field(default_factory=Replay)
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    logging: Logging = msgspec.field(default_factory=Logging)
    fluvio: Fluvio | None = None
    container: Container | None = None


P = TypeVar("P", ProducerProfile, ConsumerProfile, StreamProfile)


def load_producer_profile(path: str | os.PathLike[str]) -> ProducerProfile:
    """Load and validate a producer profile; raises ConfigError naming file and field."""
    return _load(Path(path), ProducerProfile)


def load_consumer_profile(path: str | os.PathLike[str]) -> ConsumerProfile:
    """Load and validate a consumer profile; raises ConfigError naming file and field."""
    return _load(Path(path), ConsumerProfile)


def load_stream_profile(path: str | os.PathLike[str]) -> StreamProfile:
    """Load only the stream settings of a producer or consumer profile (for cdc-topic)."""
    return _load(Path(path), StreamProfile)


def _load(path: Path, kind: type[P]) -> P:
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{name}: profile not found; pass the path of a TOML profile (examples in profiles/)") from None
    except OSError as e:
        raise ConfigError(f"{name}: cannot read profile: {e.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{name}: TOML syntax error: {e}") from None
    raw = _interpolate(raw, name, [])
    try:
        profile: P = msgspec.convert(raw, kind)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{name}: {_explain(str(e), kind)}") from None
    _resolve(profile, name)
    return profile


def parse_listen(text: str) -> tuple[str, int]:
    """(host, port) of a metrics listen address "HOST:PORT" ("[::1]:9108" for IPv6); raises ValueError
    naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or "[" in host or "]" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9108)")
    return host, int(port)


def _interpolate(value: Any, file: str, where: list[str]) -> Any:
    """Replace ${VAR} in every string with the environment variable's value."""
    if isinstance(value, dict):
        return {k: _interpolate(v, file, where + [k]) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, file, where) for v in value]
    if isinstance(value, str) and "${" in value:

        def sub(m: re.Match[str]) -> str:
            var = m.group(1)
            if var not in os.environ:
                raise ConfigError(
                    f"{file}: {_field_name(where)} uses ${{{var}}} but the environment variable {var} is not set; "
                    f"export {var}=... before starting"
                )
            return os.environ[var]

        return _ENV_REF.sub(sub, value)
    return value


def _field_name(where: list[str]) -> str:
    if not where:
        return "the profile"
    if len(where) == 1:
        return f"field '{where[0]}'"
    return f"[{'.'.join(where[:-1])}] {where[-1]}"


_MSGSPEC_PATH = re.compile(r" - at `\$((?:\.[^`]*)?)`$")


def _choices(kind: type, where: list[str]) -> tuple[Any, ...]:
    """The values a Literal field at `where` (section, field) of profile `kind` allows; () if it is no Literal."""
    hint: Any = kind
    for name in where:
        hints = typing.get_type_hints(hint) if isinstance(hint, type) else {}
        hint = hints.get(name)
        args = [a for a in typing.get_args(hint) if a is not type(None)] if hint is not None else []
        if typing.get_origin(hint) is not Literal and args and len(args) == 1:
            hint = args[0]  # Section | None
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()


def _explain(message: str, kind: type | None = None) -> str:
    """Turn msgspec's 'Expected `int`, got `str` - at `$.database.port`' into profile words."""
    m = _MSGSPEC_PATH.search(message)
    where = m.group(1).lstrip(".").split(".") if m and m.group(1) else []
    detail = _MSGSPEC_PATH.sub("", message)
    section = f"[{'.'.join(where[:-1])}] " if len(where) > 1 else ""
    field = where[-1] if where else ""
    if u := re.match(r"Object contains unknown field `(.*)`", detail):
        place = f"[{'.'.join(where)}]" if where else "the top level"
        return f"unknown field '{u.group(1)}' in {place}; check its spelling against profiles/*.toml"
    if r := re.match(r"Object missing required field `(.*)`", detail):
        place = f"[{'.'.join(where)}]" if where else "the top level"
        return f"missing required field '{r.group(1)}' in {place}"
    if detail.startswith("Invalid enum value") and kind is not None and (allowed := _choices(kind, where)):
        return f"{section}{field}: {detail}; use one of " + ", ".join(f'"{v}"' for v in allowed)
    if t := re.match(r"Expected `(.*)`, got `(.*)`", detail):
        hint = "; write true or false, without quotes" if t.group(1) == "bool" else ""
        return f"{section}{field}: expected {t.group(1)}, got {t.group(2)}{hint}"
    return f"{section}{field}: {detail}" if where else detail


def _resolve(profile: ProducerProfile | ConsumerProfile | StreamProfile, file: str) -> None:
    """Apply aliases and defaults that depend on other fields; expand ~ in paths."""
    stream: Stream = profile.stream
    if profile.fluvio is not None and profile.fluvio.topic:
        if stream.topic not in (DEFAULT_TOPIC, profile.fluvio.topic):
            raise ConfigError(
                f"{file}: [fluvio] topic = '{profile.fluvio.topic}' contradicts [stream] topic = '{stream.topic}'; "
                "keep one"
            )
        stream.topic = profile.fluvio.topic
    wants_fluvio = bool(stream.fluvio_endpoint or stream.fluvio_profile)
    if stream.backend is None:
        stream.backend = "fluvio" if wants_fluvio else "embedded"
    elif stream.backend == "embedded" and wants_fluvio:
        raise ConfigError(
            f"{file}: [stream] backend = 'embedded' but fluvio_endpoint/fluvio_profile is set; "
            "remove one of them"
        )
    if not stream.topic:
        raise ConfigError(f"{file}: [stream] topic must not be empty")
    from cdc_stream.layout import check_template

    if problem := check_template(stream.topic):
        raise ConfigError(f"{file}: [stream] {problem}")
    stream.path = os.path.expanduser(stream.path)
    if isinstance(profile, (ProducerProfile, ConsumerProfile)):
        if profile.metrics.listen is not None:
            try:
                parse_listen(profile.metrics.listen)
            except ValueError as e:
                raise ConfigError(f"{file}: [metrics] listen: {e}") from None
        profile.data.base_path = os.path.expanduser(profile.data.base_path)
    if isinstance(profile, ProducerProfile):
        snap = profile.snapshot
        if snap.chunk_size < 1 or snap.parallel < 1 or snap.rate_limit < 0:
            raise ConfigError(f"{file}: [snapshot] chunk_size and parallel must be at least 1, rate_limit not negative")
        if snap.signal_table is not None:
            db, dot, table = snap.signal_table.partition(".")
            if not dot or not db or not table or db == "mysql_cdc":
                raise ConfigError(f"{file}: [snapshot] signal_table: '{snap.signal_table}' must be 'database.table' "
                                  "on the leader, outside mysql_cdc (e.g. 'cdc_control.signals')")
        for field in ("include_dbs", "exclude_dbs", "include_tables", "exclude_tables"):
            for pattern in getattr(profile.filters, field):
                if field.endswith("tables") and "." not in pattern:
                    raise ConfigError(
                        f"{file}: [filters] {field}: '{pattern}' must be 'database.table' "
                        "(globs allowed, e.g. 'shop.*')"
                    )
