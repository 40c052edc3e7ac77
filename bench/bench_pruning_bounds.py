"""How much of a long question's frequent-term postings exact top-k pruning could skip.

For the long questions of :mod:`bench.bench_long_questions` on a merged corpus, in Python
over the corpus's own posting blocks: the exact BM25 scores of every entry, the 10th best
score (the best threshold any pruning can have), and two upper bounds on what an entry
outside the rare words' candidates can score from the frequent ("non-essential") terms:

* *block-max*: per block of 128 document numbers, the term's contribution at the block's
  largest tf and smallest document length; an entry's bound is the sum, over the frequent
  terms, of the bound of the block whose number range covers it. Prints the share of the
  frequent terms' postings whose entry's bound still exceeds the threshold (those must be
  scored);
* *impact order* (a threshold algorithm over postings sorted by contribution): the share
  of each frequent term's postings read, in equal steps, before the sum of the next
  contributions is at most the threshold.

Both use the final 10th score as the threshold, so they are the most either could prune.

Usage::

    python -m bench.bench_pruning_bounds --corpus gitdocs [--url URL] [--pairs 30]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence

from bench.bench_long_questions import DEFAULT_FRAME, rare_pairs
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import connect

K1, B = 1.2, 0.75


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args(argv)
    store = connect(args.url, corpus=args.corpus)
    try:
        index = BM25Index(store)
        stats = store.run(one(Statement("SELECT sum(n_docs), sum(total_len) FROM bm25_stats WHERE corpus = :c",
                                        {"c": store.corpus})))[0]
        n, avgdl = float(stats[0]), float(stats[1]) / float(stats[0])
        kbl = K1 * B / avgdl
        block_share: list[float] = []
        impact_share: list[float] = []
        for a, b in rare_pairs(store, index, args.pairs, 2, 20, 7):
            terms = index.query_terms(DEFAULT_FRAME.format(a=a, b=b))
            df = {r[0]: int(r[1]) for r in store.run(one(Statement(
                "SELECT lexeme, sum(df) FROM bm25_df WHERE corpus = :c AND lexeme = ANY(:t) GROUP BY lexeme",
                {"c": store.corpus, "t": terms})))}
            blocks = store.run(one(Statement(
                "SELECT lexeme, first_docno, last_docno, docnos, tfs, dls FROM bm25_blocks "
                "WHERE corpus = :c AND lexeme = ANY(:t)", {"c": store.corpus, "t": terms})))
            wt = {t: math.log(1 + (n - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) * (K1 + 1) for t in terms}
            score: dict[int, float] = {}
            impacts: dict[str, list[tuple[int, float]]] = {}
            for lexeme, _, _, docnos, tfs, dls in blocks:
                for d, tf, dl in zip(docnos, tfs, dls):
                    part = wt[lexeme] * tf / (tf + K1 * (1 - B) + kbl * dl)
                    score[d] = score.get(d, 0.0) + part
                    impacts.setdefault(lexeme, []).append((d, part))
            rare = sorted(terms, key=lambda t: df.get(t, 0))[:2]
            frequent = [t for t in terms if t not in rare and t in impacts]
            candidates = {d for t in rare for d, _ in impacts.get(t, [])}
            ranked = sorted(score.values(), reverse=True)
            threshold = ranked[args.top_k - 1] if len(ranked) >= args.top_k else 0.0
            covers = {t: [(lo, hi, wt[t] * max(tfs) / (max(tfs) + K1 * (1 - B) + kbl * min(dls)))
                          for lexeme, lo, hi, _, tfs, dls in blocks if lexeme == t] for t in frequent}
            total = kept = 0
            for t in frequent:
                for d, _ in impacts[t]:
                    total += 1
                    bound = sum(next((ub for lo, hi, ub in covers[u] if lo <= d <= hi), 0.0) for u in frequent)
                    kept += d not in candidates and bound > threshold
            block_share.append(kept / total)
            lists = [sorted((p for _, p in impacts[t]), reverse=True) for t in frequent]
            step = next((f / 100 for f in range(1, 101)
                         if sum(v[min(len(v) - 1, f * len(v) // 100)] for v in lists) <= threshold), 1.0)
            impact_share.append(step)
            print(f"{a:>14} {b:<14} 10th score {threshold:5.2f}  block-max keeps {kept / total:6.1%}  "
                  f"impact order reads {step:4.0%} of {total} postings")
        print(f"median: block-max keeps {statistics.median(block_share):.1%} of the frequent terms' postings; "
              f"impact order reads {statistics.median(impact_share):.0%}")
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
