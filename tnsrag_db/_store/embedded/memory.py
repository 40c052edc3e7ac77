"""Memory and WAL settings of the embedded server, sized for the machine it runs on, and the
module that keeps its page cache across restarts.

PostgreSQL's stock settings (``shared_buffers`` 128 MB, ``work_mem`` 4 MB,
``maintenance_work_mem`` 64 MB, ``max_wal_size`` 1 GB) are sized for a server sharing a
small machine with anything; on a developer machine with gigabytes free, a corpus of a few
GB is then served mostly by page reads. :func:`server_settings` derives settings from a
*memory budget* (the memory the server may take for its shared cache; by default a share
of the machine's RAM, capped, since the embedded server shares a laptop with its user) and
the CPU count; a pure function, so what each machine gets is testable.

How they are applied (:func:`write_config`): a generated file ``tnsrag.conf`` in the data
directory, included from the **top** of ``postgresql.conf``. PostgreSQL reads its
configuration files in order and the last value read wins, and ``postgresql.auto.conf``
(``ALTER SYSTEM``) is read after ``postgresql.conf``; so a setting of the user's own, in
``postgresql.conf`` or by ``ALTER SYSTEM``, always wins over the generated one, and the
generated one survives restarts (it is a file the server reads at every start), unlike
command-line options, which would override both. initdb's own uncommented
``shared_buffers`` and ``max_wal_size`` lines are commented out once, when the include is
added, so that they do not win over it.

The budget comes from (first that applies): an explicit ``memory`` (``tnsrag server start
--memory``, remembered in ``tnsrag.json`` in the data directory), the environment variable
``TNSRAG_SERVER_MEMORY`` (read when a server is started; not remembered), the remembered
choice, else ``auto``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from tnsrag_db._errors import DatabaseError, ValidationError
from tnsrag_db._store.embedded.installation import has_module

__all__ = ["AUTO_CAP", "AUTO_SHARE", "CHOICE_FILE", "CONF_FILE", "ENV_VAR", "MIN_BUDGET", "PREWARM_LIBRARY",
           "MemoryPlan", "apply", "configured", "effective", "format_size", "human", "machine", "parse_size", "plan",
           "prewarm_available", "remembered", "server_settings", "write_config"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: Share of the machine's RAM the automatic budget takes.
AUTO_SHARE = 0.25
#: The automatic budget's cap in bytes (8 GiB): the embedded server shares the machine with its user.
AUTO_CAP = 8 * GiB
#: The smallest budget in bytes (64 MiB): below it PostgreSQL's stock settings are better.
MIN_BUDGET = 64 * MiB
#: The environment variable holding a budget, read when a server is started.
ENV_VAR = "TNSRAG_SERVER_MEMORY"
#: The generated settings file in the data directory.
CONF_FILE = "tnsrag.conf"
#: The remembered budget choice in the data directory (JSON ``{"memory": "auto" | bytes}``).
CHOICE_FILE = "tnsrag.json"
#: The module that keeps ``shared_buffers``' pages across restarts (its autoprewarm worker).
PREWARM_LIBRARY = "pg_prewarm"
_INCLUDE = f"include_if_exists = '{CONF_FILE}'"
_INITDB_LINE = re.compile(r"^(shared_buffers|max_wal_size)\s*=\s*(128MB|1GB)\b", re.MULTILINE)

_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str, *, option: str = "--memory") -> int | None:
    """A memory size in bytes from ``"4GB"``, ``"512MiB"``, ``"1.5g"`` or a bare byte count
    (units are binary: 1 GB = 1024 MiB, as in PostgreSQL); None for ``"auto"``. Raises
    :class:`ValidationError` naming ``option`` for anything else or a size below
    :data:`MIN_BUDGET`."""
    value = text.strip().lower()
    if value == "auto":
        return None
    size = _size(value)
    if size is None:
        raise ValidationError(f"{option}: expected a size such as 4GB, 512MB or auto, got {text!r}")
    if size < MIN_BUDGET:
        raise ValidationError(f"{option}: {text!r} is below the smallest budget of {format_size(MIN_BUDGET)}")
    return size


def _size(text: str) -> int | None:
    """Bytes of a size such as ``"4gb"`` or ``"512"`` (lower case), None when it is not one."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text)
    if match is None or match.group(2) not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(size: int) -> str:
    """``size`` bytes as PostgreSQL writes memory settings: whole GB when exact, else MB (or kB)."""
    if size % GiB == 0:
        return f"{size // GiB}GB"
    if size % MiB == 0 or size >= MiB:
        return f"{size // MiB}MB"
    return f"{max(size // KiB, 1)}kB"


def human(size: int) -> str:
    """``size`` bytes for people: ``"5.9 GiB"``, ``"512 MiB"``."""
    if size >= GiB:
        return f"{size / GiB:.1f} GiB"
    return f"{size / MiB:.0f} MiB"


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def server_settings(ram: int, cpus: int, budget: int | None = None, *, prewarm: bool = True) -> dict[str, str]:
    """PostgreSQL settings for a machine with ``ram`` bytes and ``cpus`` CPUs and a memory
    budget of ``budget`` bytes (None: :data:`AUTO_SHARE` of ``ram``, at most
    :data:`AUTO_CAP`, at least :data:`MIN_BUDGET`), as ``name -> value`` in
    ``postgresql.conf`` syntax, in a fixed order. Raises :class:`ValidationError` for a
    budget below :data:`MIN_BUDGET` or above ``ram``.

    * ``shared_buffers`` = the budget: PostgreSQL's own page cache; pages read from it
      need no system call and no copy. Memory is taken as pages are first used.
    * ``effective_cache_size`` = the budget or half the RAM, the larger: a planner hint of
      how much data the server and the OS cache together hold (it allocates nothing).
    * ``work_mem`` = 1/128 of the budget, 4-64 MB: per sort or hash of a query before it
      spills to disk.
    * ``maintenance_work_mem`` = 1/8 of the budget, 64 MB-1 GB: index builds (an HNSW
      build raises it for itself to hold its graph) and VACUUM;
      ``autovacuum_work_mem`` = 1/32 of the budget, 64-256 MB, so background vacuums do not
      each take that much.
    * ``max_parallel_maintenance_workers`` = half the CPUs, 1-4: workers of an index build.
    * ``max_wal_size`` = the budget, 1-4 GB, and ``checkpoint_timeout`` 15 min: a bulk
      load checkpoints (and writes each page's full image again after it) less often;
      ``wal_compression`` on compresses those full-page images.
    * ``shared_preload_libraries`` = ``pg_prewarm`` (with ``prewarm``: the installation has
      the library): its autoprewarm worker records which pages ``shared_buffers`` holds
      (every 5 minutes and at shutdown, in ``autoprewarm.blocks`` in the data directory)
      and reads them back in the background after the next start, so the first queries
      after the server stopped idle find the cache as it was instead of reading each page
      again.
    """
    if budget is None:
        budget = _clamp(int(ram * AUTO_SHARE), MIN_BUDGET, AUTO_CAP)
    elif budget < MIN_BUDGET:
        raise ValidationError(f"memory budget {budget} bytes is below the smallest of {format_size(MIN_BUDGET)}")
    elif budget > ram:
        raise ValidationError(f"memory budget {format_size(budget)} exceeds the machine's RAM of {format_size(ram)}")
    mb = budget // MiB * MiB  # whole MB: the values read back equal the ones written
    return {
        "shared_buffers": format_size(mb),
        "effective_cache_size": format_size(max(mb, ram // 2 // MiB * MiB)),
        "work_mem": format_size(_clamp(mb // 128 // MiB * MiB, 4 * MiB, 64 * MiB)),
        "maintenance_work_mem": format_size(_clamp(mb // 8 // MiB * MiB, 64 * MiB, GiB)),
        "autovacuum_work_mem": format_size(_clamp(mb // 32 // MiB * MiB, 64 * MiB, 256 * MiB)),
        "max_parallel_maintenance_workers": str(_clamp(cpus // 2, 1, 4)),
        "max_wal_size": format_size(_clamp(mb, GiB, 4 * GiB)),
        "checkpoint_timeout": "15min",
        "wal_compression": "on",
        **({"shared_preload_libraries": PREWARM_LIBRARY} if prewarm else {}),
    }


def prewarm_available() -> bool:
    """Whether this installation's PostgreSQL has the :data:`PREWARM_LIBRARY` module."""
    return has_module(PREWARM_LIBRARY)


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes (a container's), if any."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit
            return int(text)
    return None


def machine() -> tuple[int, int]:
    """``(RAM in bytes, CPUs)`` available to this process: the physical RAM, or a
    container's (cgroup's) memory limit when lower; the CPUs it may run on."""
    ram = int(psutil.virtual_memory().total)
    limit = _cgroup_memory_limit() if sys.platform.startswith("linux") else None
    if limit is not None:
        ram = min(ram, limit)
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return ram, max(cpus, 1)


@dataclass(frozen=True)
class MemoryPlan:
    """The settings :func:`plan` chose and why: ``budget`` in bytes, ``origin`` one of
    ``"auto"``, ``"--memory"``, ``"TNSRAG_SERVER_MEMORY"`` or ``"tnsrag.json"``."""

    budget: int
    origin: str
    ram: int
    cpus: int
    settings: dict[str, str] = field(default_factory=dict)
    #: An explicit ``--memory`` to remember in ``tnsrag.json``: bytes, 0 for ``auto`` (which
    #: forgets a remembered budget), None to leave the remembered choice as it is.
    remember: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {"budget": self.budget, "budget_from": self.origin, "ram": self.ram, "cpus": self.cpus,
                "settings": dict(self.settings)}


def remembered(data_dir: Path) -> int | None:
    """The budget remembered in ``data_dir``'s ``tnsrag.json`` (None: auto, or none remembered)."""
    try:
        choice = json.loads((data_dir / CHOICE_FILE).read_text()).get("memory")
    except (OSError, ValueError, AttributeError):
        return None
    return choice if isinstance(choice, int) and choice >= MIN_BUDGET else None


def plan(data_dir: Path, memory: str | None = None, environ: Mapping[str, str] | None = None,
         hardware: tuple[int, int] | None = None, prewarm: bool | None = None) -> MemoryPlan:
    """The settings for the server of ``data_dir``: from ``memory`` (a size or ``"auto"``),
    else ``environ[TNSRAG_SERVER_MEMORY]`` (default ``os.environ``), else the budget
    remembered in ``tnsrag.json``, else auto; ``hardware`` is ``(RAM bytes, CPUs)``
    (default: :func:`machine`), ``prewarm`` whether to load :data:`PREWARM_LIBRARY`
    (default: :func:`prewarm_available`). Raises :class:`ValidationError` for a malformed
    size or a budget out of range, naming where it came from."""
    env = os.environ if environ is None else environ
    ram, cpus = hardware or machine()
    remember = None
    if memory is not None:
        budget, origin = parse_size(memory), "--memory"
        remember = budget or 0
    elif env.get(ENV_VAR, "").strip():
        budget, origin = parse_size(env[ENV_VAR], option=ENV_VAR), ENV_VAR
    elif (kept := remembered(data_dir)) is not None:
        budget, origin = kept, CHOICE_FILE
    else:
        budget, origin = None, "auto"
    if budget is not None and budget > ram:
        raise ValidationError(f"{origin}: {format_size(budget)} exceeds the machine's RAM of {format_size(ram)}")
    settings = server_settings(ram, cpus, budget, prewarm=prewarm_available() if prewarm is None else prewarm)
    if budget is None:
        origin = "auto"
    return MemoryPlan(parse_size(settings["shared_buffers"]) or 0, origin, ram, cpus, settings, remember)


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (a server reading it never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)  # readable by the server's own user when it is not ours
    os.replace(tmp, path)


def write_config(data_dir: Path, chosen: MemoryPlan) -> bool:
    """Write ``chosen`` to ``data_dir``'s ``tnsrag.conf``, include that file from the top of
    ``postgresql.conf`` if it is not yet, and remember an explicit ``--memory`` budget in
    ``tnsrag.json`` (``auto`` forgets it). A running server reads the file at its next
    reload or start. Returns whether ``tnsrag.conf`` changed. ``data_dir`` must be an
    initialised data directory (it has ``postgresql.conf``)."""
    main_conf = data_dir / "postgresql.conf"
    text = main_conf.read_text()
    if _INCLUDE not in text:
        # Commented out once: initdb's own lines would win over an include above them.
        body = _INITDB_LINE.sub(lambda m: f"#{m.group(0)}  # set in {CONF_FILE}; a line of yours here wins", text)
        main_conf.write_text(f"# tnsrag_db's settings sized for this machine (tnsrag server status shows them);\n"
                             f"# any setting below, or ALTER SYSTEM, wins over them.\n{_INCLUDE}\n\n{body}")
    if chosen.remember is not None:
        _write(data_dir / CHOICE_FILE, json.dumps({"memory": chosen.remember or "auto"}) + "\n")
    why = {"auto": f"auto: {AUTO_SHARE:.0%} of {human(chosen.ram)} RAM, at most {human(AUTO_CAP)}",
           "--memory": "tnsrag server start --memory", ENV_VAR: f"the {ENV_VAR} environment variable",
           CHOICE_FILE: f"remembered in {CHOICE_FILE}"}[chosen.origin]
    lines = ["# Written by tnsrag_db at each start of the embedded server; edits here are replaced.",
             "# Put settings of your own in postgresql.conf or use ALTER SYSTEM: both win over these.",
             f"# budget = {chosen.budget} from {chosen.origin} ({why}); machine: {chosen.ram} bytes RAM, "
             f"{chosen.cpus} CPUs",
             *(f"{name} = '{value}'" for name, value in chosen.settings.items())]
    new = "\n".join(lines) + "\n"
    conf = data_dir / CONF_FILE
    try:
        old = conf.read_text()
    except OSError:
        old = ""
    if old != new:
        _write(conf, new)
    # Changed only when a setting did (the header also names where the budget came from).
    return [x for x in old.splitlines() if not x.startswith("#")] != lines[3:]


def _bytes(setting: str, unit: str | None) -> int | None:
    """A memory setting's value in bytes from ``pg_settings``' ``setting`` and ``unit``
    (``"8kB"``, ``"kB"``, ``"MB"``), or a file's value (``"4GB"``, or a bare number in
    ``unit``); None when it is not a memory value."""
    text = setting.strip().strip("'").lower()
    base = {"8kb": 8 * KiB, "kb": KiB, "mb": MiB, "b": 1}.get((unit or "").lower())
    if base is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text) * base
    return _size(text)


def effective(url: str, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The running server's values of ``names`` (default: the settings this module sizes),
    read at ``url`` (a libpq URL): per setting ``name``, ``value`` (as ``SHOW`` prints it),
    ``source`` (``"tnsrag.conf"``, ``"postgresql.conf"``, ``"ALTER SYSTEM"``,
    ``"PostgreSQL default"`` or PostgreSQL's own word), ``file_value`` (what the
    configuration files say now, None when they say nothing) and ``restart_needed`` (the
    files ask a different value of a setting that only a restart changes). Raises
    :class:`~tnsrag_db._errors.DatabaseError` when the server cannot be read."""
    wanted = names or list(server_settings(4 * GiB, 2))
    try:
        with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT name, current_setting(name), setting, unit, source, sourcefile, context, pending_restart "
                "FROM pg_settings WHERE name = ANY(%s)", (wanted,)).fetchall()
            # pg_file_settings reads the files now; the last entry of a name wins (one that
            # needs a restart to apply carries an error saying so: it still is what is asked).
            files: dict[str, str] = dict(conn.execute(
                "SELECT DISTINCT ON (name) name, setting FROM pg_file_settings "
                "WHERE name = ANY(%s) ORDER BY name, seqno DESC", (wanted,)).fetchall())
    except psycopg.Error as exc:
        raise DatabaseError(f"could not read the embedded server's settings: {exc}") from exc
    by_name = {row[0]: row for row in rows}
    out: list[dict[str, Any]] = []
    for name in wanted:
        if name not in by_name:
            continue
        _, shown, setting, unit, source, sourcefile, context, pending = by_name[name]
        if sourcefile:
            where = {"postgresql.auto.conf": "ALTER SYSTEM"}.get(Path(sourcefile).name, Path(sourcefile).name)
        else:
            where = "PostgreSQL default" if source == "default" else str(source)
        file_value = files.get(name)
        restart = bool(pending)
        if context == "postmaster" and file_value is not None and not restart:
            now, asked = _bytes(setting, unit), _bytes(file_value, unit)
            restart = now != asked if now is not None and asked is not None else setting != file_value
        out.append({"name": name, "value": shown, "source": where, "file_value": file_value,
                    "restart_needed": restart})
    return out


def apply(data_dir: Path, url: str, chosen: MemoryPlan) -> bool:
    """Write ``chosen`` (:func:`write_config`) for the server running at ``url`` and make it
    reread its files (``pg_reload_conf()``): every setting but ``shared_buffers`` takes
    effect for new sessions; ``shared_buffers`` waits for a restart (:func:`effective` says
    so). Returns whether the settings file changed. Raises
    :class:`~tnsrag_db._errors.DatabaseError` when the server cannot be reached."""
    changed = write_config(data_dir, chosen)
    if changed:
        try:
            with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
                conn.execute("SELECT pg_reload_conf()")
        except psycopg.Error as exc:
            raise DatabaseError(f"could not reload the embedded server's settings: {exc}") from exc
    return changed


def configured(data_dir: Path) -> dict[str, Any] | None:
    """What ``data_dir``'s ``tnsrag.conf`` was written from: ``{"budget": bytes,
    "budget_from": origin, "ram": bytes, "cpus": n}``; None when there is no such file."""
    try:
        text = (data_dir / CONF_FILE).read_text()
    except OSError:
        return None
    match = re.search(r"^# budget = (\d+) from (\S+) .*machine: (\d+) bytes RAM, (\d+) CPUs$", text, re.MULTILINE)
    if match is None:
        return None
    return {"budget": int(match.group(1)), "budget_from": match.group(2), "ram": int(match.group(3)),
            "cpus": int(match.group(4))}
