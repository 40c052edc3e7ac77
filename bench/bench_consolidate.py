"""Consolidation: how long finding and merging duplicates takes, how many planted duplicates
it finds, and what the alias lookup costs ``get``.

Usage::

    python -m bench.bench_consolidate [--url URL] [--n 20000] [--dim 384] [--share 0.05] [--rounds 3]
                                      [--exact] [--part all|synthetic|gets|debian|docs] [--gets 500]

**Synthetic.** ``n`` generated entries (:func:`bench._corpus.generate_corpus`, 90 % WORKING,
10 % EPISODIC) plus planted duplicates of ``share`` of them each: copies with the same text
and vector (ids ``same-...``) and near copies (one word changed, the vector moved to a
cosine of about 0.97 with the original; ids ``near-...``), written with their vectors, the
HNSW index built, ``VACUUM (ANALYZE)``. Then, median of ``rounds`` dry runs each:
``consolidate("WORKING")`` (the same text only) and ``consolidate("WORKING",
threshold=0.95)`` through the HNSW index, with the share of planted WORKING pairs found;
with ``--exact`` once more without the index (the exact scan per entry: every pair, the
reference the HNSW pairs are compared with). Then the merge itself (not a dry run), timed.

**get.** Median microseconds of ``Store.get``'s plan (through ``Store.session.run``) for
an id that is an entry, one that is an alias, and one that is neither, against the plan
``get`` ran before aliases (an entry by id only), alternating, ``gets`` ids each,
``rounds`` rounds: after the synthetic merge, or alone (``--part gets``: ``n`` entries, a
tenth written twice and merged, no vectors).

**Real.** ``debian``: the installed packages' long descriptions (every package of
``/var/lib/dpkg/status`` with one, duplicates included; the tier WORKING) embedded with
the shipped model, then dry runs with the same text only and thresholds 0.95 and 0.90:
the counts, the time, and a few groups to judge by eye. ``docs``: the
``/usr/share/doc/*/copyright`` files under 6 kB, chunked by ``FileLoader`` (the ingest
path) and embedded with the shipped model; the same dry runs, then a merge at 0.95.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import scratch_database
from bench._corpus import generate_corpus
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.reads import ENTRY_FIELDS, get_plan, row_to_entry
from tnsrag_db._store.store import Store, connect
from tnsrag_db._types import MemoryEntry, MemoryTier

PROVIDER = "bench-consolidate"
#: ``get`` as it was before aliases: an entry by its id only.
OLD_GET = (f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries e WHERE corpus = :c AND id = :id "
           "AND (e.expires_at IS NULL OR e.expires_at > statement_timestamp())")


class Rows:
    """Precomputed vectors by text (the bench writes with ``embeddings=``; queries are not embedded)."""

    def __call__(self, text: str) -> list[float]:  # pragma: no cover - never called
        raise NotImplementedError


def planted(n: int, dim: int, share: float, seed: int = 42) -> tuple[list[MemoryEntry], np.ndarray, set[tuple[str, str]]]:
    corpus = generate_corpus(n, dim=dim, seed=seed)
    rng = np.random.default_rng(seed + 7)
    entries = [replace(e, tier=MemoryTier.EPISODIC if i % 10 == 9 else MemoryTier.WORKING)
               for i, e in enumerate(corpus.entries)]
    vectors = [corpus.embeddings]
    pairs: set[tuple[str, str]] = set()
    picks = rng.choice(n, size=2 * int(n * share), replace=False)
    same, near = picks[: len(picks) // 2], picks[len(picks) // 2:]
    extra: list[MemoryEntry] = []
    rows: list[np.ndarray] = []
    for i in same:
        e = entries[i]
        extra.append(replace(e, id=f"same-{i:07d}"))
        rows.append(corpus.embeddings[i])
        pairs.add(tuple(sorted((e.id, f"same-{i:07d}"))))  # type: ignore[arg-type]
    for i in near:
        e = entries[i]
        words = e.content.split()
        words[len(words) // 2] = "changed"
        extra.append(replace(e, id=f"near-{i:07d}", content=" ".join(words)))
        v = corpus.embeddings[i]
        noise = rng.standard_normal(dim).astype(np.float32)
        noise -= noise.dot(v) * v
        noise /= np.linalg.norm(noise)
        moved = 0.97 * v + np.sqrt(1 - 0.97 ** 2) * noise  # cosine 0.97 with v
        rows.append((moved / np.linalg.norm(moved)).astype(np.float32))
        pairs.add(tuple(sorted((e.id, f"near-{i:07d}"))))  # type: ignore[arg-type]
    vectors.append(np.vstack(rows))
    working = {e.id for e in entries if e.tier is MemoryTier.WORKING}
    return entries + extra, np.vstack(vectors), {p for p in pairs if p[0] in working or p[1] in working}


def found_pairs(report: Any) -> set[tuple[str, str]]:
    out = set()
    for g in report.groups:
        ids = sorted((g.survivor, *g.others))
        out.update((a, b) for k, a in enumerate(ids) for b in ids[k + 1:])
    return out


def median_run(store: Store, rounds: int, **options: Any) -> tuple[float, Any]:
    times, report = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        report = store.consolidate("WORKING", dry_run=True, **options)
        times.append(time.perf_counter() - t)
    return statistics.median(times), report


def vacuum(store: Store) -> None:
    with store.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE) entries, embeddings, bm25_postings, edges, entry_aliases")


def synthetic(url: str, args: argparse.Namespace) -> None:
    entries, emb, planted_pairs = planted(args.n, args.dim, args.share)
    store = connect(url, corpus="consolidate_synthetic", auto_migrate=True)
    vectors = VectorMemoryStore(store, Rows(), name=PROVIDER, index_threshold=None)
    t = time.perf_counter()
    vectors.add_all(entries, embeddings=emb)
    vectors.build_index()
    vacuum(store)
    working = sum(e.tier is MemoryTier.WORKING for e in entries)
    print(f"synthetic: {len(entries)} entries ({working} WORKING), dim {args.dim}, {len(planted_pairs)} planted "
          f"WORKING pairs; written and indexed in {time.perf_counter() - t:.0f} s", flush=True)
    t_same, same = median_run(store, args.rounds)
    print(f"  same text only:          {t_same:6.2f} s  pairs {same.pairs:5}  groups {len(same.groups)}", flush=True)
    t_hnsw, hnsw = median_run(store, args.rounds, threshold=0.95)
    hits = found_pairs(hnsw)
    print(f"  threshold 0.95 (HNSW):   {t_hnsw:6.2f} s  pairs {hnsw.pairs:5}  groups {len(hnsw.groups)}  "
          f"planted found {len(planted_pairs & hits)}/{len(planted_pairs)}", flush=True)
    if args.exact:
        vectors.drop_index()
        t_exact, exact = median_run(store, 1, threshold=0.95)
        ref = found_pairs(exact)
        print(f"  threshold 0.95 (exact):  {t_exact:6.2f} s  pairs {exact.pairs:5}  groups {len(exact.groups)}  "
              f"planted found {len(planted_pairs & ref)}/{len(planted_pairs)}; HNSW found "
              f"{len(hits & ref)}/{len(ref)} of the exact pairs", flush=True)
        vectors.build_index()
    t = time.perf_counter()
    report = store.consolidate("WORKING", threshold=0.95)
    print(f"  merge (threshold 0.95):  {time.perf_counter() - t:6.2f} s  merged {report.merged} entries "
          f"in {len(report.groups)} groups, skipped {report.skipped}", flush=True)
    vacuum(store)
    gets(store, [g.survivor for g in report.groups], [o for g in report.groups for o in g.others], args)
    store.drop_corpus()
    store.close()


def old_get_plan(corpus: str, entry_id: str) -> Plan[MemoryEntry | None]:
    """``get`` as it was before aliases."""
    rows = yield Statement(OLD_GET, {"c": corpus, "id": entry_id}, ENTRY_FIELDS)
    return row_to_entry(rows[0]) if rows else None


def gets(store: Store, entry_ids: list[str], aliases: list[str], args: argparse.Namespace) -> None:
    m = min(args.gets, len(entry_ids), len(aliases))
    cases = {"entry": entry_ids[:m], "alias": aliases[:m], "missing": [f"missing-{i}" for i in range(m)]}
    session = store.session
    for ids in cases.values():  # warm
        for i in ids[:50]:
            session.run(get_plan(store.corpus, i))
            session.run(old_get_plan(store.corpus, i))
    print(f"  get, median us over {m} ids x {args.rounds} rounds: this version / an entry by id only / ratio")
    for name, ids in cases.items():
        new: list[float] = []
        old: list[float] = []
        for r in range(args.rounds):
            for k, i in enumerate(ids):
                order = [(new, get_plan), (old, old_get_plan)]
                if (k + r) % 2:
                    order.reverse()
                for sink, plan in order:
                    t = time.perf_counter()
                    session.run(plan(store.corpus, i))
                    sink.append(time.perf_counter() - t)
        a, b = statistics.median(new) * 1e6, statistics.median(old) * 1e6
        print(f"    {name:8} {a:7.0f} / {b:7.0f} / {a / b:.3f}", flush=True)


def gets_only(url: str, args: argparse.Namespace) -> None:
    """The get comparison alone: ``n`` entries, a tenth of them written twice and merged."""
    store = connect(url, corpus="consolidate_gets", auto_migrate=True)
    corpus = generate_corpus(args.n, dim=8, seed=42)
    entries = [replace(e, tier=MemoryTier.WORKING) for e in corpus.entries]
    store.add_all(entries + [replace(e, id=f"copy-{e.id}") for e in entries[:: 10]])
    report = store.consolidate("WORKING")
    vacuum(store)
    print(f"gets: {len(entries)} entries, {report.merged} merged into aliases", flush=True)
    gets(store, [e.id for e in entries[1::10]], [o for g in report.groups for o in g.others], args)
    store.drop_corpus()
    store.close()


def debian_descriptions() -> list[MemoryEntry]:
    """Every installed package's long description (duplicates included: they are what a
    consolidation finds), by package name."""
    from bench.by_name import dpkg_descriptions

    return sorted((MemoryEntry(name, body, MemoryTier.WORKING) for name, _, body in dpkg_descriptions() if body),
                  key=lambda e: e.id)


def real(url: str, args: argparse.Namespace) -> None:
    from bench.cranfield import shipped_model

    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"the real corpus needs the shipped model: {why}")
    entries = debian_descriptions()
    store = connect(url, corpus="consolidate_debian", auto_migrate=True)
    vectors = VectorMemoryStore(store, model)
    t = time.perf_counter()
    vectors.add_all(entries)
    vacuum(store)
    print(f"\ndebian: {len(entries)} package descriptions embedded and written in {time.perf_counter() - t:.0f} s "
          "(exact scans: below the index threshold)", flush=True)
    for threshold in (None, 0.95, 0.90):
        took, report = median_run(store, args.rounds, threshold=threshold)
        sizes = sorted((1 + len(g.others) for g in report.groups), reverse=True)
        print(f"  threshold {threshold or 'same text'!s:9}: {took:5.2f} s  pairs {report.pairs:4}  groups "
              f"{len(report.groups):3}  entries in groups {sum(sizes):4}  largest {sizes[:5]}", flush=True)
        for g in report.groups[:: max(1, len(report.groups) // 4)][:4]:
            print(f"    {g.survivor} <- {', '.join(g.others[:4])}{' ...' if len(g.others) > 4 else ''} "
                  f"({g.similarity:.3f})")
    store.drop_corpus()
    store.close()


def docs(url: str, args: argparse.Namespace) -> None:
    """``/usr/share/doc/*/copyright`` files under 6 kB, loaded by :class:`FileLoader` (the
    ingest path's chunks) and embedded with the shipped model: licence texts repeat."""
    from bench.cranfield import shipped_model
    from tnsrag_db import FileLoader

    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"the real corpus needs the shipped model: {why}")
    paths = sorted(str(p) for p in Path("/usr/share/doc").glob("*/copyright") if p.stat().st_size < 6144)
    entries = list(FileLoader(*paths, base_dir="/usr/share/doc", tier=MemoryTier.WORKING).load())
    store = connect(url, corpus="consolidate_docs", auto_migrate=True)
    vectors = VectorMemoryStore(store, model)
    t = time.perf_counter()
    vectors.add_all(entries)
    vacuum(store)
    print(f"\ndocs: {len(paths)} copyright files, {len(entries)} chunks embedded and written in "
          f"{time.perf_counter() - t:.0f} s (exact scans: below the index threshold)", flush=True)
    for threshold in (None, 0.95, 0.90):
        took, report = median_run(store, args.rounds, threshold=threshold)
        sizes = sorted((1 + len(g.others) for g in report.groups), reverse=True)
        print(f"  threshold {threshold or 'same text'!s:9}: {took:5.2f} s  pairs {report.pairs:4}  groups "
              f"{len(report.groups):3}  entries in groups {sum(sizes):4}  largest {sizes[:5]}", flush=True)
    t = time.perf_counter()
    report = store.consolidate("WORKING", threshold=0.95, vectors=vectors)
    print(f"  merge at 0.95: {time.perf_counter() - t:.2f} s, {report.merged} chunks merged into "
          f"{len(report.groups)} survivors; {store.count()} entries left", flush=True)
    for g in report.groups[:3]:
        print(f"    {g.survivor} <- {', '.join(g.others[:3])}{' ...' if len(g.others) > 3 else ''} "
              f"({g.similarity:.3f}): {store.get(g.others[0]).content[:70]!r}")  # type: ignore[union-attr]
    store.drop_corpus()
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gets", type=int, default=500)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--part", choices=("all", "synthetic", "gets", "debian", "docs"), default="all")
    args = parser.parse_args()
    with scratch_database(args.url, "bench_consolidate") as (url, _):
        address = url.render_as_string(hide_password=False)
        if args.part in ("all", "synthetic"):
            synthetic(address, args)
        if args.part == "gets":
            gets_only(address, args)
        if args.part in ("all", "debian"):
            real(address, args)
        if args.part in ("all", "docs"):
            docs(address, args)


if __name__ == "__main__":
    main()
