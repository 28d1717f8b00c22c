"""Charsets of text columns and of statements: which MySQL charset a collation means, and text in it
-> its tagged value.

Text is sent as {"String": ...} only when its charset maps to Unicode exactly as MySQL maps it
(so the follower, converting back from utf8mb4, stores the same bytes): the charsets of
cdc_stream/column_types.py (EXACT_CHARSETS), through their Python codecs, and latin1 through
MySQL's own table. Any other text travels as {"Blob": ...}, its exact bytes. python-mysql-replication
decodes latin1 as Python's cp1252 (which fails on 5 bytes MySQL accepts), utf16/utf32 with
Python's BOM-guessing codecs, and stops the stream on a value its codec cannot decode; the
readers of columns.py tag text here instead. library_patches.py keeps the id of collations the
library does not know.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any

from pymysqlreplication import row_event

from cdc_stream import values
from cdc_stream.column_types import codec_of

TextTagger = Callable[[bytes], Any]

# MariaDB's uca1400 collation ids: 2048 + 256 * (index of the charset below) + variant.
_UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")


def charset_of(column: Any) -> str | None:
    """The MySQL charset name of a text/ENUM/SET column ('binary' for binary data, None if unknown)."""
    return _charset_of_collation(getattr(column, "collation_name", None))


def charset_of_collation_id(collation_id: int | None, dbms: str = "mariadb") -> str | None:
    """The charset name of a collation id (a Query event's character_set_client), None if unknown."""
    if collation_id is None:
        return None
    # (through the module: library_patches.py makes it keep the ids the library does not know)
    return _charset_of_collation(row_event.find_charset(str(collation_id), dbms)[1])


def _charset_of_collation(collation: str | None) -> str | None:
    if not collation:
        return None
    if collation.startswith("#"):
        cid = int(collation[1:])
        index = (cid - 2048) >> 8
        return _UCA1400_CHARSETS[index] if cid >= 2048 and index < len(_UCA1400_CHARSETS) else None
    # Every collation name starts with its charset's name ("latin1_swedish_ci"), or is "binary".
    name = collation.split("_", 1)[0]
    return "utf8mb3" if name == "utf8" else name


def _mysql_latin1_table() -> str:
    # MySQL's latin1 is cp1252 plus the five bytes cp1252 leaves undefined, which
    # MySQL maps to U+0081, U+008D, U+008F, U+0090 and U+009D.
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))
    return "".join(chars)


_LATIN1_TABLE = _mysql_latin1_table()


def exact_text(raw: bytes, charset: str | None) -> str | None:
    """`raw` (text in `charset`) as Unicode when the mapping is exact both ways, else None
    (the same rule as text_tagger: a String only where the follower gets the very same bytes back)."""
    if charset == "latin1":
        return codecs.charmap_decode(raw, "strict", _LATIN1_TABLE)[0]
    codec = codec_of(charset)
    if codec is None:
        return None
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError:
        return None
    if charset == "ucs2" and any(ord(c) > 0xFFFF for c in text):
        return None
    return text


def text_tagger(charset: str | None) -> TextTagger:
    """A function turning one value's bytes in `charset` into {"String": ...}, or {"Blob": ...}
    when the text has no exact round trip through Unicode (binary data, unknown or legacy
    multi-byte charsets, bytes the charset does not define)."""
    blob = values.blob_tag
    if charset == "latin1":
        table = _LATIN1_TABLE
        return lambda raw: {"String": codecs.charmap_decode(raw, "strict", table)[0]}
    codec = codec_of(charset)
    if codec is None:
        return blob
    decode = codecs.getdecoder(codec)
    bmp_only = charset == "ucs2"  # UCS-2 has no surrogate pairs: an astral result would be wrong

    def tag(raw: bytes) -> Any:
        try:
            text = decode(raw)[0]
        except UnicodeDecodeError:
            return blob(raw)
        if bmp_only and any(ord(c) > 0xFFFF for c in text):
            return blob(raw)
        return {"String": text}

    return tag


__all__ = ["TextTagger", "charset_of", "charset_of_collation_id", "exact_text", "text_tagger"]
