"""Ingest progress: plain lines off a terminal (a log), redrawn lines on one, and no
``index`` line while no index is being built. A manual clock, no waiting."""

from __future__ import annotations

import io

from tnsrag_db._cli._progress import PLAIN_INTERVAL, PhaseProgress, ingest_progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_ingest_progress_is_plain_lines_and_quiet_silences_it() -> None:
    now = [100.0]
    log = io.StringIO()
    progress = ingest_progress(log, quiet=False, clock=lambda: now[0])
    assert progress.enabled and progress.plain
    progress.start("read")
    now[0] += 4.0
    progress.update("read", 40, 400)
    assert progress.plain_line() == "[0:00:04] read 40/400 files, 10.0 files/s, ETA 0:00:36"
    progress.update("read", 400, 400)
    progress.start("write")
    progress.start("embed")
    now[0] += 2.0
    progress.update("write", 100, 1000)
    progress.update("embed", 50, 1000)
    progress.draw()  # what the ticker writes every PLAIN_INTERVAL seconds
    assert log.getvalue() == ("[0:00:06] read 400/400 files, 100.0 files/s, done in 0:00:04; write 100/1,000 "
                              "entries, 50.0 entries/s, ETA 0:00:18; embed 50/1,000 entries, 25.0 entries/s, ETA 0:00:38\n")
    assert "\x1b" not in log.getvalue() and PLAIN_INTERVAL <= 10
    quiet = ingest_progress(io.StringIO(), quiet=True)
    assert not quiet.enabled


def test_on_a_terminal_the_index_line_appears_only_once_an_index_is_built() -> None:
    screen = _Tty()
    progress = ingest_progress(screen, quiet=False, clock=lambda: 0.0)
    assert progress.enabled and not progress.plain
    assert [line.split()[0] for line in progress.lines()] == ["read", "write", "embed"]
    progress.draw()
    assert "index" not in screen.getvalue()
    progress.update("index", 10, 80, note="building index: loading tuples")
    assert [line.split()[0] for line in progress.lines()] == ["read", "write", "embed", "index"]
    progress.draw()
    assert screen.getvalue().count("\x1b[3F") == 1  # the redraw goes up the three lines drawn before


def test_held_progress_writes_nothing_and_redraws_below() -> None:
    screen = _Tty()
    progress = PhaseProgress(screen, {"read": "files"}, clock=lambda: 0.0)
    progress.draw()
    with progress.held():
        progress.draw()
    assert screen.getvalue().count("read") == 1
    progress.draw()
    assert screen.getvalue().count("read") == 2 and "\x1b[1F" not in screen.getvalue()
