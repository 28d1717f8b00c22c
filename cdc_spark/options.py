"""The `mysql_cdc` source's options, parsed and checked once on the driver.

    profile            a cdc-producer or cdc-consumer profile (its [stream]; its [database] for typing)
    path | endpoint    instead of a profile: the embedded stream's directory, or a Fluvio SC endpoint
    topic              with path/endpoint: the topic (or per-table template); transactionTopic likewise
    startingOffset     "earliest" (default), "latest", or a log offset
    endingOffset       batch reads: "latest" (default) or a log offset
    maxRecordsPerBatch streaming: log records per micro-batch (default: all available)
    recordsPerPartition log records per Spark partition (default 20000)
    bytesPerPartition  bytes of log records per Spark partition where the topic can tell (embedded, one
                       topic; default 16 MiB): partitions of about equal rows, whatever the events' sizes
    rowsPerPartition   about this many output rows per Spark partition (instead of bytesPerPartition):
                       the rows a byte (or a record) holds estimated from a sample of the range's records
    table | tables     "db.table" or "db.t1,db.t2": only these tables' rows (and their DDL); with per-table
                       topics only their topics are read, each cut into partitions (source.plan_topics)
    typed              "true" (default where possible) / "false": typed before/after need one table
    images             "generic" (default): before/after as typed= says; "lake": the lake job's rows
                       (cdc_spark/rows.py: each image one binary JSON array, its column list, its bucket)
    includeIncomplete  "true": also a transaction still incomplete at the log's end (audits: what may
                       still reach the follower); default false, only whole transactions
    spillPath          with images=lake (the lake job): each read task writes its rows to an Arrow file in
                       this directory and its output is only their index (cdc_spark/spill.py); the
                       directory must be one every executor and the driver can reach
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cdc_stream.errors import ConfigError
from cdc_stream.profile import (
    ConsumerProfile,
    FollowerDatabase,
    LeaderDatabase,
    ProducerProfile,
    Stream,
    load_consumer_profile,
    load_producer_profile,
)

DEFAULT_RECORDS_PER_PARTITION = 20_000
DEFAULT_BYTES_PER_PARTITION = 16 << 20  # ~50,000 rows of the standard workload (~330 bytes a row as JSON)
DEFAULT_RECORDS_PER_BATCH = 5_000  # spark/lake.py's bound: ~250,000 row changes at ~50 rows a record
Database = LeaderDatabase | FollowerDatabase


@dataclass(frozen=True)
class SourceOptions:
    """What a `mysql_cdc` read was asked for."""

    stream: Stream
    database: Database | None = None  # where information_schema is read for typed images
    resource: str | None = None
    starting: str | int = "earliest"
    ending: str | int = "latest"
    max_records: int | None = None
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION
    bytes_per_partition: int = DEFAULT_BYTES_PER_PARTITION
    rows_per_partition: int | None = None
    tables: tuple[tuple[str, str], ...] | None = None
    typed: bool | None = None  # None: typed when one table is selected and a database is known
    include_incomplete: bool = False
    lake: bool = False  # images=lake
    spill: str | None = None  # spillPath: the read tasks' rows go to files there, the output is their index

    @property
    def typed_table(self) -> tuple[str, str] | None:
        """The table whose typed images the output carries, or None for the generic (or the lake's) form."""
        if self.lake and self.typed:
            raise ConfigError("mysql_cdc: images=lake carries the images untyped; drop typed=true")
        if self.lake or self.typed is False or self.tables is None or len(self.tables) != 1 or self.database is None:
            if self.typed:
                raise ConfigError("typed=true needs exactly one table (option `table`) and a profile with [database]")
            return None
        return self.tables[0]

    def selects(self, database: str | None, table: str | None) -> bool:
        """Whether rows of database.table are read."""
        return self.tables is None or (database or "", table or "") in self.tables


def load_profile(path: str | Path) -> ProducerProfile | ConsumerProfile:
    """A producer profile, or else a consumer profile (the error is the producer profile's)."""
    try:
        return load_producer_profile(path)
    except ConfigError as producer_error:
        try:
            return load_consumer_profile(path)
        except ConfigError:
            raise producer_error from None


# Every option, as docs/lake.md spells it (Spark hands them over case-insensitively).
OPTIONS = ("profile", "path", "endpoint", "topic", "transactionTopic", "startingOffset", "endingOffset",
           "maxRecordsPerBatch", "recordsPerPartition", "bytesPerPartition", "rowsPerPartition", "table", "tables",
           "typed", "images", "includeIncomplete", "spillPath")
_SPELLING = {name.lower(): name for name in OPTIONS}


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options (keys case-insensitive); raises ConfigError naming the option."""
    opts = {k.lower(): v for k, v in options.items()}
    for key in options:
        if key.lower() not in _SPELLING:  # a misspelled option would otherwise read with its default
            import difflib

            close = difflib.get_close_matches(key.lower(), _SPELLING, n=1, cutoff=0.75)
            hint = f"did you mean {_SPELLING[close[0]]!r}? " if close else ""
            raise ConfigError(f"mysql_cdc: unknown option {key!r}; {hint}the options are {', '.join(OPTIONS)} "
                              "(docs/lake.md)")
    database: Database | None = None
    resource = None
    if "profile" in opts:
        profile = load_profile(opts["profile"])
        stream, database, resource = profile.stream, profile.database, profile.mysql_resource_name
        for key in ("path", "endpoint", "topic", "transactiontopic"):
            if key in opts:
                raise ConfigError(f"mysql_cdc: option {key!r} conflicts with 'profile'; the profile's [stream] says it")
    elif "path" in opts or "endpoint" in opts:
        if "path" in opts and "endpoint" in opts:
            raise ConfigError("mysql_cdc: give 'path' (embedded stream) or 'endpoint' (Fluvio), not both")
        stream = Stream(backend="fluvio" if "endpoint" in opts else "embedded",
                        path=str(Path(opts.get("path", "~/mysql-cdc/stream")).expanduser()),
                        fluvio_endpoint=opts.get("endpoint"))
        if "topic" in opts:
            stream.topic = opts["topic"]
        if "transactiontopic" in opts:
            stream.transaction_topic = opts["transactiontopic"]
    else:
        raise ConfigError("mysql_cdc: give option 'profile' (a cdc-producer or cdc-consumer profile), "
                          "or 'path' / 'endpoint' with 'topic'")
    tables_text = opts.get("tables", opts.get("table"))
    tables = None
    if tables_text is not None:
        names = [t.strip() for t in tables_text.split(",") if t.strip()]
        if not names or any("." not in n for n in names):
            raise ConfigError(f"mysql_cdc: tables must be database.table names separated by commas, "
                              f"got {tables_text!r}")
        tables = tuple(tuple(n.split(".", 1)) for n in names)
    typed = opts.get("typed")
    if typed is not None and typed.lower() not in ("true", "false"):
        raise ConfigError(f"mysql_cdc: typed must be true or false, got {typed!r}")
    images = opts.get("images", "generic").strip().lower()
    if images not in ("generic", "lake"):
        raise ConfigError(f"mysql_cdc: images must be generic or lake, got {images!r}")
    spill = opts.get("spillpath")
    if spill is not None and images != "lake":
        raise ConfigError("mysql_cdc: spillPath needs images=lake (it spills the lake job's rows)")
    incomplete = opts.get("includeincomplete", "false")
    if incomplete.lower() not in ("true", "false"):
        raise ConfigError(f"mysql_cdc: includeIncomplete must be true or false, got {incomplete!r}")
    parsed = SourceOptions(
        stream=stream, database=database, resource=resource,
        starting=_offset(opts, "startingoffset", "earliest", ("earliest", "latest")),
        ending=_offset(opts, "endingoffset", "latest", ("latest",)),
        max_records=_positive(opts, "maxrecordsperbatch"),
        records_per_partition=_positive(opts, "recordsperpartition") or DEFAULT_RECORDS_PER_PARTITION,
        bytes_per_partition=_positive(opts, "bytesperpartition") or DEFAULT_BYTES_PER_PARTITION,
        rows_per_partition=_positive(opts, "rowsperpartition"),
        tables=tables,  # type: ignore[arg-type]
        typed=None if typed is None else typed.lower() == "true",
        include_incomplete=incomplete.lower() == "true",
        lake=images == "lake",
        spill=str(Path(spill).expanduser()) if spill else None,
    )
    parsed.typed_table  # noqa: B018  (raises for typed=true without one table)
    return parsed


def _offset(opts: dict[str, str], key: str, default: str, words: tuple[str, ...]) -> str | int:
    value = opts.get(key, default).strip().lower()
    if value in words:
        return value
    if value.isdigit():
        return int(value)
    raise ConfigError(f"mysql_cdc: {_SPELLING[key]} must be {' or '.join(words)} or an offset (a number), "
                      f"got {value!r}")


def _positive(opts: dict[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    value = opts[key].strip()
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"mysql_cdc: {_SPELLING[key]} must be a positive number, got {value!r}")
    return int(value)
