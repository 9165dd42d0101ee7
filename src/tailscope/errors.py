"""The one exception tree of tailscope.

Every error the user can cause is a :class:`TailscopeError`. Its message names the file, field, URL or request that
is wrong and says what to do about it. Foreign exceptions (aiohttp, duckdb, pydantic, OS errors) are converted to
these at the edge of the layer that meets them.
"""

from __future__ import annotations


class TailscopeError(Exception):
    """Root of every error tailscope raises on purpose. The CLI prints it as one line and exits 1."""

    exit_code: int = 1


class ConfigError(TailscopeError):
    """A command-line value, environment variable or setting is invalid."""


class ProfileError(ConfigError):
    """A workload profile, length spec or replay file is invalid (message names file:line and field)."""


class ContractError(ConfigError):
    """A performance contract file is invalid."""

    exit_code = 2


class UnknownOperationError(ConfigError):
    """No change of a what-if names an operation of the trace set (exit code 2: bad input, nothing was projected)."""

    exit_code = 2


class TargetError(TailscopeError):
    """The target server cannot be reached or does not speak the expected protocol (preflight failure)."""


class SSEError(TailscopeError):
    """A server-sent-events stream is malformed."""


class StoreError(TailscopeError):
    """The results store cannot be opened, read or written."""


class NotFoundError(TailscopeError):
    """A run, trace set or other named object does not exist."""


class TraceFormatError(TailscopeError):
    """A trace file cannot be parsed (message names file and position)."""


class CatalogError(ConfigError):
    """A model or GPU is not in the catalog, or a catalog file is invalid."""


class PlanError(TailscopeError):
    """A planning question has no answer (e.g. the model does not fit on the GPU)."""


class Interrupted(TailscopeError):
    """The run was interrupted by a signal; completed records were kept."""

    exit_code = 130


class InternalError(TailscopeError):
    """Something failed that tailscope did not expect (a foreign exception reached the public API).

    The original exception is kept as ``__cause__``; ``tailscope --debug`` shows its traceback.
    """
