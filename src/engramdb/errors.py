"""Every error engramdb raises, in one tree.

::

    EngramError                      base of everything engramdb raises
    ├── CallerError (ValueError)     the caller asked for something wrong; nothing was changed
    │   ├── ScopeViolation           SQL reached outside the scope's namespace, or a statement kind a scope never runs
    │   ├── ForbiddenDDLError        schema change outside the DDL safelist (CREATE TABLE, CREATE INDEX, ADD COLUMN)
    │   ├── InvalidStatement         empty SQL, several statements in one call, unterminated quote or comment
    │   ├── SqlError                 SQLite rejected the statement (syntax, unknown column, wrong parameters)
    │   │   └── ConstraintError      a UNIQUE / NOT NULL / CHECK / FOREIGN KEY constraint failed
    │   ├── ResourceLimitExceeded    the statement ran past its time budget or built a value past the size limit
    │   ├── TransactionError         commit without begin, begin twice, a write while another scope's transaction is open
    │   ├── InvalidAgentId           an agent id that breaks the id rule
    │   ├── ConfigError              an unknown or ill-typed configuration key
    │   ├── ValidationError          a memory field out of range or of the wrong type
    │   ├── Forgotten                the content was deliberately forgotten; pass force=True to store it again
    │   └── NotFound                 no visible memory has that id (also said for ids the caller may not see)
    └── EngineFailure                something went wrong that the caller did not cause
        ├── BackendError             the database failed (I/O, locked past the busy timeout, closed engine)
        ├── SchemaVersionError       the file was written by a newer engramdb
        ├── EmbedderError            an embedding server failed, refused the key, or answered nonsense
        ├── RerankerError            a reranker failed, refused the key, or answered nonsense (recall changed nothing)
        ├── LLMError                 a chat model failed, timed out, refused the key, or answered nonsense (the job stays queued)
        └── MissingExtra             an optional feature's packages are not installed (names the extra)

Driver exceptions (``sqlite3.*``) never leave the package: they are translated at the storage
boundary into one of the classes above.
"""

from __future__ import annotations


class EngramError(Exception):
    """Base class of every error engramdb raises."""


class CallerError(EngramError, ValueError):
    """The caller asked for something wrong. Nothing was changed; fix the call and retry."""


class ScopeViolation(CallerError):
    """SQL tried to reach outside the scope's namespace, or is a statement a scope never runs.

    The message names the rule that was broken and never says whether a foreign table exists.
    """


class ForbiddenDDLError(CallerError):
    """A schema change that the DDL safelist does not permit.

    The safelist is ``CREATE TABLE``, ``CREATE INDEX`` and ``ALTER TABLE … ADD COLUMN``.
    """


class InvalidStatement(CallerError):
    """The SQL text is not exactly one complete statement."""


class SqlError(CallerError):
    """SQLite rejected the statement (syntax error, unknown column, wrong parameter count, …)."""


class ConstraintError(SqlError):
    """A UNIQUE, NOT NULL, CHECK or FOREIGN KEY constraint failed; the call changed nothing."""


class ResourceLimitExceeded(CallerError):
    """The statement ran past its time budget or built a value larger than the size limit."""


class TransactionError(CallerError):
    """Transaction calls out of order, or a write that would wait on this thread's own transaction."""


class InvalidAgentId(CallerError):
    """An agent id that breaks the rule ``[a-z0-9][a-z0-9-]{0,62}``."""


class ConfigError(CallerError):
    """An unknown configuration key, or a value of the wrong type."""


class ValidationError(CallerError):
    """A memory field is out of range or of the wrong type."""


class Forgotten(CallerError):
    """The content matches a tombstone: it was deliberately forgotten and is not re-created silently.

    `tombstone` says who forgot it, when and why. Pass ``force=True`` to store it anyway.
    """

    def __init__(self, message: str, tombstone: object) -> None:
        super().__init__(message)
        self.tombstone = tombstone


class NotFound(CallerError):
    """No memory with that id is visible to the caller.

    Ids that exist but are not visible (another tenant, owner or a higher confidentiality level)
    get exactly the same error and message as ids that do not exist.
    """


class EngineFailure(EngramError):
    """Something failed that the caller did not cause."""


class BackendError(EngineFailure):
    """The database failed: I/O error, locked past the busy timeout, or the engine is closed."""


class SchemaVersionError(EngineFailure):
    """The database was written by a newer version of engramdb than the one running."""


class EmbedderError(EngineFailure):
    """An embedding server could not be reached, refused the request or its key, or answered with
    something that is not a valid embedding response.

    `url` is the endpoint (never with credentials); `status` the HTTP status, or None when the
    server was not reached or its answer was malformed.
    """

    def __init__(self, message: str, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class RerankerError(EngineFailure):
    """A reranker could not be reached, refused the request or its key, or answered with something
    that is not a valid rerank response; the recall it served is not logged and changes nothing.

    `url` is the endpoint (never with credentials), or the model's name for an in-process
    reranker; `status` the HTTP status, or None when there was none.
    """

    def __init__(self, message: str, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class LLMError(EngineFailure):
    """A chat model could not be reached, refused the request or its key, timed out, or answered
    with something that is not the JSON its task asked for. Extraction counts it against the job,
    which stays queued (`engramdb.llm.worker`); nothing it was given is changed.

    `url` is the endpoint (never with credentials); `status` the HTTP status, or None when the
    server was not reached or its answer was malformed.
    """

    def __init__(self, message: str, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class MissingExtra(EngineFailure, ImportError):
    """An optional feature needs packages that are not installed; the message names the extra."""

    def __init__(self, feature: str, extra: str) -> None:
        super().__init__(f'{feature} needs the "{extra}" extra: pip install "engramdb[{extra}]"')
        self.feature = feature
        self.extra = extra
