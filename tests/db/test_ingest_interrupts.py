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

pytestmark = pytest.mark.slow  # twenty ingest processes, each loading the model

INTERRUPTS = 20
# Before every entry is written: the entries committed. While their vectors are filled: all
# entries, and how many have a vector.
_LINE = re.compile(r"interrupted: (\d+) entr(?:y|ies) committed(?:, (\d+) with vectors of \S+)?, the batch in progress "
                   r"was rolled back(?:; the same ingest run again \(or tnsrag embed --corpus \S+ --embedding \S+\) "
                   r"embeds the rest)?")


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
    from tnsrag_db.embeddings import SHIPPED_MODEL_NAME, shipped_model_available

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
            assert vectors == ([(SHIPPED_MODEL_NAME, embedded)] if embedded else []), where
    assert outcomes == [130] * INTERRUPTS
    # The last corpus continues: a rerun writes the rest and finds the committed entries unchanged.
    rerun = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=600,
                           env={**os.environ})
    assert rerun.returncode == 0, rerun.stderr
    done = json.loads(rerun.stdout)
    assert done["unchanged"] == committed and done["inserted"] == done["entries"] - committed
    assert _stats(url, corpus)["spaces"][0]["missing"] == 0  # type: ignore[index]
