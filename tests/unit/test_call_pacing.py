"""Embedding calls of a local model sized by time (:mod:`tnsrag_db._indexes.vector.pacing`):
the sizes follow the recorded rate, shortest texts first; no clock, the seconds are given."""

from __future__ import annotations

from tnsrag_db._indexes.vector.pacing import CALL_SECONDS, CallPacer, is_local
from tnsrag_db.embeddings import HashingEmbedding


def test_calls_take_the_shortest_texts_first_and_follow_the_rate() -> None:
    texts = ["x" * n for n in (300, 20, 100, 68, 200, 20, 68, 20, 500, 68)]
    pacer = CallPacer()
    assert [pacer.size(t) for t in texts[:2]] == [332, 52]  # the characters and 32 for every text
    calls = pacer.calls(texts, most=8)
    first = next(calls)
    assert [len(texts[i]) for i in first] == [20, 20, 20, 68]  # four texts before any rate is known
    pacer.record(52 * 3 + 100, 0.256)  # 1,000 a second: a call of half a second holds 500
    assert CALL_SECONDS == 0.5
    second = next(calls)
    assert [len(texts[i]) for i in second] == [68, 68, 100]  # 100 + 100 + 132 = 332; with 232 more, 564
    pacer.record(332, 0.332 / 3)  # three times faster: the rate is averaged to 2,000 (a call holds 1,000)
    third = next(calls)
    assert [len(texts[i]) for i in third] == [200, 300]  # 232 + 332 = 564; with 532 more, 1,096
    pacer.record(564, 5.0)  # one slow call (a loaded machine) sets the rate at once: 113 a second
    fourth = next(calls)
    assert [len(texts[i]) for i in fourth] == [500]  # never fewer than one text
    assert next(calls, None) is None
    assert sorted(i for call in (first, second, third, fourth) for i in call) == list(range(len(texts)))


def test_a_call_holds_at_most_the_batch_and_a_truncated_text_costs_its_window() -> None:
    pacer = CallPacer(window_tokens=10)
    assert pacer.size("y" * 1000) == 80 + 32  # 8 characters a token at most
    pacer.record(10_000, 0.01)  # a fast machine: a million a second
    calls = list(pacer.calls(["z"] * 20, most=6))
    assert [len(c) for c in calls] == [6, 6, 6, 2]


def test_only_a_provider_declaring_local_compute_is_paced() -> None:
    class Remote:
        name = "remote"
        local_compute = "yes"  # not True: not declared

        def __call__(self, text: str) -> list[float]:
            return [1.0]

    assert is_local(HashingEmbedding()) and not is_local(Remote()) and not is_local(lambda t: [1.0])
