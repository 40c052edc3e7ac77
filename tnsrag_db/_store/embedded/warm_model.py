"""The keeper's warm embedding model: a query of ``tnsrag`` embeds its text in the keeper,
which has the shipped model loaded, instead of loading the model itself.

Loading the shipped model (onnxruntime's session, the tokenizer, the file's checksum)
costs a short CLI call more than its query. The keeper already outlives the calls, so it
loads the model once (when the ``embed`` extra is installed) and answers on a Unix socket
next to the data directory (``D.keeper.sock``, readable by its owner only): a request is
one JSON line ``{"model": NAME, "texts": [...]}``, the answer one JSON line
``{"vectors": [[...], ...], "dimension": N, "max_tokens": N}`` or ``{"error": "..."}``.
The vectors are the model's own float32 values (JSON keeps them exactly).

The client side, :class:`ServedEmbedding`, stands in for the shipped model in a process
that called :func:`~tnsrag_db._store.embedded.keeper.use_keeper_model`; whenever the keeper does not answer it loads the
model in-process and goes on with that, so an answer never depends on the keeper.

The keeper answers within a second or is passed by: a client gives it
:data:`CONNECT_TIMEOUT` seconds to accept and :data:`ANSWER_TIMEOUT` for each answer
(plus :data:`PER_TEXT_TIMEOUT` per text to embed). A keeper still loading the model
answers ``{"loading": true}`` at once, and the client asks again until it is loaded, for
at most :data:`LOADING_WAIT` seconds. A keeper that does not answer in time (stopped,
hung, overloaded), fails, or is still loading after that is passed by for the rest of the
process (:class:`KeeperLink`): the process loads the model itself, and says so once. A
keeper that is not there (no socket, nobody listening) is passed by without a word.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tnsrag_db.embeddings import SHIPPED_MODEL_NAME, default_model, shipped_model_available
from tnsrag_db.embeddings._shipped import use_warm_model

__all__ = ["ANSWER_TIMEOUT", "CONNECT_TIMEOUT", "LOADING_WAIT", "PER_TEXT_TIMEOUT", "KeeperLink", "ServedEmbedding",
           "WarmModelService", "served_model", "start_service", "use_served_model"]

#: Seconds a client gives the keeper's socket to accept a connection.
CONNECT_TIMEOUT = 1.0
#: Seconds a client waits for an answer (a hello, or "loading"), plus PER_TEXT_TIMEOUT per text to embed.
ANSWER_TIMEOUT = 1.0
#: Seconds more per text to embed (the warm model embeds a query in milliseconds).
PER_TEXT_TIMEOUT = 0.1
#: Seconds a client waits for a keeper that answers "loading" (it started moments ago): about
#: what loading the model takes; past them, the client loads it itself.
LOADING_WAIT = 15.0
_LOADING_POLL = 0.1
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline(_MAX_REQUEST_BYTES))
            texts = request.get("texts")
            if request.get("model") != SHIPPED_MODEL_NAME:
                raise ValueError(f"this keeper serves {SHIPPED_MODEL_NAME}, not {request.get('model')!r}")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError("texts must be a list of strings")
            if not self.server.loaded.is_set():  # answered at once: the client waits, or loads the model itself
                answer: dict[str, Any] = {"loading": True}
            else:
                answer = self._embed(texts)
        except Exception as exc:  # answered to the client, which then embeds by itself
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(OSError):  # a client that stopped waiting (it passed the keeper by) has gone
            self.wfile.write(json.dumps(answer).encode() + b"\n")

    @staticmethod
    def _embed(texts: list[str]) -> dict[str, Any]:
        model = default_model()  # loaded (or its failure raised again, and answered)
        vectors = model.embed_batch(texts).tolist() if texts else []
        return {"vectors": vectors, "dimension": model.dimension, "max_tokens": model.max_tokens}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    #: Set once the background load has finished (loaded, or failed: requests then answer its error).
    loaded: threading.Event


class WarmModelService:
    """The keeper's side: the shipped model loaded in the background and served on a socket."""

    def __init__(self, server: _Server, path: Path) -> None:
        self._server, self._path = server, path
        threading.Thread(target=server.serve_forever, name="tnsrag-warm-model", daemon=True).start()

    def close(self) -> None:
        """Stop serving and remove the socket file."""
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(OSError):
            self._path.unlink()


def start_service(socket_path: Path, log: Callable[[str], None]) -> WarmModelService | None:
    """Serve the shipped model on ``socket_path`` (loading it in the background at once);
    None, with a line to ``log`` saying why, when it cannot: no ``embed`` extra, no Unix
    sockets on this platform, or a path too long for one."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    if not shipped_model_available():
        log("the embed extra is not installed: no warm model to serve")
        return None
    with contextlib.suppress(OSError):
        socket_path.unlink()  # a previous keeper's, which exited without removing it
    previous = os.umask(0o177)  # the socket is its owner's only, from the moment it exists
    try:
        server = _Server(str(socket_path), _Handler)
    except OSError as exc:
        log(f"cannot serve the warm model on {socket_path}: {exc}")
        return None
    finally:
        os.umask(previous)
    server.loaded = threading.Event()

    def warm() -> None:
        try:
            default_model()
            log(f"warm model loaded, served on {socket_path}")
        except Exception as exc:  # each request then reports it, and its client loads the model itself
            log(f"cannot load the warm model: {exc}")
        finally:
            server.loaded.set()

    threading.Thread(target=warm, name="tnsrag-warm-model-load", daemon=True).start()
    return WarmModelService(server, socket_path)


class _Unanswered(Exception):
    """The keeper did not serve a request: ``silent`` when none is there to ask (no socket,
    nobody listening), else the reason is worth a line."""

    def __init__(self, reason: str, *, silent: bool = False) -> None:
        super().__init__(reason)
        self.silent = silent


def _ask(socket_path: Path, texts: Sequence[str]) -> dict[str, Any]:
    """The keeper's answer to one request: ``{"loading": True}`` or one with ``vectors``.
    Raises :class:`_Unanswered` when it does not come in time or is an error."""
    answer_timeout = ANSWER_TIMEOUT + PER_TEXT_TIMEOUT * len(texts)
    step = "accept a connection"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT)
            conn.connect(str(socket_path))
            step = "answer"
            conn.settimeout(answer_timeout)
            conn.sendall(json.dumps({"model": SHIPPED_MODEL_NAME, "texts": list(texts)}).encode() + b"\n")
            with conn.makefile("rb") as answer_file:
                line = answer_file.readline(_MAX_REQUEST_BYTES)
    except (FileNotFoundError, ConnectionRefusedError) as exc:  # no keeper listens there (any more)
        raise _Unanswered(str(exc), silent=True) from exc
    except BlockingIOError as exc:  # its queue of connections not yet accepted is full
        raise _Unanswered("it accepts no connection: its queue is full") from exc
    except TimeoutError as exc:
        limit = CONNECT_TIMEOUT if step == "accept a connection" else answer_timeout
        raise _Unanswered(f"it did not {step} within {limit:g} s") from exc
    except OSError as exc:
        raise _Unanswered(f"{type(exc).__name__}: {exc}") from exc
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise _Unanswered("it closed the connection without an answer" if not line else
                          f"its answer is not JSON: {line[:200]!r}") from exc
    if isinstance(answer, dict) and answer.get("loading") is True:
        return answer
    if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("vectors"), list):
        raise _Unanswered(f"it failed: {answer.get('error') if isinstance(answer, dict) else answer}")
    return answer


class KeeperLink:
    """This process's way to the keeper's warm model on ``socket_path``: each request asked
    with short timeouts, and the keeper passed by for good once it does not serve one.

    ``notify`` gets one line, once, when a keeper that is there is passed by (stopped,
    hung, failing, or loading for longer than :data:`LOADING_WAIT` seconds); ``who`` adds
    to it which keeper (its pid) when called."""

    def __init__(self, socket_path: Path, notify: Callable[[str], None] | None = None,
                 who: Callable[[], str] | None = None) -> None:
        self.socket_path = socket_path
        self._notify, self._who = notify, who
        self._lock = threading.Lock()
        self.passed_by: str | None = None  # why, once passed by

    def ask(self, texts: Sequence[str]) -> dict[str, Any] | None:
        """The keeper's answer (with ``vectors``, ``dimension`` and ``max_tokens``) for
        ``texts``, waiting while it loads the model; None once it is passed by."""
        if self.passed_by is not None:
            return None
        deadline: float | None = None
        while True:
            try:
                answer = _ask(self.socket_path, texts)
            except _Unanswered as exc:
                self.pass_by(str(exc), exc.silent)
                return None
            if not answer.get("loading"):
                return answer
            now = time.monotonic()
            deadline = now + LOADING_WAIT if deadline is None else deadline
            if now >= deadline:
                self.pass_by(f"it was still loading the model after {LOADING_WAIT:g} s", silent=False)
                return None
            time.sleep(_LOADING_POLL)

    def pass_by(self, reason: str, silent: bool) -> None:
        """Pass the keeper by from now on, saying why (once) unless ``silent``."""
        with self._lock:
            if self.passed_by is not None:
                return
            self.passed_by = reason
        if not silent and self._notify is not None:
            who = self._who() if self._who is not None else ""
            self._notify(f"the warm-model keeper{who} on {self.socket_path} was passed by ({reason}): "
                         "loading the embedding model in this process")


class ServedEmbedding:
    """The shipped model as the keeper serves it (same name, dimension and vectors); falls
    back to the model loaded in this process for good once the keeper does not answer."""

    def __init__(self, socket_path: Path | KeeperLink, dimension: int, max_tokens: int) -> None:
        self._link = socket_path if isinstance(socket_path, KeeperLink) else KeeperLink(socket_path)
        self._dimension, self._max_tokens = dimension, max_tokens
        self._local: Any = None
        self.name = SHIPPED_MODEL_NAME

    @property
    def dimension(self) -> int:
        """Dimensions of the vectors (384 for the shipped model)."""
        return self._dimension

    @property
    def max_tokens(self) -> int:
        """The model's window in tokens."""
        return self._max_tokens

    def _fallback(self) -> Any:
        if self._local is None:
            self._local = default_model()
        return self._local

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of ``texts``, one row each (float32)."""
        if self._local is None:
            answer = self._link.ask(texts)
            try:
                if answer is not None:
                    return np.asarray(answer["vectors"], dtype=np.float32).reshape(len(texts), self._dimension)
            except (ValueError, TypeError):  # a malformed answer: the keeper is not what this process expects
                self._link.pass_by("its vectors do not fit the model", silent=False)
            # The keeper went away, stalled or failed: this process embeds by itself from now on.
        result: npt.NDArray[np.float32] = self._fallback().embed_batch(texts)
        return result

    def __call__(self, text: str) -> list[float]:
        """The vector of ``text``."""
        row: list[float] = self.embed_batch([text])[0].tolist()
        return row

    def __repr__(self) -> str:
        return f"ServedEmbedding({self.name!r}, socket={str(self._link.socket_path)!r})"


def served_model(socket_path: Path | KeeperLink) -> ServedEmbedding | None:
    """The keeper's warm model on ``socket_path`` (or through a :class:`KeeperLink`), or None
    when no keeper serves it there within the link's timeouts."""
    link = socket_path if isinstance(socket_path, KeeperLink) else KeeperLink(socket_path)
    if not hasattr(socket, "AF_UNIX") or not link.socket_path.exists():
        return None
    hello = link.ask([])
    if hello is None:
        return None
    try:
        return ServedEmbedding(link, int(hello["dimension"]), int(hello["max_tokens"]))
    except (KeyError, TypeError, ValueError):
        link.pass_by("its hello names no dimension", silent=False)
        return None


def use_served_model(link: KeeperLink) -> Callable[[], None]:
    """In this process, let the shipped model be the one ``link``'s keeper serves
    (:func:`served_model`) whenever it answers, until the function returned is called."""
    use_warm_model(lambda: served_model(link))
    return lambda: use_warm_model(None)
