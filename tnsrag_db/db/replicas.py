"""Read replicas: streaming standbys that serve retrieval reads, with read-your-writes.

A :class:`ReadReplicas` holds one pooled engine per standby URL and hands out, for
each read, the next healthy standby in round-robin order:

* a standby whose connection fails is skipped for ``retry_after`` seconds, then tried
  again; when none is usable the read goes to the primary (reads never fail because a
  replica did);
* a standby lagging more than ``max_lag`` seconds behind its primary is skipped (the lag
  is checked at most once per ``lag_check_interval`` per standby), and so is a server
  that is no longer a standby of the primary (promoted, or another cluster);
* a read given a :class:`WriteToken` (the primary's WAL position after a write
  committed) waits up to ``wait_timeout`` seconds for the standby to replay past it
  (``pg_last_wal_replay_lsn()``), then falls back to the primary: it always sees that
  write.

Standby connections are opened with ``default_transaction_read_only=on``: no write
can go to a replica. :func:`verify_standby` checks at connect time that a URL is a
hot standby of the primary (same system identifier).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tnsrag_db.errors import ConfigurationError

__all__ = ["DEFAULT_MAX_LAG", "ReadReplicas", "Replica", "WriteToken", "verify_standby"]

#: Seconds of replay lag beyond which a standby is skipped.
DEFAULT_MAX_LAG = 30.0
#: Seconds a failed standby is left out before it is tried again.
DEFAULT_RETRY_AFTER = 5.0
#: Seconds a read with a token waits for a standby to replay past it.
DEFAULT_WAIT_TIMEOUT = 2.0
_POLL_SECONDS = 0.005

# The standby's replay lag in seconds: 0 when it has replayed all it received and is
# streaming; otherwise the age of the last replayed transaction (NULL before any).
_LAG_SQL = """
SELECT CASE
  WHEN NOT pg_is_in_recovery() THEN NULL
  WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
       AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
  ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8
END AS lag, pg_is_in_recovery() AS standby, (SELECT system_identifier FROM pg_control_system()) AS ident
"""


@dataclass(frozen=True, order=True, slots=True)
class WriteToken:
    """A position in the primary's write-ahead log at or after a write's commit.

    Returned by the store after a write (``Store.last_write_token``); a read given it
    (``Store.after(token)``) sees that write. ``str(token)`` is PostgreSQL's ``pg_lsn``
    text form (``'0/3000148'``); :meth:`parse` reads it back.
    """

    lsn: int

    @classmethod
    def parse(cls, text: str) -> WriteToken:
        """The token of a ``pg_lsn`` text such as ``'16/B374D848'``; ValueError for another text."""
        high, sep, low = text.partition("/")
        if not sep:
            raise ValueError(f"not a WAL position: {text!r}")
        return cls((int(high, 16) << 32) | int(low, 16))

    def __str__(self) -> str:
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"


def current_token(conn: Connection) -> WriteToken:
    """A token for the primary's current WAL insert position: after a commit, at or past its record."""
    return WriteToken.parse(str(conn.exec_driver_sql("SELECT pg_current_wal_insert_lsn()::text").scalar_one()))


@dataclass
class Replica:
    """One standby: its engine, its URL for messages (password hidden) and its health."""

    url: str
    engine: Engine
    down_until: float = 0.0
    lag_checked_at: float = -1e18
    lag_ok: bool = True


def verify_standby(primary: Engine, standby: Engine, url: str) -> None:
    """Raise :class:`ConfigurationError` unless ``standby`` is a hot standby of ``primary``.

    Checks that the server is in recovery and shares the primary's system identifier
    (a standby made from it by ``pg_basebackup``). ``url`` (password hidden) names it.
    """
    query = "SELECT system_identifier, pg_is_in_recovery() FROM pg_control_system()"
    try:
        with standby.connect() as conn:
            ident, recovering = conn.exec_driver_sql(query).one()
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigurationError(f"read replica {url} is unreachable: {exc.__cause__ or exc}") from exc
    if not recovering:
        raise ConfigurationError(f"read replica {url} is not a standby (pg_is_in_recovery() is false)")
    with primary.connect() as conn:
        primary_ident = conn.exec_driver_sql(query).one()[0]
    if ident != primary_ident:
        raise ConfigurationError(f"read replica {url} is not a standby of the primary "
                                 f"(system identifier {ident}, the primary's is {primary_ident})")


class ReadReplicas:
    """Round-robin choice among standbys, skipping failed and lagging ones; see the module docstring.

    ``max_lag`` (seconds, None: no bound), ``retry_after`` and ``wait_timeout`` (seconds)
    must be positive. ``primary_identifier`` (the primary's system identifier): a server
    that turns out to be something else than a standby of it is never used. Thread-safe.
    :meth:`dispose` closes the standbys' pools.
    """

    def __init__(self, replicas: Sequence[Replica], *, primary_identifier: int | None = None,
                 max_lag: float | None = DEFAULT_MAX_LAG,
                 retry_after: float = DEFAULT_RETRY_AFTER, wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
                 lag_check_interval: float = 1.0) -> None:
        if not replicas:
            raise ConfigurationError("ReadReplicas needs at least one replica")
        for name, value in (("max_lag", max_lag), ("retry_after", retry_after), ("wait_timeout", wait_timeout),
                            ("lag_check_interval", lag_check_interval)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self._replicas = list(replicas)
        self._primary_identifier = primary_identifier
        self._max_lag = max_lag
        self._retry_after = retry_after
        self._wait_timeout = wait_timeout
        self._lag_check_interval = lag_check_interval
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @property
    def replicas(self) -> list[Replica]:
        """The standbys, in round-robin order."""
        return list(self._replicas)

    def candidates(self) -> Iterator[Replica]:
        """The standbys to try for one read, starting at the next in turn; failed ones left out."""
        now = time.monotonic()
        with self._lock:
            start = next(self._turn) % len(self._replicas)
        for i in range(len(self._replicas)):
            replica = self._replicas[(start + i) % len(self._replicas)]
            if replica.down_until <= now:
                yield replica

    def mark_failed(self, replica: Replica) -> None:
        """Leave ``replica`` out for ``retry_after`` seconds (its pooled connections are discarded)."""
        replica.down_until = time.monotonic() + self._retry_after
        replica.engine.dispose()

    def usable(self, conn: Connection, replica: Replica, token: WriteToken | None) -> bool:
        """Whether ``conn`` (on ``replica``) may serve a read: within the lag bound, and, given a
        token, replayed past it within ``wait_timeout``."""
        now = time.monotonic()
        if now - replica.lag_checked_at >= self._lag_check_interval:
            lag, standby, ident = conn.exec_driver_sql(_LAG_SQL).one()
            ours = bool(standby) and (self._primary_identifier is None or ident == self._primary_identifier)
            replica.lag_ok = ours and (self._max_lag is None or (lag is not None and float(lag) <= self._max_lag))
            replica.lag_checked_at = now
        if not replica.lag_ok:
            return False
        if token is None:
            return True
        deadline = now + self._wait_timeout
        while True:
            replayed = conn.exec_driver_sql("SELECT pg_last_wal_replay_lsn()::text").scalar_one()
            if replayed is not None and WriteToken.parse(str(replayed)) >= token:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)

    def dispose(self) -> None:
        """Close every standby's pool."""
        for replica in self._replicas:
            replica.engine.dispose()
