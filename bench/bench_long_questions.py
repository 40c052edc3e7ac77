"""Long questions against their two rarest words: keyword latency on a real, merged corpus.

A user asks "which release introduced git switch and git restore"; the words that decide
the answer are the rare ones ("switch", "restore"). This bench takes ``--pairs`` pairs of
rare words (document frequency ``--min-df``..``--max-df``, each word from an entry's own
text), asks each pair alone ("short") and inside a question of frequent words ("long",
``--frame``), interleaved, best of ``--repeats``, in one process, and prints the medians,
p90 and worst of both and the long / short ratios (the target is a long question within
3x its rare words).

Usage::

    python -m bench.bench_long_questions --corpus gitdocs [--url URL] [--pairs 60] [--explain]

The corpus must exist (for the figures in docs/performance.md: ``tnsrag ingest
/usr/share/doc/git --corpus gitdocs --embedding hash`` then ``tnsrag db merge-postings
--corpus gitdocs``). ``--explain`` prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the slowest
long question.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from collections.abc import Sequence

from tnsrag_db._db.statement import Statement, one
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import RAGContext

#: The frequent words a long question wraps its rare words in ({a} and {b}).
DEFAULT_FRAME = "which release of git introduced {a} and {b} and what option changed"


def rare_pairs(store: object, index: BM25Index, n: int, lo: int, hi: int, seed: int) -> list[tuple[str, str]]:
    """``n`` pairs of words of one entry each, both with a document frequency in ``[lo, hi]``."""
    rows = store.run(one(Statement(  # type: ignore[attr-defined]
        "SELECT content FROM entries WHERE corpus = :c ORDER BY id", {"c": store.corpus})))  # type: ignore[attr-defined]
    rng = random.Random(seed)
    df_of: dict[str, int] = {}

    def df(word: str) -> int:
        if word not in df_of:
            terms = index.query_terms(word)
            got = store.run(one(Statement(  # type: ignore[attr-defined]
                "SELECT coalesce(sum(df), 0) FROM bm25_df WHERE corpus = :c AND lexeme = ANY(:t)",
                {"c": store.corpus, "t": terms}))) if len(terms) == 1 else [[0]]  # type: ignore[attr-defined]
            df_of[word] = int(got[0][0])
        return df_of[word]

    pairs: list[tuple[str, str]] = []
    order = list(range(len(rows)))
    rng.shuffle(order)
    for i in order:
        words = sorted({w for w in re.findall(r"[a-z]{5,12}", rows[i][0].lower())})
        rare = [w for w in rng.sample(words, min(len(words), 40)) if lo <= df(w) <= hi]
        if len(rare) >= 2:
            pairs.append((rare[0], rare[1]))
        if len(pairs) == n:
            break
    return pairs


def _time(strategy: KeywordRAGStrategy, text: str, ctx: RAGContext, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        strategy.retrieve(text, ctx)
        best = min(best, time.perf_counter() - start)
    return best * 1000


def _summary(ms: Sequence[float]) -> str:
    ordered = sorted(ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(ordered):7.1f} ms  p90 {p90:7.1f} ms  max {ordered[-1]:7.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="database URL (default: the embedded server)")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--min-df", type=int, default=2)
    parser.add_argument("--max-df", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--frame", default=DEFAULT_FRAME)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args(argv)

    store = connect(args.url, corpus=args.corpus)
    try:
        index = BM25Index(store)
        strategy = KeywordRAGStrategy(index)
        ctx = RAGContext(max_results=args.top_k)
        pairs = rare_pairs(store, index, args.pairs, args.min_df, args.max_df, args.seed)
        strategy.retrieve(args.frame.format(a=pairs[0][0], b=pairs[0][1]), ctx)  # warm the caches
        short: list[float] = []
        long: list[float] = []
        for a, b in pairs:
            short.append(_time(strategy, f"{a} {b}", ctx, args.repeats))
            long.append(_time(strategy, args.frame.format(a=a, b=b), ctx, args.repeats))
        ratios = [lo / sh for lo, sh in zip(long, short)]
        print(f"corpus {args.corpus!r}: {len(pairs)} pairs of words with df {args.min_df}-{args.max_df}, "
              f"top {args.top_k}, best of {args.repeats}")
        print(f"  short: {_summary(short)}")
        print(f"  long:  {_summary(long)}")
        print(f"  long / short: median of ratios {statistics.median(ratios):.1f}x, "
              f"ratio of medians {statistics.median(long) / statistics.median(short):.1f}x, "
              f"worst {max(ratios):.1f}x ({pairs[ratios.index(max(ratios))]})")
        if args.explain:
            a, b = pairs[long.index(max(long))]
            text = args.frame.format(a=a, b=b)
            statement = index.ranking_statement(text, args.top_k)
            rows = store.run(one(Statement("EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.params)))
            print(f"\nEXPLAIN (ANALYZE, BUFFERS) of {text!r}:")
            print("\n".join(r[0] for r in rows))
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
