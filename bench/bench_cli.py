"""Whole-process CLI timings: ``tnsrag --version``, ``--help``, a keyword, a vector and a hybrid query.

Usage::

    python -m bench.bench_cli [--runs 20] [--cold-runs 20] [--stopped-keeper-runs 5] [--baseline DIR]

Every figure is the wall time of a whole ``tnsrag`` process (interpreter start, imports,
work, exit), median and p90 over ``--runs`` runs; the command is run the way the console
script runs it (``from tnsrag_db._cli import main; main()``). The query is
``tnsrag query "agents share memory" --strategy keyword`` on the sample corpus, timed

* against a running embedded server (``tnsrag server start`` first), and
* against a cold one: the server is stopped (untimed) before every run, so each run
  starts it; ``--cold-runs`` of them.

The same query with ``--strategy vector`` and ``--strategy hybrid`` is timed against the
running server: the sample corpus is embedded with the shipped model when the ``embed``
extra is installed, and the query is embedded with it too (by the keeper's warm model
where the checkout has one, else by the model the process loads). Then once more with
the keeper stopped (SIGSTOP: its socket still accepts, it answers nothing), resumed
afterwards, ``--stopped-keeper-runs`` times: the query must pass the keeper by and load
the model itself (target: within 5 s; the code before waited 30 s for the keeper).

``--baseline DIR`` names a checkout of older code (e.g. ``git archive main | tar -x -C
DIR``): its runs import ``tnsrag_db`` from DIR and are interleaved with this checkout's,
run by run, so both see the same machine load; the table then shows both and the ratio
new/old. Its queries read a schema of its own, ``tnsrag_baseline``, which it migrates
and fills with the sample corpus itself (an older release may not read this checkout's
schema). ``python -c pass`` is timed alongside as the interpreter's floor.

The embedded server lives in a temporary user data directory (``XDG_DATA_HOME``), which
is stopped and deleted at the end; nothing touches your own data.

Bytecode: an installed wheel ships compiled modules, so by default every checkout's
modules (and the site-packages') are compiled once, untimed, into a temporary
``PYTHONPYCACHEPREFIX`` and read from there by every timed run.
``--no-bytecode-cache`` instead runs with ``PYTHONDONTWRITEBYTECODE=1`` and no cache, so
every process compiles the checkout's modules from source (an editable install in a
shell that sets that variable): slower, by the compile time of what a command imports.

Last, the import time of one keyword query process of this checkout (``python -X
importtime``) is summed by top-level package: ``self`` is a package's own modules,
``cumulative`` what importing it cost with everything it pulled in.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CLI = "from tnsrag_db.{package} import main; main()"
QUERY = ["query", "agents share memory", "--strategy", "keyword", "--top-k", "3"]
VECTOR_QUERY = [*QUERY[:3], "vector", *QUERY[4:]]
HYBRID_QUERY = [*QUERY[:3], "hybrid", *QUERY[4:]]


class Runner:
    """Runs ``tnsrag`` from one checkout (``tnsrag_db`` imported from ``root``)."""

    def __init__(self, name: str, root: Path, env: dict[str, str], schema: str | None = None) -> None:
        self.name, self.root = name, root
        #: ``--schema`` of its queries: a baseline older than the schema's compatibility floor
        #: cannot read this checkout's schema, so it reads one of its own.
        self.schema = ["--schema", schema] if schema else []
        self.env = {**env, "PYTHONPATH": str(root)}
        self.last_cpu = 0.0
        # The command's package: ``_cli`` since the private-module rename, ``cli`` in older checkouts.
        self.cli = _CLI.format(package="_cli" if (root / "tnsrag_db" / "_cli").is_dir() else "cli")

    def run(self, *args: str, check: bool = True) -> float:
        """Run ``tnsrag ARGS``; return its wall time and record its CPU time in ``last_cpu``."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", self.cli, *args], cwd=self.root, env=self.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.last_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if check and done.returncode != 0:
            raise SystemExit(f"{self.name}: tnsrag {' '.join(args)} failed:\n{done.stderr}")
        return elapsed

    def module_file(self) -> str:
        return subprocess.run([sys.executable, "-c", "import tnsrag_db; print(tnsrag_db.__file__)"], cwd=self.root,
                              env=self.env, capture_output=True, text=True, check=True).stdout.strip()


def _stats(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return f"{statistics.median(times) * 1000:7.0f} ms (p90 {p90 * 1000:5.0f})"


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1000:.0f} ms"


def _floor(env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - started


_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _package(module: str) -> str:
    top = module.split(".")[0]
    return "(standard library)" if top in sys.stdlib_module_names or top.startswith("_") else top


def import_breakdown(runner: Runner, args: list[str]) -> list[tuple[str, float, float]]:
    """``(top-level package, self ms, cumulative ms)`` of one ``tnsrag ARGS`` process run under
    ``-X importtime``, largest cumulative first."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", runner.cli, *args], cwd=runner.root,
                          env=runner.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    # (depth, top-level package, self ms, cumulative ms); importtime prints a module after
    # the modules it imported, so a module's importer is the next line of smaller depth.
    entries = [(len(m[3]) // 2, _package(m[4]), int(m[1]) / 1000, int(m[2]) / 1000)
               for m in map(_IMPORT_LINE.match, done.stderr.splitlines()) if m is not None]
    own: dict[str, float] = {}
    cumulative: dict[str, float] = {}
    for i, (depth, top, self_ms, cum_ms) in enumerate(entries):
        own[top] = own.get(top, 0.0) + self_ms
        importer = next((t for d, t, _, _ in entries[i + 1:] if d < depth), None)
        if importer != top:  # an import of this package from outside it: count what it cost
            cumulative[top] = cumulative.get(top, 0.0) + cum_ms
    return sorted(((top, own[top], cumulative.get(top, 0.0)) for top in own), key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=20)
    parser.add_argument("--stopped-keeper-runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None, help="checkout of older code to compare with")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile the checkouts' modules in every process (PYTHONDONTWRITEBYTECODE=1)")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="tnsrag-bench-cli-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_") and k != "PYTHONPYCACHEPREFIX"}
    env["XDG_DATA_HOME"] = str(home)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    new = Runner("new", ROOT, env)
    runners = [new] + ([Runner("old", args.baseline.resolve(), env, schema="tnsrag_baseline")] if args.baseline else [])
    for r in runners:
        print(f"{r.name}: tnsrag_db from {r.module_file()}")
    results: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}

    def timed(label: str, each: Callable[[Runner], float], runs: int) -> None:
        for n in range(runs):
            order = runners if n % 2 == 0 else runners[::-1]  # rotate so neither always goes first
            for r in order:
                results.setdefault((label, r.name), []).append(each(r))
                cpu.setdefault((label, r.name), []).append(r.last_cpu)
            results.setdefault((label, "python -c pass"), []).append(_floor(env))

    def stop_server() -> None:
        new.run("server", "stop", "--force")

    breakdown: list[tuple[str, float, float]] = []
    try:
        for r in runners:  # the first starts the kept server; each migrates its schema and loads the sample corpus
            r.run("ingest", "--sample", *r.schema)
        for r in runners:  # untimed: fills the bytecode cache (when there is one) of what each command imports
            r.run("--help")
            r.run(*QUERY, *r.schema)
            r.run(*VECTOR_QUERY, *r.schema)
        timed("tnsrag --version", lambda r: r.run("--version"), args.runs)
        timed("tnsrag --help", lambda r: r.run("--help"), args.runs)
        new.run("server", "start")
        timed("keyword query, server running", lambda r: r.run(*QUERY, *r.schema), args.runs)
        timed("vector query, server running", lambda r: r.run(*VECTOR_QUERY, *r.schema), args.runs)
        timed("hybrid query, server running", lambda r: r.run(*HYBRID_QUERY, *r.schema), args.runs)
        breakdown = import_breakdown(new, QUERY)
        if args.stopped_keeper_runs:
            import json
            import signal

            keeper_pid = json.loads((home / "tnsrag_db" / "pg18.keeper.json").read_text())["pid"]
            os.kill(keeper_pid, signal.SIGSTOP)
            try:
                timed("vector query, keeper stopped", lambda r: r.run(*VECTOR_QUERY, *r.schema),
                      args.stopped_keeper_runs)
            finally:
                os.kill(keeper_pid, signal.SIGCONT)

        def cold(r: Runner) -> float:
            stop_server()
            return r.run(*QUERY, *r.schema)

        timed("keyword query, server stopped", cold, args.cold_runs)
    finally:
        stop_server()
        shutil.rmtree(home, ignore_errors=True)

    labels = list(dict.fromkeys(label for label, _ in results))
    header = (f"{'command':32} {'new':>24} {'cpu':>7}"
              + (f" {'old':>24} {'cpu':>7} {'new/old':>8}" if args.baseline else ""))
    cache = "no bytecode cache: modules compiled in every process" if args.no_bytecode_cache \
        else "bytecode cached, as installed"
    print(f"\nwhole-process wall time, median (p90) over the runs, and the median CPU time (user + sys)"
          f" of the process (less sensitive to other load); {cache}; interpreter floor `python -c pass` "
          f"{statistics.median(results[(labels[0], 'python -c pass')]) * 1000:.0f} ms")
    print(header)
    print("-" * len(header))
    for label in labels:
        row = f"{label:32} {_stats(results[(label, 'new')]):>24} {_ms(cpu[(label, 'new')]):>7}"
        if args.baseline:
            ratio = statistics.median(results[(label, "new")]) / statistics.median(results[(label, "old")])
            row += f" {_stats(results[(label, 'old')]):>24} {_ms(cpu[(label, 'old')]):>7} {ratio:8.2f}"
        print(row)
    print("\nimports of one keyword query process (new, server running), by top-level package, ms:")
    print(f"{'package':32} {'self':>8} {'cumulative':>11}")
    for top, own_ms, cum_ms in breakdown[:12]:
        print(f"{top:32} {own_ms:8.1f} {cum_ms:11.1f}")
    print(f"{'total':32} {sum(r[1] for r in breakdown):8.1f}")


if __name__ == "__main__":
    main()
