"""``tnsrag server``: start, stop and inspect the kept-running embedded PostgreSQL server."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import click

from tnsrag_db._cli._common import emit, handle_errors
from tnsrag_db._cli._group import SuggestingGroup
from tnsrag_db._errors import ValidationError
from tnsrag_db._store.embedded import keeper as kept
from tnsrag_db._store.embedded.memory import human, parse_size

__all__ = ["server"]


def _describe(st: kept.ServerStatus) -> str:
    lines = [f"embedded server: {'running' if st.running else 'not running'}",
             f"  data dir:   {st.data_dir}"]
    if st.running:
        where = f"socket {st.socket_dir}" + (f" (port {st.port})" if st.port else "") if st.socket_dir \
            else f"port {st.port}"
        lines += [f"  listening:  {where}", f"  pid:        {st.pid}", f"  url:        {st.url}"]
    if st.postgres_version:
        lines.append(f"  PostgreSQL: {st.postgres_version}")
    if st.binaries:
        whose = {"this": "", "other": " (another installation's: the next command restarts the server on this "
                                      "one's once no client is connected)",
                 "gone": " (deleted since it started: the next command restarts the server on this "
                         "installation's)"}.get(st.installation or "this", "")
        lines.append(f"  binaries:   {st.binaries}{whose}")
    if st.keeper_pid is not None:
        when = "no idle timeout" if not st.idle_timeout else f"stops after {st.idle_timeout:g} s idle"
        last = st.last_use.astimezone().strftime("%Y-%m-%d %H:%M:%S") if st.last_use else "?"
        lines.append(f"  kept running by pid {st.keeper_pid}: {when} (last use {last})")
    elif st.running:
        lines.append("  not kept running: it stops when the processes using it exit")
    if st.memory:
        m = st.memory
        lines.append(f"  memory:     budget {human(m['budget'])} from {m['budget_from']} "
                     f"(machine: {human(m['ram'])} RAM, {m['cpus']} CPUs); settings, and where each came from:")
    for item in st.settings or ():
        asked = f" (files ask {item['file_value']}: restart needed)" if item["restart_needed"] else ""
        lines.append(f"    {item['name']:<33} {item['value']:>7}  {item['source']}{asked}")
    if any(item["restart_needed"] for item in st.settings or ()):
        lines.append("  restart needed for the settings marked: tnsrag server stop && tnsrag server start")
    return "\n".join(lines)


def _version() -> str:
    return importlib.metadata.version("tnsrag-db")


@click.group(cls=SuggestingGroup)
def server() -> None:
    """The embedded PostgreSQL server that commands without --url use.

    The first such command starts it and it keeps running for later commands, stopping
    after --server-idle-timeout seconds (default 900) without a client or command.

    Example: tnsrag server status --json
    """


def _memory_size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--memory checked as the options are parsed: a malformed size is a usage error (exit
    status 2) naming the option, and nothing starts."""
    if value is not None:
        try:
            parse_size(value, option="--memory")
        except ValidationError as exc:
            raise click.BadParameter(str(exc).removeprefix("--memory: "), ctx=ctx, param=param) from None
    return value


@server.command()
@click.option("--idle-timeout", type=click.FloatRange(min=0), default=kept.DEFAULT_IDLE_TIMEOUT,
              show_default=True, envvar="TNSRAG_SERVER_IDLE_TIMEOUT", metavar="SECONDS",
              help="Stop after this many seconds without a client or command (0: never).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory (default: the user data directory's tnsrag_db/pg18).")
@click.option("--memory", default=None, metavar="SIZE", callback=_memory_size,
              help="Memory budget the server's settings are sized from, e.g. 4GB, 512MB or auto (25 % of RAM, "
                   "at most 8GB); remembered for later starts. Default: TNSRAG_SERVER_MEMORY, else the "
                   "remembered budget, else auto.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@handle_errors
def start(idle_timeout: float, data_dir: Path | None, memory: str | None, as_json: bool) -> None:
    """Start the embedded server (initialising its data directory on first use) and keep it running.

    A server already kept running keeps its own idle timeout. Its memory and WAL settings
    are sized from the budget; a running server takes a new --memory at once except for
    shared_buffers, which needs a restart (the output says so).

    Example: tnsrag server start --idle-timeout 3600 --memory 2GB
    """
    kept.ensure_running(data_dir, idle_timeout=idle_timeout, memory=memory)
    st = kept.status(data_dir, settings=True)
    emit({**st.as_dict(), "tnsrag_version": _version()}, as_json, _describe(st))


@server.command()
@click.option("--force", is_flag=True, help="Stop the server even while scripts still use it.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory (default: the user data directory's tnsrag_db/pg18).")
@click.option("--json", "as_json", is_flag=True, help="Print the status afterwards as JSON.")
@handle_errors
def stop(force: bool, data_dir: Path | None, as_json: bool) -> None:
    """Stop the kept-running embedded server now (data stays in the data directory).

    Without --force a server that a running script opened with connect() stays up until
    that script exits. Exits 1 when the server is still running afterwards.

    Example: tnsrag server stop
    """
    before = kept.status(data_dir)
    st = kept.stop(data_dir, force=force)
    if not before.running:
        said = f"no server was running in {before.data_dir}"
    elif st.running:
        said = (f"the server in {before.data_dir} (pid {before.pid}) is still in use by a script; it stops when "
                "the script exits (or use --force)")
    else:
        version = f", PostgreSQL {before.postgres_version}" if before.postgres_version else ""
        keeper = f" and its keeper (pid {before.keeper_pid})" if before.keeper_pid else ""
        said = f"stopped the server in {before.data_dir} (pid {before.pid}{version}){keeper}; the data stays there"
    emit({**st.as_dict(), "tnsrag_version": _version(), "stopped": bool(before.running and not st.running),
          "stopped_pid": before.pid if before.running and not st.running else None}, as_json, said)
    if st.running:
        sys.exit(1)


@server.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory (default: the user data directory's tnsrag_db/pg18).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@handle_errors
def status(data_dir: Path | None, as_json: bool) -> None:
    """Show whether the embedded server runs, where its data lives, its socket or port and versions,
    and its memory settings with where each came from.

    Starts nothing; exits 0 whether or not the server runs (--json says so in "running").

    Example: tnsrag server status --json
    """
    st = kept.status(data_dir, settings=True)
    emit({**st.as_dict(), "tnsrag_version": _version()}, as_json, _describe(st) + f"\n  tnsrag_db:  {_version()}")
