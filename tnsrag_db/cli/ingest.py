"""``tnsrag ingest``: read a document tree into a corpus, batch by batch, with progress.

The steps: pick the embedding (:func:`choose_embedding`), read every file (skips are
collected, ``--strict`` refuses them before anything is written), validate every entry,
then :meth:`VectorMemoryStore.ingest` (embedding overlaps the writes, each batch commits
on its own), then ``--prune``, then the summary.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import click

from tnsrag_db.cli._common import db_options, emit, handle_errors, parse_pairs
from tnsrag_db.errors import ConfigurationError, IngestInterrupted, InvalidEntryError
from tnsrag_db.types import MemoryEntry, MemoryTier

__all__ = ["choose_embedding", "ingest", "sample_corpus_path"]

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
_INTERRUPTED = "interrupted: {n} entries committed, the batch in progress was rolled back"


def sample_corpus_path() -> Path:
    """The small sample corpus that ships with the package (JSONL)."""
    return Path(str(resources.files("tnsrag_db") / "data" / "sample_corpus.jsonl"))


def choose_embedding(name: str | None = None) -> Any:
    """The embedding provider the ingest writes with: ``name`` (``hash``, the shipped
    model's name or an installed entry-point provider), by default the shipped model when
    the ``embed`` extra is installed, else the hash fallback with a one-line notice on
    stderr (:func:`tnsrag_db.embeddings.resolve_embedding`)."""
    from tnsrag_db.embeddings import resolve_embedding

    return resolve_embedding(name, on_fallback=lambda notice: click.echo(notice, err=True))


def _check_unique(entries: list[MemoryEntry]) -> None:
    first: dict[str, MemoryEntry] = {}
    for entry in entries:
        seen = first.setdefault(entry.id, entry)
        if seen is not entry:
            raise InvalidEntryError(
                f"entry id {entry.id!r} comes from both {seen.metadata.get('path', seen.source)!r} and "
                f"{entry.metadata.get('path', entry.source)!r}; give the roots different --id-prefix values",
                entry_id=entry.id)


def _stale_ids(store: Any, roots: list[tuple[str, Path]], prefix: str, kept: set[str]) -> list[str]:
    """Ids of file entries in this run's namespace that a root owns and this run did not produce.

    A directory root owns every path of the namespace (``--id-prefix``, or none), a file
    root its own name: entries of a deleted file, and chunks a changed file no longer has.
    """
    owned_files = {prefix + path.name for kind, path in roots if kind == "file"}
    owns_all = any(kind == "dir" for kind, _ in roots)
    rows = store.read("SELECT id, metadata->>'path' AS path FROM entries WHERE corpus = :c AND metadata ? 'path'",
                      {"c": store.corpus})
    stale = []
    for row in rows:
        if row.id in kept or not row.path.startswith(prefix):
            continue
        if owns_all or row.path in owned_files:
            stale.append(row.id)
    return stale


def _check_edge_ends(store: Any, edges: Any, loaded: set[str]) -> None:
    """Raise :class:`DanglingReferenceError` before anything is written when an edge of the
    files ends at an entry neither in the files nor in the corpus (batches commit one at a
    time, so the edge write after them could no longer undo the entries)."""
    import sqlalchemy as sa

    from tnsrag_db.errors import DanglingReferenceError

    ends = sorted({end for edge in edges for end in (edge.src, edge.dst)} - loaded)
    if not ends:
        return
    with store.session.transaction() as conn:
        stored = set(conn.execute(sa.text("SELECT id FROM entries WHERE corpus = :c AND id = ANY(:ids)"),
                                  {"c": store.corpus, "ids": ends}).scalars())
    missing = [end for end in ends if end not in stored]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise DanglingReferenceError(f"edges end at entries that are neither in the files nor in corpus "
                                     f"{store.corpus!r}: {shown}; nothing was written")


def _summary(corpus: str, result: dict[str, Any]) -> str:
    head = (f"{result['entries']} entries from {result['files']} file(s) into corpus {corpus!r}: "
            f"{result['inserted']} inserted, {result['updated']} updated, {result['unchanged']} unchanged")
    if result.get("pruned") is not None:
        head += f", {result['pruned']} pruned"
    if result.get("truncated"):
        head += f" ({result['truncated']} truncated to the model's {result['window']}-token window)"
    head += f", embedded with {result['embedding']} ({result['seconds']:.1f} s)"
    skipped = result["skipped"]
    if not skipped:
        return head
    reasons = Counter(s["reason"] for s in skipped)
    lines = [head, f"skipped {len(skipped)} file(s): "
             + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())]
    lines += [f"  {s['path']}: {s['reason']}" for s in skipped]
    return "\n".join(lines)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus to write into.")
@click.option("--tier", type=click.Choice([t.name for t in MemoryTier]), default="SEMANTIC", show_default=True,
              help="Tier for entries that do not set one.")
@click.option("--source", default=None, help="Source for every entry (default: the file's path).")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help="Metadata for every entry (repeatable).")
@click.option("--sample", is_flag=True, help="Ingest the sample corpus that ships with tnsrag_db.")
@click.option("--id-prefix", default="", metavar="PREFIX",
              help="Put PREFIX/ in front of every file id and path, to keep several roots apart in one corpus.")
@click.option("--chunk-tokens", type=click.IntRange(min=16), default=None, metavar="N",
              help="Chunk size: tokens of the embedding model (default: its window), or characters with the "
                   "hash fallback (default 1000).")
@click.option("--prune", is_flag=True,
              help="Afterwards delete entries of deleted files and chunks that no longer exist under the roots.")
@click.option("--strict", is_flag=True, help="Fail (writing nothing) when any file would be skipped.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Entries per embedding call and per committed batch.")
@click.option("--embedding", default=None, metavar="NAME",
              help="Embedding provider: hash, all-MiniLM-L6-v2-int8 (the shipped model) or an installed "
                   "entry-point provider. Default: the shipped model when installed, else hash.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def ingest(paths: tuple[Path, ...], url: str | None, schema: str, corpus: str, tier: str, source: str | None,
           meta: tuple[str, ...], sample: bool, id_prefix: str, chunk_tokens: int | None, prune: bool,
           strict: bool, batch_size: int, embedding: str | None, quiet: bool, as_json: bool) -> None:
    """Ingest a document tree (or files, or globs) into a corpus.

    Reads Markdown and HTML (one entry per heading section, each the child of its
    enclosing section; HTML with its title), text and reST, PDF (per page), source code
    (by suffix, with a "language") and JSONL (one entry per line: a tnsrag export is
    restored exactly, with its vectors when exported with --vectors, then nothing is
    embedded); .gz files by the name inside. Text encodings are detected. Binary, empty and unknown files are skipped and
    listed with the reason (--strict makes any skip an error).

    Ids are paths relative to each PATH given plus "#n" (docs/ gives
    "guide/install.md#3"), the same from any directory; --id-prefix namespaces a root.
    Entries are embedded with --embedding (default: the shipped model of the embed
    extra, else the offline 128-dimensional hash fallback, with a notice); texts beyond
    the model's window are truncated and counted. Chunks fit the embedding model's
    window (--chunk-tokens). Batches commit one at a
    time while the next one embeds; re-running is idempotent (unchanged entries are
    reported, not rewritten), so an interrupted ingest (Ctrl-C: exit 130) continues
    where it stopped. Progress goes to stderr on a terminal.

    Example: tnsrag ingest docs/ --id-prefix docs --prune --meta tenant=acme
    """
    from tnsrag_db.chunking import chunker_for
    from tnsrag_db.cli._progress import PhaseProgress
    from tnsrag_db.embeddings import provider_name
    from tnsrag_db.loaders import FileLoader
    from tnsrag_db.store.store import IngestCounts, validate_batch

    targets = list(paths) + ([sample_corpus_path()] if sample else [])
    if not targets:
        raise click.UsageError("give at least one PATH, or --sample")
    extra = parse_pairs(meta, "--meta")
    started = time.perf_counter()
    provider = choose_embedding(embedding)
    truncated_before = getattr(provider, "truncated_texts", 0)
    try:
        chunker = chunker_for(provider, chunk_tokens)
        loader = FileLoader(*targets, tier=tier, chunker=chunker, relative_to="pattern", id_prefix=id_prefix)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    progress = PhaseProgress(sys.stderr, {"read": "files", "embed": "entries", "write": "entries",
                                          "index": "blocks"}, enabled=False if quiet else None)
    committed = IngestCounts()
    try:
        with progress:
            progress.start("read")
            try:
                loaded = list(loader.load(progress=lambda done, total: progress.update("read", done, total)))
            except ConfigurationError as exc:
                raise click.UsageError(str(exc)) from None
            read_seconds = time.perf_counter() - started
            skipped = [{"path": s.path, "reason": s.reason} for s in loader.skipped]
            if strict and skipped:
                listed = "; ".join(f"{s['path']} ({s['reason']})" for s in skipped[:5])
                more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
                raise InvalidEntryError(f"--strict: {len(skipped)} file(s) would be skipped: {listed}{more}; "
                                        "nothing was written")
            entries = [dataclasses.replace(e, source=source or e.source, metadata={**e.metadata, **extra})
                       for e in loaded]
            _check_unique(entries)
            validate_batch(entries)
            from tnsrag_db.admin.restore import restore_providers

            # JSONL exports with vectors (tnsrag export --vectors) are written with them,
            # one pass per exported space, embedding nothing else unless --embedding asks.
            providers = restore_providers(entries, loader.vectors, None if embedding is None and loader.vectors
                                          else provider)
            counts, pruned = _write(entries, loader, targets, url, schema, corpus, batch_size, prune,
                                    providers, progress, id_prefix)
            committed = counts
    except IngestInterrupted as exc:
        if exc.__cause__ is None:
            click.echo(str(exc), err=True)
            sys.exit(EXIT_INTERRUPTED)
        raise
    except KeyboardInterrupt:
        click.echo(_INTERRUPTED.format(n=committed.total), err=True)
        sys.exit(EXIT_INTERRUPTED)
    elapsed = time.perf_counter() - started
    result = {"corpus": corpus, "files": loader.files_read, "entries": len(entries), "edges": len(loader.edges),
              "inserted": counts.inserted,
              "updated": counts.updated, "unchanged": counts.unchanged, "pruned": pruned, "skipped": skipped,
              "chunk": {"size": chunker.max_tokens, "unit": chunker.unit}, "read_seconds": round(read_seconds, 3),
              "embedding": ", ".join(provider_name(p) for p in providers),
              "truncated": getattr(provider, "truncated_texts", 0) - truncated_before,
              "window": getattr(provider, "max_tokens", None), "seconds": round(elapsed, 3)}
    emit(result, as_json, _summary(corpus, result))


def _write(entries: list[MemoryEntry], loader: Any, targets: list[Path], url: str | None, schema: str,
           corpus: str, batch_size: int, prune: bool, embeddings: list[Any], progress: Any,
           id_prefix: str) -> tuple[Any, int | None]:
    """Connect, ingest ``entries`` batch by batch (a pass per provider of ``embeddings``: the
    first writes the entries, the others add their spaces' vectors), then prune; returns
    the first pass's counts and the pruned number."""
    from tnsrag_db.indexes.spaces import bind_embedding
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.store.store import IngestCounts, connect

    if not entries and not prune:
        return IngestCounts(), None
    with connect(url, corpus=corpus, schema=schema, auto_migrate=None if url is None else False) as store:
        if loader.edges:
            _check_edge_ends(store, loader.edges, {e.id for e in entries})
        # Bound to the corpus's spaces: a provider whose dimension differs from its own
        # stored space is refused before anything is written.
        views = [VectorMemoryStore(store, bind_embedding(store, embedding)) for embedding in embeddings]

        def advance(phase: str, done: int, total: int | None) -> None:
            if phase != "read":  # the read line counts files, done by now
                progress.update(phase, done, total)

        def index_advance(phase: str, done: int, total: int) -> None:
            progress.update("index", done, total, note=phase)

        counts: Any = None
        for vectors in views:
            progress.start("embed")
            written = vectors.ingest(entries, batch_size=batch_size, progress=advance, index_progress=index_advance)
            counts = written if counts is None else counts
        if loader.edges:
            from tnsrag_db.indexes.graph import GraphStore

            # The edges of JSONL records (tnsrag export files), once every entry is
            # committed: an edge to an entry neither in the files nor in the corpus is an
            # error naming it, and no edge is written.
            GraphStore(store).add_edges(loader.edges)
        if not prune:
            return counts, None
        roots = [("dir" if path.is_dir() else "file", path) for path in targets]
        stale = _stale_ids(store, roots, loader.id_prefix, {e.id for e in entries})
        return counts, store.delete_many(stale)
