"""Every error kind of mysql-cdc, with the exit code a CLI turns it into, and what may be retried.

One hierarchy: the CLIs (console.report_errors) and the Spark audit map any of these to one
`error: ...` line and `exit_code`, so codes are never chosen again elsewhere (README.md documents them:
2 configuration, 3 cannot reach a server or the stream, 4 server not set up for CDC, 5 data problem).
"""

from __future__ import annotations

import pymysql


class CdcError(Exception):
    """A failure the user can act on. The message names the cause and the fix."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(CdcError):
    """The profile or the command line is wrong."""

    exit_code = 2


class UnreachableError(CdcError):
    """A server (leader, follower, Fluvio) cannot be reached."""

    exit_code = 3


class SetupError(CdcError):
    """A server is reachable but not configured as CDC needs (binlog settings, privileges)."""

    exit_code = 4


class DataError(CdcError):
    """A record or a statement cannot be applied; nothing of it was applied."""

    exit_code = 5


class CrossesFilters(DataError):
    """A statement changes objects the filters let through and objects they exclude (filters.crosses_filters).

    `detail` and `fix` are the two halves of the message, for callers that place the event between them."""

    def __init__(self, detail: str, fix: str):
        self.detail, self.fix = detail, fix
        super().__init__(f"{detail}; fix: {fix}")


class TopicError(UnreachableError):
    """A topic operation failed (the backend refused or cannot be reached); the message says how to fix it."""


class TopicNotFound(ConfigError):
    """The topic or stream does not exist (and the caller did not ask to create it): the profile names
    the wrong one, or the producer has not created it yet. Not a TopicError: nothing failed to answer."""


class TopicUnavailable(TopicError):
    """The backend stopped answering or dropped the connection mid-run: trying again may work."""


class LostConnection(UnreachableError):
    """A server connection dropped mid-run (its open transaction, if any, was rolled back): trying again may work."""


# The kinds' specific errors, each raised where its cause is found (the module named).


class MalformedEvent(DataError, ValueError):
    """A record that is not a valid change event; the message says what is wrong (events.decode_event)."""


class PartialJsonError(DataError):
    """A JSON diff that does not apply to the before-image's document (cdc_producer/partial_json.py)."""


class LakeError(DataError):
    """The lake cannot follow a change; the message names the offset, the cause and the fix (cdc_spark/lake.py)."""


class SchemaMismatch(DataError, ValueError):
    """An event names a column the table schema lacks (the message says which; cdc_spark/convert.py)."""


class UnsupportedColumn(DataError, ValueError):
    """A column type with no Spark type (the message names it; cdc_spark/schema.py)."""


class JarNotFound(ConfigError):
    """No JDBC driver jar: the message names the package to install (cdc_spark/jars.py)."""


class AuditError(ConfigError):
    """The audit cannot run; the message names the cause and the fix (spark/audit.py)."""


# Server and client error codes after which a new connection can succeed: the server went away or
# restarted (2003 refused, 2006 gone, 2013 lost during a query, 2055 lost at the handshake, 1053
# shutdown in progress, 1927 connection killed, 4031 disconnected for inactivity).
RETRIABLE_SERVER_ERRORS = frozenset({2003, 2006, 2013, 2055, 1053, 1927, 4031})


def is_retriable(error: BaseException) -> bool:
    """Whether `error` means "the server or the stream went away": reconnecting may cure it. The one
    retry decision of every program (the producer's and the consumer's reconnect loops, the replayer).

    A server that cannot be reached (UnreachableError) is retriable once a program has run: at its
    start the callers report it instead. A stream that refused or cannot be reached (TopicError) is
    not; one that stopped answering mid-run (TopicUnavailable) is. Anything else (a refused
    statement, a wrong profile, a record that cannot be applied) fails the same way again, so it is
    reported, never retried."""
    if isinstance(error, (TopicUnavailable, LostConnection)):
        return True
    if isinstance(error, TopicError):
        return False
    if isinstance(error, UnreachableError):
        return True
    if isinstance(error, CdcError):
        return False
    if isinstance(error, pymysql.err.InterfaceError):
        return True  # PyMySQL's "(0, '')": the socket is closed
    if isinstance(error, pymysql.err.MySQLError):
        return bool(error.args) and error.args[0] in RETRIABLE_SERVER_ERRORS
    return isinstance(error, (ConnectionError, TimeoutError, OSError))


def mysql_code(error: pymysql.err.MySQLError) -> int:
    """The server's (or the client's) error number, 0 when it has none."""
    return error.args[0] if error.args and isinstance(error.args[0], int) else 0


def mysql_message(error: BaseException) -> str:
    """The server's message of a PyMySQL error (without the number), else the error's text."""
    return str(error.args[-1]) if getattr(error, "args", None) else str(error) or type(error).__name__
