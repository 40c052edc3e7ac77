"""``tnsrag embed``: fill a new embedding space of an existing corpus."""

from __future__ import annotations

import sys
import time

import click
from tqdm import tqdm

from tnsrag_db._cli._common import db_options, emit, handle_errors, plural
from tnsrag_db._cli._group import EXIT_INTERRUPTED, STOPPING
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._errors import IngestInterrupted
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.spaces import bind_embedding, query_space
from tnsrag_db.embeddings import resolve_embedding

__all__ = ["embed"]


@click.command()
@db_options
@click.option("--corpus", required=True, help="Corpus to re-embed.")
@click.option("--embedding", required=True, metavar="NAME|DIR",
              help="Embedding provider: hash, all-MiniLM-L6-v2-int8 (the shipped model), a model folder (an "
                   "exported sentence-transformers model) or an installed entry-point provider; any of them "
                   "followed by +context1 embeds each entry with its title, path and headings.")
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1),
              help="Entries per embedding batch (and per write).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@handle_errors
def embed(url: str | None, schema: str, corpus: str, embedding: str, batch_size: int, as_json: bool) -> None:
    """Embed every entry of a corpus with another provider, into a new embedding space.

    Entries already in that provider's space keep their vectors (a re-run resumes).
    Each batch commits on its own, and the next batch embeds while the previous one's
    vectors are written (the loop of tnsrag ingest); Ctrl-C says at once that it stops, and
    does after the model call or statement in progress, rolling that batch back (exit 130;
    run the command again to embed the rest). Queries keep using the corpus's previous complete
    space until this one holds a vector for every entry, then switch to it (the newest
    complete space serves queries; see `tnsrag query --embedding`).

    Example: tnsrag embed --corpus default --embedding all-MiniLM-L6-v2-int8
    """
    provider = resolve_embedding(embedding)
    truncated_before = getattr(provider, "truncated_texts", 0)
    started = time.perf_counter()
    with open_existing(url, schema, corpus) as store:  # re-embeds an existing corpus: never creates a schema
        total = store.count()
        if total == 0:
            raise click.UsageError(f"corpus {corpus!r} has no entries; ingest some first (tnsrag ingest)")
        vectors = VectorMemoryStore(store, bind_embedding(store, provider))
        before = vectors.count()
        with tqdm(total=total, unit="entry", desc=f"embed {vectors.embedding.name}", disable=as_json or None) as bar:
            def advance(phase: str, done: int, of: int | None) -> None:
                if phase == "write":  # entries whose vectors are committed (or already there)
                    bar.update(done - bar.n)

            try:
                # The stored entries are unchanged, so only the vectors they lack are embedded
                # and written; each batch embeds on a worker while the previous one is written.
                vectors.fill_vectors(store.iter_entries(batch_size=batch_size), batch_size=batch_size,
                                     progress=advance, on_stop=lambda: tqdm.write(STOPPING, file=sys.stderr))
            except IngestInterrupted as exc:
                if exc.__cause__ is not None:
                    raise
                done = vectors.count()
                click.echo(f"interrupted: {plural(done - before, 'entry')} embedded into {vectors.embedding.name} "
                           f"({done} of {total} have a vector), the batch in progress was rolled back; run the "
                           "same command again to embed the rest", err=True)
                sys.exit(EXIT_INTERRUPTED)
        after = vectors.count()
        serving = query_space(store)
    elapsed = time.perf_counter() - started
    truncated = getattr(provider, "truncated_texts", 0) - truncated_before
    emit({"corpus": corpus, "embedding": vectors.embedding.name, "dimension": vectors.embedding.dimension,
          "entries": total, "embedded": after - before, "vectors": after, "truncated": truncated,
          "serving": serving.provider if serving else None, "seconds": round(elapsed, 3)}, as_json,
         f"corpus {corpus!r}: {after - before} of {plural(total, 'entry')} embedded with {vectors.embedding.name} "
         f"({vectors.embedding.dimension}-d, {plural(after, 'vector')} in its space"
         + (f", {truncated} truncated to the model's window" if truncated else "")
         + f"); queries use {serving.provider if serving else 'no space'} ({elapsed:.1f} s)")
