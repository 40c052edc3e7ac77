"""The client side of the keeper's warm model: a keeper answers within about a second or is
passed by (for the rest of the process, with one note), and one still loading the model
answers so at once and is waited for. Real Unix sockets and the real shipped model; no
server needed (tests/db/test_server.py stops a real keeper process with SIGSTOP)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tnsrag_db._store.embedded import warm_model
from tnsrag_db._store.embedded.warm_model import KeeperLink, served_model, start_service

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="the warm model is served on a Unix socket")


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "pg18.keeper.sock"


@pytest.fixture
def stuck(socket_path: Path) -> Iterator[socket.socket]:
    """A socket that accepts connections (the kernel queues them) but never answers: a keeper
    that is stopped or hung."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path))
    listener.listen(16)
    yield listener
    listener.close()


def test_a_keeper_that_does_not_answer_is_passed_by_with_one_note(stuck: socket.socket, socket_path: Path) -> None:
    notes: list[str] = []
    link = KeeperLink(socket_path, notes.append, lambda: " (pid 4242)")
    assert served_model(link) is None
    assert notes == [f"the warm-model keeper (pid 4242) on {socket_path} was passed by (it did not answer "
                     "within 1 s): loading the embedding model in this process"]
    assert link.passed_by == "it did not answer within 1 s"
    assert served_model(link) is None and link.ask(["again"]) is None  # not asked again, not said again
    assert len(notes) == 1


def test_no_keeper_is_passed_by_without_a_word(socket_path: Path) -> None:
    notes: list[str] = []
    assert served_model(KeeperLink(socket_path, notes.append)) is None  # no socket file
    socket_path.touch()  # a socket file nobody listens on (a keeper that died)
    link = KeeperLink(socket_path, notes.append)
    assert link.ask([]) is None and link.passed_by is not None
    assert notes == []


def test_a_loading_keeper_answers_at_once_and_is_waited_for(socket_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db.embeddings import _shipped, default_model, shipped_model_available

    if not shipped_model_available():
        pytest.skip("the embed extra is not installed")  # pragma: no cover - the test extra installs it
    logs: list[str] = []
    notes: list[str] = []
    service = None
    try:
        with _shipped._lock:  # the keeper's background load waits here: it is "loading" until released
            service = start_service(socket_path, logs.append)
            assert service is not None
            assert warm_model._ask(socket_path, ["text"]) == {"loading": True}  # at once, no vectors
            monkeypatch.setattr(warm_model, "LOADING_WAIT", 0.3)
            link = KeeperLink(socket_path, notes.append)
            assert served_model(link) is None  # still loading after 0.3 s: passed by
            assert notes == [f"the warm-model keeper on {socket_path} was passed by (it was still loading the "
                             "model after 0.3 s): loading the embedding model in this process"]
        monkeypatch.setattr(warm_model, "LOADING_WAIT", 60.0)
        served = served_model(KeeperLink(socket_path, notes.append))  # waits until the keeper has loaded it
        assert served is not None and served.dimension == 384 and len(notes) == 1
        texts = ["agents share memory", "a second, longer sentence about PostgreSQL"]
        assert (served.embed_batch(texts) == default_model().embed_batch(texts)).all()
        assert any("warm model loaded" in line for line in logs)
    finally:
        if service is not None:
            service.close()
