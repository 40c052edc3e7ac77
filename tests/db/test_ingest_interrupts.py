"""Ctrl-C during a model ingest: real SIGINTs at random moments to a real ``tnsrag ingest``
process embedding with the shipped model. Every one ends with exit status 130 and the one
"interrupted" line (``interrupted: N entries committed, ...`` once the ingest has begun), never an abort (the embedding worker is inside onnxruntime when the
signal comes more often than not), and the corpus holds exactly the committed entries,
each with its BM25 document, and as many vectors as the line says (the entries are all
written before the first vector)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._store.store import Store

pytestmark = pytest.mark.slow  # ten ingest processes, each loading the model

#: Interrupts per run, each at a random moment. Every run draws a new seed (printed with a
#: failure), so the moments tried accumulate across runs; ten keep the suite's time in bounds
#: (twenty took 84 s of a 10-minute suite).
INTERRUPTS = 10
# Before every entry is written: the entries committed. While their vectors are filled: all
# entries, and how many have a vector. A stop that comes as the last batch of a pass commits
# says that every batch read was written (and, after the vectors, that only the index build is left).
_LINE = re.compile(r"interrupted: (\d+) entr(?:y|ies) committed(?:, (\d+) with vectors of \S+)?, "
                   r"(?:the batch in progress was rolled back(?:; the same ingest run again \(or tnsrag embed "
                   r"--corpus \S+ --embedding \S+\) embeds the rest)?|every batch read was written(?:; tnsrag db "
                   r"build-indexes builds the vector index if one is due)?)")


# 1,500 files take about 16 s to ingest whole here (400 took 5.1 s, so a signal sent at up to 5 s
# could land while the finished process was exiting, after Python had restored SIGINT's default
# action: exit -2 with nothing said).
def _folder(root: Path, files: int = 1500) -> Path:
    root.mkdir()
    for i in range(files):
        (root / f"note{i:03d}.md").write_text(
            "".join(f"# Part {p} of note {i}\n\nNote {i} says agents keep memory {p} about subject {i % 17} "
                    f"and retrieval {p}.\n\n" for p in range(3)))
    return root


def _stats(url: str, corpus: str) -> dict[str, object]:
    res = CliRunner().invoke(main_group, ["stats", "--url", url, "--corpus", corpus, "--json"])
    assert res.exit_code == 0, res.output
    data: dict[str, object] = json.loads(res.stdout)
    return data


def test_sigint_at_random_moments_exits_130_with_one_line(tmp_path: Path, db_url: URL,
                                                          make_store: Callable[..., Store]) -> None:
    from tnsrag_db.embeddings import DEFAULT_EMBEDDING_NAME, shipped_model_available

    assert shipped_model_available(), "the [embed] extra is part of the test environment"
    docs = _folder(tmp_path / "docs")
    url = db_url.render_as_string(hide_password=False)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    outcomes = []
    for n in range(INTERRUPTS):
        corpus = make_store().corpus  # dropped after the test
        cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(docs), "--url", url,
               "--corpus", corpus, "--batch-size", "32"]
        # SIGINT must reach the child as Python's KeyboardInterrupt even when this runner ignores it.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        delay = rng.uniform(0.3, 5.0)  # start-up, model load, reading, embedding and writing
        time.sleep(delay)
        still_running = proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=300)
        where = f"interrupt {n} after {delay:.2f} s (seed {seed})"
        assert still_running, f"{where}: the ingest ended before the signal; make the folder larger"
        lines = err.strip().splitlines()
        outcomes.append(proc.returncode)
        assert proc.returncode == 130, f"{where}: exit {proc.returncode}\n{err[-2000:]}"
        assert "Traceback" not in err and "terminate called" not in err, f"{where}:\n{err[-2000:]}"
        said = [line for line in lines if line.startswith("interrupted")]
        assert len(said) == 1 and said == lines[-1:], f"{where}:\n{err[-2000:]}"
        # Before the ingest has begun (parsing, imports) the line is the bare word.
        match = _LINE.fullmatch(said[0])
        assert match is not None or said == ["interrupted"], said
        committed = int(match.group(1)) if match else 0
        embedded = int(match.group(2) or 0) if match else 0
        stats = _stats(url, corpus) if committed else None
        if stats is not None:  # exactly what was committed, each entry with its BM25 document, the vectors said
            assert stats["entries"] == committed, where
            assert stats["bm25"]["documents"] == committed, where  # type: ignore[index]
            spaces = stats["spaces"]
            vectors = [(s["provider"], s["vectors"]) for s in spaces]  # type: ignore[attr-defined]
            assert vectors == ([(DEFAULT_EMBEDDING_NAME, embedded)] if embedded else []), where
    assert outcomes == [130] * INTERRUPTS
    # The last corpus continues: a rerun writes the rest and finds the committed entries unchanged.
    rerun = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=600,
                           env={**os.environ})
    assert rerun.returncode == 0, rerun.stderr
    done = json.loads(rerun.stdout)
    assert done["unchanged"] == committed and done["inserted"] == done["entries"] - committed
    assert _stats(url, corpus)["spaces"][0]["missing"] == 0  # type: ignore[index]


def _prose_folder(root: Path, files: int, sections: int) -> Path:
    """Markdown of ``files`` x ``sections`` entries of about 150 tokens each (the model's cost)."""
    root.mkdir()
    words = ("memory retrieval agents index vector keyword corpus batch model window token section "
             "answer question store commit").split()
    for i in range(files):
        body = "".join(f"# Note {i} part {p}\n\n" + " ".join(words[(i * 7 + p * 3 + k) % len(words)] + f"{k % 13}"
                                                              for k in range(110)) + ".\n\n"
                       for p in range(sections))
        (root / f"note{i:03d}.md").write_text(body)
    return root


class _Lines:
    """The stderr lines of a process, read on a thread (a plain progress line every few seconds
    off a terminal), waited for with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import queue
        import threading

        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self._queue.put(line.rstrip("\n"))
            self._queue.put(None)

        threading.Thread(target=read, daemon=True).start()

    def until(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str] | None:
        """The first line from here matching ``pattern`` (None when the stream ends first)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))  # queue.Empty past the deadline
            if line is None:
                return None
            self.seen.append(line)
            match = pattern.search(line)
            if match is not None:
                return match


_EMBED = re.compile(r"embed ([\d,]+)/([\d,]+) entries")


def test_sigint_during_a_model_embed_is_answered_at_once_and_the_rerun_embeds_the_rest(
        tmp_path: Path, db_url: URL, make_store: Callable[..., Store]) -> None:
    from tnsrag_db._cli.ingest import STOPPING
    from tnsrag_db.embeddings import DEFAULT_EMBEDDING_NAME, shipped_model_available

    assert shipped_model_available(), "the [embed] extra is part of the test environment"
    entries = 400  # enough that the signal meets the embedding; it is stopped long before the end
    docs = _prose_folder(tmp_path / "docs", files=80, sections=entries // 80)
    url = db_url.render_as_string(hide_password=False)
    corpus = make_store().corpus
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(docs), "--url", url,
           "--corpus", corpus, "--batch-size", "32"]

    def start() -> tuple[subprocess.Popen[str], _Lines]:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        return proc, _Lines(proc)

    proc, lines = start()
    try:
        # Off a terminal the embed line has its total from the start; wait until more than a
        # batch is embedded, so that some vectors are committed before the signal.
        while True:
            match = lines.until(_EMBED, timeout=300)
            assert match is not None, "\n".join(lines.seen)
            assert int(match.group(2).replace(",", "")) == entries, match.group(0)
            if int(match.group(1).replace(",", "")) > 40:
                break
        proc.send_signal(signal.SIGINT)
        # Said at once, then the batch in progress is abandoned and the process ends: the
        # bound is only the harness's timeout, not a measurement.
        assert lines.until(re.compile(re.escape(STOPPING)), timeout=60) is not None, "\n".join(lines.seen)
        said = lines.until(_LINE, timeout=60)
        assert proc.wait(timeout=60) == 130, "\n".join(lines.seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert said is not None and lines.seen[-1] == said.group(0), "\n".join(lines.seen)
    assert not any("Traceback" in line for line in lines.seen), "\n".join(lines.seen)
    assert int(said.group(1)) == entries
    embedded = int(said.group(2))
    assert 0 < embedded < entries, said.group(0)
    stats = _stats(url, corpus)
    assert [(s["provider"], s["vectors"]) for s in stats["spaces"]] == [  # type: ignore[attr-defined]
        (DEFAULT_EMBEDDING_NAME, embedded)]

    # The rerun goes straight to the entries lacking a vector: its embed total is their number.
    proc, lines = start()
    try:
        match = lines.until(_EMBED, timeout=300)
        assert match is not None, "\n".join(lines.seen)
        proc.send_signal(signal.SIGINT)  # that is all this run is for
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert int(match.group(2).replace(",", "")) == entries - embedded, match.group(0)
    assert any(f"{embedded:,} had vectors" in line for line in lines.seen), "\n".join(lines.seen)
