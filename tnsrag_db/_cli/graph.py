"""``tnsrag graph``: add edges between entries, one at a time or from a CSV/JSONL file.

Also re-exports :func:`graph_strategy` (from :mod:`tnsrag_db._strategies.compose`), the graph
strategy ``tnsrag query --strategy graph`` uses.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from tqdm import tqdm

from tnsrag_db._cli._common import db_options, emit, handle_errors, plural
from tnsrag_db._cli._group import SuggestingGroup
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._errors import ValidationError
from tnsrag_db._indexes.graph import DEFAULT_RELATION, Edge, GraphStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.compose import graph_strategy
from tnsrag_db._types import parse_instant

__all__ = ["graph", "graph_strategy", "read_edges"]

_FIELDS = ("src", "dst", "relation", "weight", "source", "valid_from", "valid_until")


def _instant(value: Any, what: str) -> datetime | None:
    """An ISO-8601 instant with a zone from a file or an option (empty or None: unbounded)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be an ISO-8601 instant with a zone, got {value!r}")
    return parse_instant(value)


def _edge(record: dict[str, Any], where: str) -> Edge:
    unknown = sorted(set(record) - set(_FIELDS))
    if unknown:
        raise ValidationError(f"{where}: unknown field(s) {', '.join(unknown)}; expected {', '.join(_FIELDS)}")
    weight: Any = record.get("weight")
    if weight is None or weight == "":
        weight = 1.0
    elif isinstance(weight, str):
        try:
            weight = float(weight)
        except ValueError:
            raise ValidationError(f"{where}: weight {weight!r} is not a number") from None
    relation = record.get("relation") or DEFAULT_RELATION
    source = record.get("source") or None
    try:
        bounds = [_instant(record.get(name), name) for name in ("valid_from", "valid_until")]
        return Edge(record.get("src"), record.get("dst"), relation, weight, source, *bounds)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def read_edges(path: Path) -> Iterator[Edge]:
    """Edges from ``path``: JSONL (``.jsonl``/``.ndjson``: one object per line) or CSV with a
    header naming ``src,dst`` and optionally ``relation,weight,source,valid_from,valid_until``
    (the last two ISO-8601 instants with a zone; empty: unbounded).

    Raises :class:`ValidationError` naming the line of a bad record.
    """
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValidationError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
                if not isinstance(record, dict):
                    raise ValidationError(f"{path}:{number}: expected a JSON object")
                if isinstance(record.get("weight"), float) and not math.isfinite(record["weight"]):
                    raise ValidationError(f"{path}:{number}: weight must be finite")
                yield _edge(record, f"{path}:{number}")
        return
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        if "src" not in header or "dst" not in header:
            raise ValidationError(f"{path}: the CSV header must name src and dst (optionally relation, weight, "
                                  f"source, valid_from, valid_until); got {', '.join(header) or 'nothing'}")
        for row in reader:
            yield _edge({k: v for k, v in row.items() if k is not None}, f"{path}:{reader.line_num}")


F = TypeVar("F", bound=Callable[..., Any])


def _target_options(func: F) -> F:
    """--url/--schema/--corpus on a subcommand too, overriding the group's (so both
    ``tnsrag graph --corpus docs add-edge a b`` and ``tnsrag graph add-edge a b --corpus docs`` work)."""
    func = click.option("--corpus", "sub_corpus", default=None, help="Corpus (overrides the group option).")(func)
    func = click.option("--schema", "sub_schema", default=None, help="Schema (overrides the group option).")(func)
    func = click.option("--url", "sub_url", default=None, help="Database URL (overrides the group option).")(func)
    return func


def _open(ctx: click.Context, url: str | None, schema: str | None, corpus: str | None) -> Store:
    o = ctx.obj
    url = url if url is not None else o["url"]
    # Edges join entries that exist: no graph command creates a schema.
    return open_existing(url, schema if schema is not None else o["schema"],
                         corpus if corpus is not None else o["corpus"])


@click.group(cls=SuggestingGroup)
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus whose entries the edges join.")
@click.pass_context
def graph(ctx: click.Context, url: str | None, schema: str, corpus: str) -> None:
    """Typed, weighted, directed edges between entries, walked by --strategy graph.

    Both ends of an edge must be existing entries of the corpus; deleting an entry
    deletes its edges.

    Example: tnsrag graph --corpus docs add-edge guide faq --relation cites --weight 2
    """
    ctx.obj = {"url": url, "schema": schema, "corpus": corpus}


@graph.command("add-edge")
@click.argument("src")
@click.argument("dst")
@click.option("--relation", default=DEFAULT_RELATION, show_default=True, help="Edge type.")
@click.option("--weight", type=float, default=1.0, show_default=True,
              help="Finite weight; heavier edges are followed first.")
@click.option("--source", default=None, help="Where the edge came from.")
@click.option("--valid-from", "valid_from", default=None, metavar="INSTANT",
              help="The edge holds from this ISO-8601 instant with a zone on (inclusive). Default: always.")
@click.option("--valid-until", "valid_until", default=None, metavar="INSTANT",
              help="The edge holds until this ISO-8601 instant with a zone (exclusive). Default: still.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@_target_options
@click.pass_context
@handle_errors
def add_edge(ctx: click.Context, src: str, dst: str, relation: str, weight: float, source: str | None,
             valid_from: str | None, valid_until: str | None, as_json: bool, sub_url: str | None,
             sub_schema: str | None, sub_corpus: str | None) -> None:
    """Add (or update) the edge SRC -> DST: its weight, source and validity are replaced.

    A walk (tnsrag query --strategy graph, --as-of included) follows the edge only at the
    instants it is valid.

    Example: tnsrag graph add-edge install-guide troubleshooting --corpus docs --relation see-also --weight 0.5

    Example: tnsrag graph add-edge alice acme --relation works-at --valid-from 2024-01-01T00:00:00Z
    """
    bounds = []
    for option, value in (("--valid-from", valid_from), ("--valid-until", valid_until)):
        try:
            bounds.append(_instant(value, option))
        except ValidationError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    edge = Edge(src, dst, relation, weight, source, *bounds)
    with _open(ctx, sub_url, sub_schema, sub_corpus) as store:
        counts = GraphStore(store).add_edges([edge])
    data = {"inserted": counts.inserted, "updated": counts.updated, "unchanged": counts.unchanged}
    state = "added" if counts.inserted else "updated" if counts.updated else "unchanged"
    emit(data, as_json, f"{state}: {src} -[{relation}]-> {dst} (weight {weight:g})")


@graph.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@_target_options
@click.pass_context
@handle_errors
def import_edges(ctx: click.Context, file: Path, as_json: bool, sub_url: str | None, sub_schema: str | None,
                 sub_corpus: str | None) -> None:
    """Import edges from FILE in one transaction: CSV with a header
    (src,dst[,relation,weight,source,valid_from,valid_until]) or JSONL (.jsonl/.ndjson, one
    {"src": ..., "dst": ...} object per line, with the same optional fields).

    Every edge is checked first; one bad edge or missing entry imports nothing.
    A repeated (src, relation, dst) keeps its last line.

    Example: tnsrag graph --corpus docs import links.csv --json
    """
    edges = list(read_edges(file))
    with _open(ctx, sub_url, sub_schema, sub_corpus) as store, \
            tqdm(total=len(edges), unit="edge", desc="import", disable=as_json or None) as bar:
        last = 0

        def advance(done: int) -> None:
            nonlocal last
            bar.update(done - last)
            last = done

        counts = GraphStore(store).add_edges(edges, progress=advance)
    data = {"edges": len(edges), "inserted": counts.inserted, "updated": counts.updated,
            "unchanged": counts.unchanged}
    emit(data, as_json, f"{plural(len(edges), 'edge')}: {counts.inserted} inserted, {counts.updated} updated, "
                        f"{counts.unchanged} unchanged")
