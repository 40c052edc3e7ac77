"""The embedded server's keeper stops on SIGTERM even when the SystemExit its handler
raises is swallowed: numpy's extension initialisation, under the warm model's imports,
turns it into an ImportError (the model then looked "not installed") or drops it, and the
keeper went on serving until ``tnsrag server stop`` gave up waiting two minutes later."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tnsrag_db._store.embedded import keeper, warm_model


def test_a_sigterm_swallowed_while_the_warm_model_loads_still_stops_the_keeper(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[Any] = []
    handle = object()
    monkeypatch.setattr(keeper, "start_with_wheel", lambda data_dir, memory: (handle, "postgresql://"))
    monkeypatch.setattr(keeper, "postmaster", lambda data_dir: None)
    monkeypatch.setattr(keeper, "_release", lambda h, data_dir: released.append(h))

    def swallowing_start(socket_path: Path, log: Any) -> None:
        # What numpy's initialisation does with an exception raised inside it.
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(5)
        except SystemExit:
            pass
        return None

    def waited(*_args: Any) -> None:
        raise AssertionError("the keeper went on serving after SIGTERM")

    monkeypatch.setattr(warm_model, "start_service", swallowing_start)
    monkeypatch.setattr(keeper, "_wait_until_idle", waited)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = keeper.serve(tmp_path / "pg18", 900.0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert code == 0 and released == [handle]  # the server handle given back, as on any stop
    assert not keeper.keeper_files(tmp_path / "pg18").state.exists()


def test_the_idle_wait_ends_at_a_stop_it_did_not_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keeper, "postmaster", lambda data_dir: object())  # a server that stays up
    stopping = [signal.SIGTERM]
    keeper._wait_until_idle(tmp_path / "pg18", tmp_path / "state", 0.0, None, stopping)  # returns, not forever
