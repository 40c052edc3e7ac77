"""The integrations' shared core: argument errors name the argument; embedding calls queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from tnsrag_db._errors import InvalidFilterError
from tnsrag_db._types import RetrievedDocument
from tnsrag_db.integrations._core import (
    NO_SCORE_FLOOR,
    ArgumentError,
    SerialEmbedding,
    check_text_query,
    document_record,
    search_context,
)


@pytest.mark.parametrize("args, name, message", [
    ((0, None, 0.0), "top_k", "max_results must be >= 1"),
    (("5", None, 0.0), "top_k", "max_results must be an int"),
    ((101, None, 0.0), "top_k", "at most 100"),
    ((5, {"tier": ""}, 0.0), "filters", "non-blank string"),
    ((5, ["tier"], 0.0), "filters", "mapping of str to str"),
    ((5, None, float("nan")), "min_score", "finite"),
])
def test_search_arguments_name_the_argument(args: tuple[object, object, object], name: str, message: str) -> None:
    with pytest.raises(ArgumentError, match=f"invalid argument '{name}': .*{message}") as caught:
        search_context(*args, max_top_k=100)  # type: ignore[arg-type]
    assert caught.value.argument == name


def test_search_context_and_query() -> None:
    context = search_context(3, {"tier": "SEMANTIC"}, 0.5)
    assert (context.max_results, dict(context.metadata_filters), context.min_score) == (3, {"tier": "SEMANTIC"}, 0.5)
    with pytest.raises(ArgumentError, match="'filters'") as caught:
        search_context(3, {"": "x"}, 0.0)
    assert isinstance(caught.value.__cause__, InvalidFilterError)
    # None: no score floor, the lowest score of the library's strategies (a cosine of -1).
    assert search_context(3, None, None).min_score == NO_SCORE_FLOOR == -1.0
    assert check_text_query("agents") == "agents"
    for bad in ("", "  ", "a\x00b", 7):
        with pytest.raises(ArgumentError, match="'query'"):
            check_text_query(bad)


def test_document_record_promotes_the_library_keys() -> None:
    doc = RetrievedDocument("text", "a.md", 0.5, {"entryId": "e1", "tier": "WORKING", "source": "a.md",
                                                  "team": "x", "depth": "1"})
    assert document_record(doc) == {"id": "e1", "content": "text", "score": 0.5, "tier": "WORKING",
                                    "source": "a.md", "metadata": {"team": "x", "depth": "1"}}


class _Slow:
    name = "slow-provider"

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def _work(self) -> list[float]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1
        return [1.0, 0.0]

    def __call__(self, text: str) -> list[float]:
        return self._work()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._work() for _ in texts]


def test_serial_embedding_queues_calls_and_keeps_the_name() -> None:
    slow = _Slow()
    serial = SerialEmbedding(slow)
    assert serial.name == "slow-provider"
    threads = [threading.Thread(target=serial, args=("q",)) for _ in range(4)]
    threads += [threading.Thread(target=serial.embed_batch, args=(["a", "b"],)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert slow.most == 1 and slow.running == 0
