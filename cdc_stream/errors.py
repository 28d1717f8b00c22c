"""The error type every CLI turns into one short message and a non-zero exit code."""

from __future__ import annotations


class CdcError(Exception):
    """A failure the user can act on. The message names the cause and the fix.

    `exit_code` follows the documented table in README.md (2 = configuration,
    3 = cannot reach a server, 4 = server not set up for CDC, 5 = data problem).
    """

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
