"""MySQL column types as information_schema names them, and the charsets whose text is exact as Unicode.

Every program that reads information_schema.COLUMNS reads DATA_TYPE through this one table:
the producer's snapshot (each column's `values.encode` kind), Spark's schema (its Spark/Arrow
type), the lake (the value an added column's default gives existing rows) and the replica
audit (how the server renders a value canonically). Names MySQL accepts as synonyms
("integer", "numeric", "real") are listed too, though information_schema prints the
canonical ones.

The charsets are the producer's decoding policy (cdc_producer/charsets.py): text travels as
{"String": ...} only in a charset below, whose Python codec maps bytes to the same code
points as MySQL does and back; any other text travels as {"Blob": ...} (docs/events.md).
Spark types a text column by the same list.
"""

from __future__ import annotations

from typing import Literal

# The kind of value a column holds: `values.encode`'s kinds ("unsigned" comes from COLUMN_TYPE).
Kind = Literal["signed", "unsigned", "float", "double", "decimal", "date", "datetime", "timestamp", "time",
               "year", "enum", "set", "bit", "json", "string", "binary", "geometry"]

# Integer types and their width in bits.
INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
_BINARY = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
_GEOMETRY = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
             "geometrycollection")

# DATA_TYPE (lower case) -> the kind of its values.
KIND_OF: dict[str, Kind] = {
    **dict.fromkeys(INT_BITS, "signed"),
    "float": "float", "double": "double", "real": "double", "decimal": "decimal", "numeric": "decimal",
    "date": "date", "datetime": "datetime", "timestamp": "timestamp", "time": "time", "year": "year",
    "enum": "enum", "set": "set", "bit": "bit", "json": "json",
    **dict.fromkeys(_TEXT, "string"),
    **dict.fromkeys(_BINARY, "binary"),
    **dict.fromkeys(_GEOMETRY, "geometry"),
}


def types_of(*kinds: Kind) -> frozenset[str]:
    """The DATA_TYPEs whose values are of one of these kinds."""
    return frozenset(t for t, k in KIND_OF.items() if k in kinds)


INT_TYPES = frozenset(INT_BITS)
TEXT_TYPES = types_of("string", "enum", "json")  # values are text
BINARY_TYPES = types_of("binary", "geometry")  # values are bytes
TEMPORAL_TYPES = types_of("date", "datetime", "timestamp")  # values are a calendar date (and time)


def column_kind(data_type: str, column_type: str = "") -> Kind:
    """The kind of an information_schema column (DATA_TYPE, COLUMN_TYPE); a type not listed holds strings."""
    kind = KIND_OF.get(data_type.lower(), "string")
    return "unsigned" if kind == "signed" and "unsigned" in column_type.lower() else kind


# ---------------------------------------------------------------------------
# Charsets (MySQL's names) -> the Python codec that maps them exactly.

# "utf8" is how information_schema names utf8mb3 on servers before MySQL 8.0.30 / MariaDB 10.6
# (cdc_producer/charsets.py reads the binlog's utf8_* collations as utf8mb3 already).
UNICODE_CODECS = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "utf16": "utf-16-be",
                  "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be"}
SINGLE_BYTE_CODECS = {
    "ascii": "ascii", "latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1257": "cp1257", "cp850": "cp850", "cp852": "cp852",
    "koi8r": "koi8_r", "macroman": "mac_roman", "tis620": "tis_620",
}
# latin1 is exact too, through MySQL's own table (cp1252 plus five bytes; cdc_producer/charsets.py).
EXACT_CHARSETS = frozenset(UNICODE_CODECS) | frozenset(SINGLE_BYTE_CODECS) | {"latin1"}


def codec_of(charset: str | None) -> str | None:
    """The Python codec of an exact charset other than latin1 (None: latin1, or text that travels as a Blob)."""
    return UNICODE_CODECS.get(charset or "") or SINGLE_BYTE_CODECS.get(charset or "")


__all__ = [
    "BINARY_TYPES", "EXACT_CHARSETS", "INT_BITS", "INT_TYPES", "KIND_OF", "SINGLE_BYTE_CODECS", "TEMPORAL_TYPES",
    "TEXT_TYPES", "UNICODE_CODECS", "Kind", "codec_of", "column_kind", "types_of",
]
