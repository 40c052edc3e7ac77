"""The exception tree of tnsrag_db.

Every error the library raises on purpose derives from :class:`TnsragError`::

    TnsragError
    ├── ConfigurationError           bad construction or set-up (never retried)
    │   ├── CorpusNotFoundError      a named corpus does not exist in the schema
    │   ├── HierarchyError           duplicate ids, missing parents, cycles
    │   └── ProviderConfigurationError  zero/many embedding providers, bad entry point
    ├── ValidationError (ValueError) bad input values; nothing was written
    │   ├── InvalidEntryError        a MemoryEntry (or one entry of a batch) is invalid
    │   │   ├── InvalidTimestampError  its timestamp is malformed or zone-less (also a
    │   │   │                          TemporalValidationError)
    │   │   └── IdCollisionError     file paths of one root meet entries another root wrote
    │   ├── InvalidFilterError       a metadata filter is invalid
    │   ├── InvalidContextError      a RAGContext argument is invalid
    │   ├── EmbeddingValidationError an embedding vector breaks a rule
    │   ├── TemporalValidationError  a timestamp is invalid or too far in the future
    │   └── DanglingReferenceError   an edge or parent names an entry that does not exist
    ├── IngestInterrupted            a batched ingest stopped part-way (Ctrl-C or an error)
    ├── DatabaseError                the database failed or is not ready
    │   ├── SchemaNotReadyError      the schema is missing or not at the expected revision
    │   ├── MigrationError           an alembic upgrade or downgrade failed
    │   ├── PermissionDeniedError    the role lacks a privilege, or the session is read-only
    │   ├── StatementTimeoutError    a statement ran past statement_timeout or lock_timeout
    │   │   └── LockTimeoutError     a lock wait ran past lock_timeout (names the holders' roles)
    │   ├── DeadlockError            PostgreSQL aborted the transaction to break a deadlock
    │   ├── ConstraintViolationError a write broke a constraint (unique, foreign key, check)
    │   └── ConnectionLostError      the server connection broke during the operation
    └── RetrievalError               a retrieval failed at run time
        ├── ProviderTransportError   an embedding/model provider's transport failed
        ├── ExecutionError           any other provider exception, wrapped
        ├── ProviderBusyError        a concurrent provider call was refused
        ├── RetrievalCancelledError  a CancellationToken stopped the work
        └── StrategyUnavailableError a requested strategy or mode is not available

Driver errors (psycopg, SQLAlchemy) are mapped to the :class:`DatabaseError` subclass
their SQLSTATE names, in one place (:func:`tnsrag_db._db.driver_errors.map_db_errors`), with
``raise ... from exc``; the SQLSTATE is kept as :attr:`DatabaseError.sqlstate`.

Each class says whether it is a *run-time failure* (:attr:`TnsragError.runtime_failure`):
a retrieval, provider or database failure that ``OnFailure.CONTINUE_EMPTY`` may turn into
an empty result, as opposed to a bad configuration or bad input, which always raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # pragma: no cover
    from tnsrag_db._counts import IngestCounts

__all__ = [
    "ConfigurationError",
    "ConnectionLostError",
    "ConstraintViolationError",
    "CorpusNotFoundError",
    "DanglingReferenceError",
    "DatabaseError",
    "DeadlockError",
    "EmbeddingValidationError",
    "EvaluationDataError",
    "ExecutionError",
    "HierarchyError",
    "IdCollisionError",
    "IngestInterrupted",
    "InvalidContextError",
    "InvalidEntryError",
    "InvalidFilterError",
    "InvalidTimestampError",
    "LockTimeoutError",
    "MigrationError",
    "PermissionDeniedError",
    "ProviderBusyError",
    "ProviderConfigurationError",
    "ProviderTransportError",
    "RetrievalCancelledError",
    "RetrievalError",
    "SchemaNotReadyError",
    "StatementTimeoutError",
    "StrategyUnavailableError",
    "TemporalValidationError",
    "TnsragError",
    "ValidationError",
]


class TnsragError(Exception):
    """Root of every error raised by tnsrag_db."""

    #: True for run-time failures (the database, a provider or a retrieval failed), which
    #: ``OnFailure.CONTINUE_EMPTY`` may answer with an empty result; False for bad
    #: configuration and bad input, which always raise.
    runtime_failure: ClassVar[bool] = False


class ConfigurationError(TnsragError):
    """A component was constructed or configured incorrectly."""


class CorpusNotFoundError(ConfigurationError):
    """A corpus named for reading or removal does not exist; the message lists those that do."""

    def __init__(self, message: str, *, corpus: str, existing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        #: The corpus that was asked for.
        self.corpus = corpus
        #: The corpora of the schema, sorted.
        self.existing = existing


class HierarchyError(ConfigurationError):
    """The parent hierarchy has duplicate ids, missing parents or cycles."""

    def __init__(self, message: str, ids: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        #: The entry ids the error is about (every id on a cycle).
        self.ids = ids


class ProviderConfigurationError(ConfigurationError):
    """Embedding provider discovery found no usable single provider."""


class ValidationError(TnsragError, ValueError):
    """An input value breaks a documented rule; nothing was written."""


class InvalidEntryError(ValidationError):
    """A memory entry is invalid; ``entry_id`` and ``index`` say which one."""

    def __init__(self, message: str, *, entry_id: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        #: The id of the offending entry, when it has one.
        self.entry_id = entry_id
        #: The position of the offending entry in its batch, when in a batch.
        self.index = index


class InvalidFilterError(ValidationError):
    """A metadata filter has a None/blank key or value or a non-string value."""


class InvalidContextError(ValidationError):
    """A RAGContext argument (max_results, min_score, filters) is invalid."""


class EmbeddingValidationError(ValidationError):
    """An embedding is empty, too long, non-finite or of the wrong dimension."""

    #: A provider returned it at run time (a query's embedding): a run-time failure.
    runtime_failure: ClassVar[bool] = True


class TemporalValidationError(ValidationError):
    """A timestamp is malformed, zone-less or further in the future than allowed."""


class InvalidTimestampError(InvalidEntryError, TemporalValidationError):
    """An entry's timestamp is malformed or zone-less; ``entry_id`` and ``index`` say which entry."""


class IdCollisionError(InvalidEntryError):
    """Files read relative to one root would take ids that entries read from another root
    hold in the corpus (the same relative paths under two folders); nothing was written.

    ``collisions`` lists each file path met as ``(stored id, root read now, root that
    wrote it)``, in id order; ``entry_id`` is the first stored id."""

    def __init__(self, message: str, *, collisions: tuple[tuple[str, str, str], ...]) -> None:
        super().__init__(message, entry_id=collisions[0][0] if collisions else None)
        #: ``(stored id, root read now, root that wrote it)`` of each path met, in id order.
        self.collisions = collisions


class DanglingReferenceError(ValidationError):
    """A reference (edge end, parent id) names an entry that does not exist."""


class EvaluationDataError(ValidationError):
    """An evaluation input (qrels, queries) is malformed; ``path`` and ``line`` say where."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        #: The file at fault, when the input came from a file.
        self.path = path
        #: The 1-based line at fault, when one line is.
        self.line = line


class IngestInterrupted(TnsragError):
    """A batched ingest stopped part-way; ``committed`` counts what stayed written (whole batches).

    The batch in progress was rolled back (``rolled_back``: False when the stop came once
    every batch read was written, as the last one committed). Raised for Ctrl-C (no
    ``__cause__``) and, chained to the cause, for a library error met after some batches
    were committed. Running the same ingest again continues idempotently.
    """

    def __init__(self, message: str, *, committed: IngestCounts, rolled_back: bool = True) -> None:
        super().__init__(message)
        #: Entries of the batches committed before the stop.
        self.committed = committed
        #: Whether a batch was in progress (and rolled back) when the ingest stopped.
        self.rolled_back = rolled_back


class DatabaseError(TnsragError):
    """The database raised an error or could not be reached."""

    runtime_failure: ClassVar[bool] = True
    #: The driver error's SQLSTATE when a driver error was mapped to this one (None otherwise).
    sqlstate: str | None = None


class SchemaNotReadyError(DatabaseError):
    """The library's schema is missing or not migrated to the expected revision."""


class MigrationError(DatabaseError):
    """An alembic migration failed."""


class PermissionDeniedError(DatabaseError):
    """The database role may not do this: a missing privilege, a read-only session or a hot standby."""


class StatementTimeoutError(DatabaseError):
    """The server cancelled a statement (``statement_timeout``, ``lock_timeout`` or a cancel request)."""


class LockTimeoutError(StatementTimeoutError):
    """A lock wait ran past ``lock_timeout`` (SQLSTATE 55P03): another session held the
    lock. Nothing of the transaction was committed.

    :attr:`holders` lists the database roles of the sessions that held a lock the waiter
    could have been waiting for, looked up right at the timeout (empty when none was
    found: the holder let go meanwhile, or held a row lock); :attr:`holders_known` is
    False when the lookup was not possible (``pg_locks`` not readable by the role).
    """

    def __init__(self, message: str, *, holders: tuple[str, ...] = (), holders_known: bool = False) -> None:
        super().__init__(message)
        self.holders = holders
        self.holders_known = holders_known


class DeadlockError(DatabaseError):
    """PostgreSQL aborted the transaction to break a deadlock (SQLSTATE 40P01); nothing of it
    was committed, and running it again whole is safe (the library's writes do, see
    :func:`~tnsrag_db._store.store.retry_on_deadlock`)."""


class ConstraintViolationError(DatabaseError):
    """A statement broke an integrity constraint (SQLSTATE class 23: unique, foreign key, check,
    not null); its transaction was rolled back."""


class ConnectionLostError(DatabaseError):
    """The connection to the server broke mid-operation; its open transaction did not commit."""


class RetrievalError(TnsragError):
    """A retrieval failed at run time."""

    runtime_failure: ClassVar[bool] = True


class ProviderTransportError(RetrievalError):
    """An embedding or model provider could not be reached; keeps its type through wrappers."""


class ExecutionError(RetrievalError):
    """A provider raised an unexpected exception (the original is the ``__cause__``)."""


class ProviderBusyError(RetrievalError):
    """A provider call was refused because another call was in progress."""


class RetrievalCancelledError(RetrievalError):
    """A CancellationToken was cancelled; no further work was started."""


class StrategyUnavailableError(RetrievalError):
    """The requested strategy or retrieval mode is not available in this installation."""

    #: An installation problem, not a failure of this call: never answered with an empty result.
    runtime_failure: ClassVar[bool] = False
