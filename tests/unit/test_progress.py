"""Ingest progress: plain lines off a terminal (a log), redrawn lines on one, and no
``index`` line while no index is being built. A manual clock, no waiting."""

from __future__ import annotations

import io

from tnsrag_db._cli._progress import PLAIN_FIRST, PLAIN_INTERVAL, PhaseProgress, ingest_progress


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


def test_off_a_terminal_a_slow_start_is_said_at_once_and_the_read_eta_follows_the_bytes() -> None:
    now = [0.0]
    log = io.StringIO()
    progress = ingest_progress(log, quiet=False, clock=lambda: now[0])
    progress.status("loading the embedding model", announce=True)  # before the context: nothing yet
    assert log.getvalue() == ""
    with progress:
        progress.status("loading the embedding model", announce=True)
        assert log.getvalue() == "[0:00:00] loading the embedding model\n"
        progress.status("finding the files")  # not announced: the next tick says it
        assert progress.plain_line() == "[0:00:00] finding the files"
        progress.start("read")
        now[0] += 10.0
        # 10 of 599 files, but the eleventh is a large changelog: 1 of its 5 MB read so far.
        progress.update("read", 10, 599, work=(1_000_000, 5_000_000))
        assert progress.plain_line() == "[0:00:10] read 10/599 files, 1.0/5.0 MB, 0.10 MB/s, ETA 0:00:40"
        progress.update("read", 10, 599, work=(20_000, 5_000_000))  # under 1 %: no ETA from so little
        assert progress.plain_line() == "[0:00:10] read 10/599 files, 0.02/5.0 MB, 0.00 MB/s"
        progress.update("read", 599, 599, work=(5_000_000, 5_000_000))
        assert progress.plain_line() == "[0:00:10] read 599/599 files, 59.9 files/s, done in 0:00:10"
    assert PLAIN_FIRST < PLAIN_INTERVAL


def test_said_lines_come_out_at_once_even_quiet_and_the_lines_are_drawn_again_below() -> None:
    screen = _Tty()
    progress = ingest_progress(screen, quiet=False, clock=lambda: 0.0)
    progress.draw()
    progress.say("stopping after the current batch; Ctrl-C again to abandon it")
    progress.draw()
    text = screen.getvalue()
    assert text.index("stopping") < text.rindex("read") and "\x1b[3F" not in text  # below, not over it
    assert "(starting)" in progress.lines()[0]  # no phase begun: what the run is doing
    log = io.StringIO()
    ingest_progress(log, quiet=True).say("stopping")
    assert log.getvalue() == "stopping\n"
