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
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ServedEmbedding", "WarmModelService", "served_model", "start_service"]

#: Seconds a client waits for the keeper's answer (the keeper may still be loading the model).
CLIENT_TIMEOUT = 30.0
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        from tnsrag_db.embeddings import SHIPPED_MODEL_NAME, default_model

        try:
            request = json.loads(self.rfile.readline(_MAX_REQUEST_BYTES))
            texts = request.get("texts")
            if request.get("model") != SHIPPED_MODEL_NAME:
                raise ValueError(f"this keeper serves {SHIPPED_MODEL_NAME}, not {request.get('model')!r}")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError("texts must be a list of strings")
            model = default_model()
            vectors = model.embed_batch(texts).tolist() if texts else []
            answer: dict[str, Any] = {"vectors": vectors, "dimension": model.dimension,
                                      "max_tokens": model.max_tokens}
        except Exception as exc:  # answered to the client, which then embeds by itself
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


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
    from tnsrag_db.embeddings import default_model, shipped_model_available

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

    def warm() -> None:
        try:
            default_model()
            log(f"warm model loaded, served on {socket_path}")
        except Exception as exc:  # each request then reports it, and its client loads the model itself
            log(f"cannot load the warm model: {exc}")

    threading.Thread(target=warm, name="tnsrag-warm-model-load", daemon=True).start()
    return WarmModelService(server, socket_path)


def _ask(socket_path: Path, texts: Sequence[str]) -> dict[str, Any]:
    from tnsrag_db.embeddings import SHIPPED_MODEL_NAME

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(CLIENT_TIMEOUT)
        conn.connect(str(socket_path))
        conn.sendall(json.dumps({"model": SHIPPED_MODEL_NAME, "texts": list(texts)}).encode() + b"\n")
        with conn.makefile("rb") as answer_file:
            answer = json.loads(answer_file.readline(_MAX_REQUEST_BYTES))
    if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("vectors"), list):
        raise ValueError(str(answer.get("error") if isinstance(answer, dict) else answer))
    return answer


class ServedEmbedding:
    """The shipped model as the keeper serves it (same name, dimension and vectors); falls
    back to the model loaded in this process for good once the keeper does not answer."""

    def __init__(self, socket_path: Path, dimension: int, max_tokens: int) -> None:
        from tnsrag_db.embeddings import SHIPPED_MODEL_NAME

        self._path = socket_path
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
            from tnsrag_db.embeddings import default_model

            self._local = default_model()
        return self._local

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of ``texts``, one row each (float32)."""
        if self._local is None:
            try:
                vectors = _ask(self._path, texts)["vectors"]
                return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dimension)
            except (OSError, ValueError):
                pass  # the keeper went away or failed: this process embeds by itself from now on
        result: npt.NDArray[np.float32] = self._fallback().embed_batch(texts)
        return result

    def __call__(self, text: str) -> list[float]:
        """The vector of ``text``."""
        row: list[float] = self.embed_batch([text])[0].tolist()
        return row

    def __repr__(self) -> str:
        return f"ServedEmbedding({self.name!r}, socket={str(self._path)!r})"


def served_model(socket_path: Path) -> ServedEmbedding | None:
    """The keeper's warm model on ``socket_path``, or None when no keeper answers there."""
    if not hasattr(socket, "AF_UNIX") or not socket_path.exists():
        return None
    try:
        hello = _ask(socket_path, [])
        return ServedEmbedding(socket_path, int(hello["dimension"]), int(hello["max_tokens"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
