"""``tnsrag db tenant``: which database role may use which corpora (row-level security)."""

from __future__ import annotations

import click

from tnsrag_db import tenancy
from tnsrag_db._cli._common import db_options, emit, handle_errors
from tnsrag_db._cli._group import SuggestingGroup
from tnsrag_db._db.pool import OneConnection
from tnsrag_db._store.embedded.resolve import embedded_url

__all__ = ["tenant"]


@click.group(cls=SuggestingGroup)
def tenant() -> None:
    """Grant database roles their corpora for tenant isolation (run as the schema's owner).

    With row-level security on (tnsrag db upgrade --tenancy rls) a tenant role sees and
    writes only the corpora granted here; see docs/deployment.md,
    "Tenancy".

    Example: tnsrag db tenant grant acme_app acme
    """


def _run(url: str | None, schema: str, action: str, role: str, corpus: str, as_json: bool,
         lock_timeout: float | None = None) -> None:
    db = OneConnection(url if url else embedded_url(), schema=schema)
    extra: dict[str, object] = {}
    try:
        if action == "grant":
            changed = tenancy.grant(db, schema=schema, role=role, corpus=corpus,
                                    lock_timeout=tenancy.DEFAULT_LOCK_TIMEOUT_SECONDS if lock_timeout is None
                                    else lock_timeout)
            extra["lock_timeout"] = tenancy.lock_timeout(db, role=role)
        else:
            changed = tenancy.revoke(db, schema=schema, role=role, corpus=corpus)
        enabled = tenancy.is_enabled(db, schema=schema)
    finally:
        db.close()
    done = {"grant": ("granted", "already granted"), "revoke": ("revoked", "was not granted")}[action]
    text = f"{role} / {corpus}: {done[0] if changed else done[1]}"
    if "lock_timeout" in extra:
        bound = extra["lock_timeout"]
        text += (f"; lock_timeout {bound:g} s" if bound else "; lock_timeout not set: another tenant's locks "
                 "can stall this role without bound")
    if not enabled:
        text += " (row-level security is off: run tnsrag db upgrade --tenancy rls)"
    emit({"schema": schema, "role": role, "corpus": corpus, action: changed, **extra,
          "tenancy": "rls" if enabled else "off"}, as_json, text)


@tenant.command()
@click.argument("role")
@click.argument("corpus")
@db_options
@click.option("--lock-timeout", "lock_timeout", type=click.FloatRange(0, 86_400), default=None, metavar="SECONDS",
              help="The role's lock_timeout in this database: the longest another session's lock stalls it "
                   "(default 30; 0: no bound).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def grant(role: str, corpus: str, url: str | None, schema: str, lock_timeout: float | None, as_json: bool) -> None:
    """Let database role ROLE use CORPUS (it may not exist yet), with the table privileges a tenant needs.

    ROLE must exist and be a plain role: not a superuser, not BYPASSRLS, not the owner.
    Also sets the role's lock_timeout in this database (ALTER ROLE ... SET, which takes a
    superuser or CREATEROLE with ADMIN on ROLE; otherwise a warning gives the statement).

    Example: tnsrag db tenant grant acme_app acme --url postgresql://owner@db.internal/app
    """
    _run(url, schema, "grant", role, corpus, as_json, lock_timeout)


@tenant.command()
@click.argument("role")
@click.argument("corpus")
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def revoke(role: str, corpus: str, url: str | None, schema: str, as_json: bool) -> None:
    """Take CORPUS away from ROLE (its data stays; the role's sessions lose it at once).

    Example: tnsrag db tenant revoke acme_app acme
    """
    _run(url, schema, "revoke", role, corpus, as_json)


@tenant.command("list")
@db_options
@click.option("--role", default=None, help="Only this role's grants.")
@click.option("--corpus", default=None, help="Only the grants of this corpus.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def list_grants(url: str | None, schema: str, role: str | None, corpus: str | None, as_json: bool) -> None:
    """List the grants (as the owner: all of them; as a tenant role: its own) and whether RLS is on.

    Example: tnsrag db tenant list --corpus acme --json
    """
    db = OneConnection(url if url else embedded_url(), schema=schema)
    try:
        found = tenancy.grants(db, schema=schema, role=role, corpus=corpus)
        enabled = tenancy.is_enabled(db, schema=schema)
    finally:
        db.close()
    rows = [{"role": g.role, "corpus": g.corpus, "granted_at": g.created_at.isoformat()} for g in found]
    emit({"schema": schema, "tenancy": "rls" if enabled else "off", "grants": rows}, as_json,
         "\n".join([f"schema {schema}: tenancy {'rls' if enabled else 'off'}",
                    *(f"  {r['role']}\t{r['corpus']}" for r in rows)]))
