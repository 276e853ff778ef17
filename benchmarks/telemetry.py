"""What agentlog.telemetry costs an append: off, and on with three kinds of provider.

    python -m benchmarks.telemetry [--appends 20000] [--rounds 3] [--engines c,python]
                                   [--json FILE]

One process, side by side: each round runs every mode in turn on a fresh
SQLite file (``synchronous="normal"``), and the table shows each mode's
median over the rounds of the time per one-event append, and its cost over
``off`` in the same run:

- ``off``: not instrumented (agentlog's own methods);
- ``noop``: instrumented with OpenTelemetry's no-op tracer and meter
  providers (the wrappers alone);
- ``sdk``: the SDK's providers with nothing to export to (a span and the
  metrics recorded, then dropped);
- ``export``: the SDK with a ``SimpleSpanProcessor`` into the in-memory
  exporter and an in-memory metric reader (every span handed on at its end).

Two workloads: ``1 thread`` appends one event per call; ``4 threads`` append
at once, so that on the C engine their appends queue to its writer thread
(the path whose commit groups telemetry records). Needs the ``prometheus``
extra (the OpenTelemetry SDK).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

from agentlog import SqliteCheckpointer, telemetry
from benchmarks.workload import events

MODES = ("off", "noop", "sdk", "export")
WORKLOADS = ("1 thread", "4 threads")


@contextmanager
def mode(name: str) -> Iterator[None]:
    """agentlog instrumented as ``name`` says, until the block ends."""
    if name == "noop":
        telemetry.instrument(NoOpTracerProvider(), NoOpMeterProvider())
    elif name == "sdk":
        telemetry.instrument(TracerProvider(), MeterProvider())
    elif name == "export":
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        telemetry.instrument(tracer_provider, meter_provider)
    try:
        yield
    finally:
        telemetry.uninstrument()


def _appends(log: SqliteCheckpointer, count: int, threads: int) -> float:
    """Seconds for ``count`` one-event appends by ``threads`` threads (a session each)."""
    one = events(1)[0]
    per = count // threads

    def work(sid: str) -> None:
        for _ in range(per):
            log.append(sid, [one])

    workers = [threading.Thread(target=work, args=(f"s{n}",)) for n in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def measure(
    engines: list[str], appends: int, rounds: int, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Every (engine, workload, mode): its µs per append, each round, side by side."""
    times: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-telemetry-") as tmp:
        for round_ in range(rounds):
            for engine in engines:
                for workload in WORKLOADS:
                    threads = int(workload.split()[0])
                    for name in MODES:
                        path = Path(tmp) / f"{engine}-{threads}-{name}-{round_}.db"
                        with SqliteCheckpointer(path, engine=engine) as log, mode(name):
                            seconds = _appends(log, appends, threads)
                        key = (engine, workload, name)
                        times.setdefault(key, []).append(seconds / appends * 1e6)
            progress(f"  round {round_ + 1} of {rounds} done")
    rows = []
    for (engine, workload, name), each in times.items():
        off = statistics.median(times[(engine, workload, "off")])
        median = statistics.median(each)
        rows.append(
            {
                "engine": engine,
                "workload": workload,
                "mode": name,
                "us_per_append": median,
                "over_off_us": median - off,
                "rounds_us": each,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.telemetry", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--appends", type=int, default=20_000, help="appends per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the table shows medians)")
    parser.add_argument("--engines", default="c,python", help="comma-separated: c, python")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    rows = measure(engines, args.appends, max(1, args.rounds))
    print(f"\n{args.appends:,} one-event appends, median of {args.rounds} round(s), µs/append\n")
    print(f"{'engine':<8}{'workload':<12}{'mode':<8}{'µs/append':>11}{'over off':>10}")
    for row in rows:
        print(
            f"{row['engine']:<8}{row['workload']:<12}{row['mode']:<8}"
            f"{row['us_per_append']:>11.1f}{row['over_off_us']:>+10.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
