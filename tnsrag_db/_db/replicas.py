"""Read replicas: streaming standbys that serve retrieval reads, with read-your-writes.

A :class:`ReadReplicas` holds one :class:`~tnsrag_db._db.pool.Pool` per standby URL and hands out, for
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

import collections
import itertools
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from tnsrag_db._db.hooks import DEFAULT_PING_AFTER_IDLE, ConnectionHooks
from tnsrag_db._db.pool import Connection, Connections, Pool
from tnsrag_db._db.runner import Checkout
from tnsrag_db._db.settings import redact_url
from tnsrag_db._errors import ConfigurationError, DatabaseError, ValidationError

__all__ = ["CONSISTENCY", "DEFAULT_MAX_LAG", "DEFAULT_WAIT_TIMEOUT", "ReadReplicas", "Replica", "WriteClock", "WriteToken",
           "check_replica_options", "current_token", "open_replicas", "verify_standby"]

#: Seconds of replay lag beyond which a standby is skipped.
DEFAULT_MAX_LAG = 30.0
#: Seconds a failed standby is left out before it is tried again.
DEFAULT_RETRY_AFTER = 5.0
#: Seconds a read with a token waits for a standby to replay past it.
DEFAULT_WAIT_TIMEOUT = 2.0
_POLL_SECONDS = 0.005

# What a lag check reads on a standby. The lag itself is measured against the primary's
# own WAL positions over time (see ReadReplicas._lag): the age of the last replayed
# transaction would call a standby minutes behind after an idle primary's first write.
_STATE_SQL = """
SELECT pg_is_in_recovery() AS standby, (SELECT system_identifier FROM pg_control_system()) AS ident,
       pg_last_wal_replay_lsn()::text AS replayed
"""


#: PostgreSQL's ``pg_lsn`` text: two hexadecimal halves of at most 32 bits each.
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


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
        """The token of a ``pg_lsn`` text such as ``'16/B374D848'``.

        Raises :class:`~tnsrag_db._errors.ValidationError` (a ``ValueError``) for anything
        else: another text, or a value that is not a string at all (``None``, bytes).
        """
        match = _LSN.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValidationError(f"not a WAL position (expected text like '16/B374D848'): {text!r}")
        return cls((int(match[1], 16) << 32) | int(match[2], 16))

    def __str__(self) -> str:
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"


CONSISTENCY = ("eventual", "read_your_writes")


def check_replica_options(replicas: object, consistency: object) -> None:
    """:class:`ConfigurationError` unless ``replicas`` is None or a :class:`ReadReplicas` and
    ``consistency`` one of :data:`CONSISTENCY`."""
    if consistency not in CONSISTENCY:
        raise ConfigurationError(f"consistency must be one of {', '.join(CONSISTENCY)}, got {consistency!r}")
    if replicas is not None and not isinstance(replicas, ReadReplicas):
        raise ConfigurationError(f"read_replicas must be a ReadReplicas, got {type(replicas).__name__}")


class WriteClock:
    """The newest :class:`WriteToken` of a store and its views (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.token: WriteToken | None = None

    def advance(self, token: WriteToken) -> None:
        """Move to ``token`` if it is newer."""
        with self._lock:
            if self.token is None or token > self.token:
                self.token = token


def current_token(conn: Connection) -> WriteToken:
    """A token for the primary's current WAL insert position: after a commit, at or past its record."""
    return WriteToken.parse(str(conn.execute("SELECT pg_current_wal_insert_lsn()::text").scalar_one()))


@dataclass
class Replica:
    """One standby: its pool, its URL for messages (password hidden) and its health."""

    url: str
    pool: Pool
    down_until: float = 0.0
    lag_checked_at: float = -1e18
    lag_ok: bool = True


def verify_standby(primary: Connections, standby: Connections, url: str) -> None:
    """Raise :class:`ConfigurationError` unless ``standby`` is a hot standby of ``primary``.

    Checks that the server is in recovery and shares the primary's system identifier
    (a standby made from it by ``pg_basebackup``). ``url`` (password hidden) names it.
    """
    query = "SELECT system_identifier, pg_is_in_recovery() FROM pg_control_system()"
    try:
        with standby.connect() as conn:
            ident, recovering = conn.execute(query).one()
    except (psycopg.Error, DatabaseError) as exc:
        raise ConfigurationError(f"read replica {url} is unreachable: {exc.__cause__ or exc}") from exc
    if not recovering:
        raise ConfigurationError(f"read replica {url} is not a standby (pg_is_in_recovery() is false)")
    with primary.connect() as conn:
        primary_ident = conn.execute(query).one()[0]
    if ident != primary_ident:
        raise ConfigurationError(f"read replica {url} is not a standby of the primary "
                                 f"(system identifier {ident}, the primary's is {primary_ident})")


class ReadReplicas:
    """Round-robin choice among standbys, skipping failed and lagging ones; see the module docstring.

    ``max_lag`` (seconds, None: no bound), ``retry_after`` and ``wait_timeout`` (seconds)
    must be positive. ``primary_identifier`` (the primary's system identifier): a server
    that turns out to be something else than a standby of it is never used. ``primary``:
    the primary's connections, whose WAL position is sampled to measure lag (without it, lag is
    not checked). Thread-safe.
    :meth:`close` closes the standbys' pools.
    """

    def __init__(self, replicas: Sequence[Replica], *, primary: Connections | None = None,
                 primary_identifier: int | None = None, max_lag: float | None = DEFAULT_MAX_LAG,
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
        self._primary = primary
        self._samples: collections.deque[tuple[float, WriteToken]] = collections.deque()

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
        replica.pool.reopen()

    def usable(self, driver: psycopg.Connection[Any], replica: Replica, token: WriteToken | None) -> bool:
        """Whether ``driver`` (a connection to ``replica``, in autocommit) may serve a read:
        within the lag bound, and, given a token, replayed past it within ``wait_timeout``."""
        now = time.monotonic()
        if now - replica.lag_checked_at >= self._lag_check_interval:
            row = driver.execute(_STATE_SQL).fetchone()
            assert row is not None
            standby, ident, replayed = row
            ours = bool(standby) and (self._primary_identifier is None or ident == self._primary_identifier)
            lag = self._lag(None if replayed is None else WriteToken.parse(str(replayed)), now)
            # Behind by any sampled position counts against a bound of 0 (lag > 0 then).
            replica.lag_ok = ours and (lag is None or lag == 0.0 or (self._max_lag is not None and lag < self._max_lag))
            replica.lag_checked_at = now
        if not replica.lag_ok:
            return False
        if token is None:
            return True
        deadline = now + self._wait_timeout
        while True:
            row = driver.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
            replayed = None if row is None else row[0]
            if replayed is not None and WriteToken.parse(str(replayed)) >= token:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)

    def _lag(self, replayed: WriteToken | None, now: float) -> float | None:
        """Seconds the standby is behind: since the earliest sampled moment the primary's WAL
        was past ``replayed`` (0.0: not behind any sample; None: unknown, no primary)."""
        if self._primary is None or self._max_lag is None:
            return None
        with self._lock:
            if not self._samples or now - self._samples[-1][0] >= self._lag_check_interval / 2:
                try:
                    with self._primary.connect() as conn:
                        self._samples.append((now, current_token(conn)))
                except (psycopg.Error, DatabaseError):
                    return None  # the primary is unreachable: lag unknown, the standby may serve
            horizon = now - 2 * (self._max_lag + self._lag_check_interval)
            while len(self._samples) > 1 and self._samples[1][0] < horizon:
                self._samples.popleft()
            samples = list(self._samples)
        if replayed is None:
            return float("inf")
        behind = next((t for t, position in samples if position > replayed), None)
        return 0.0 if behind is None else max(now - behind, 1e-9)

    def connect(self, token: WriteToken | None) -> tuple[Checkout, Replica] | None:
        """A pooled connection to the next usable standby for one read (handed back
        outside any transaction, autocommit off), or None when none is."""
        for replica in self.candidates():
            try:
                handed = replica.pool.checkout()
            except (psycopg.Error, DatabaseError):
                self.mark_failed(replica)
                continue
            driver = handed.driver
            try:
                driver.autocommit = True
                if self.usable(driver, replica, token):
                    driver.autocommit = False
                    return handed, replica
                driver.autocommit = False
                handed.release()
            except psycopg.Error:
                handed.discard()
                self.mark_failed(replica)
        return None

    def close(self) -> None:
        """Close every standby's pool."""
        for replica in self._replicas:
            replica.pool.close()


def open_replicas(primary: Connections, urls: Sequence[str], *, schema: str, pool_size: int, max_overflow: int,
                  optional: bool, max_lag: float | None, wait_timeout: float,
                  hooks: Sequence[ConnectionHooks] = (),
                  ping_after_idle: float = DEFAULT_PING_AFTER_IDLE) -> ReadReplicas:
    """Pools for the standbys at ``urls``, each checked to be a standby of ``primary``
    (an unreachable one is an error unless ``optional``: then it is tried at the first read).
    ``hooks`` and ``ping_after_idle`` as for the primary's pool (:class:`~tnsrag_db._db.pool.Pool`)."""
    if isinstance(urls, str) or hasattr(urls, "render_as_string"):
        raise ConfigurationError("read_urls must be a list of URLs, not a single URL")
    replicas: list[Replica] = []
    try:
        with primary.connect() as conn:
            ident = int(conn.execute("SELECT system_identifier FROM pg_control_system()").scalar_one())
        for url in urls:
            name = redact_url(url)
            pool = Pool(url, schema=schema, pool_size=pool_size, max_overflow=max_overflow, read_only=True,
                        hooks=hooks, ping_after_idle=ping_after_idle)
            replica = Replica(name, pool)
            replicas.append(replica)
            try:
                verify_standby(primary, pool, name)
            except ConfigurationError as exc:
                if not (optional and "unreachable" in str(exc)):
                    raise
        return ReadReplicas(replicas, primary=primary, primary_identifier=ident, max_lag=max_lag,
                            wait_timeout=wait_timeout)
    except BaseException:
        for replica in replicas:
            replica.pool.close()
        raise
