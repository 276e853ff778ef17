"""PostgreSQL: agentlog's backend against raw psycopg, in the same run.

    python -m benchmarks.postgres --conninfo "host=... dbname=... user=..."
    python -m benchmarks.postgres            # starts a throwaway server of the tests'

Scenarios (the workload of ``python -m benchmarks``: ~500-byte agent events):

* S1: append 1 event per call, one session, with ``expected_head`` (10k).
* S2: append 100 events per call (100k events, 1,000 calls).
* S3: replay every event of a 10k-event session to ``StoredEvent``s.
* S5: 4 and 8 threads appending 1 event per call to a session each (10k in
  all), one pool; with and without ``NOTIFY`` (PostgreSQL serialises the
  commits of notifying transactions on one queue lock).
* S5 processes: 1 and 8 processes, each with a checkpointer (a pool) of its
  own, appending 1 event per call to a session each, 100k events in all:
  several hosts' workers, on one machine.
* Peers, when installed (``pip install -e ".[bench,postgres]"``), on the workload of
  their SQLite rows in ``python -m benchmarks``: LangGraph's
  ``PostgresSaver`` (one checkpoint per step holding the whole history; it
  runs on the first events only, as many as its SQLite row) and
  ``eventsourcing``'s PostgreSQL recorder (an aggregate saved per call), at
  S1 and S2. A peer that is not installed is a row saying so.
* batch: one 100-event batch inserted by each method psycopg offers —
  ``executemany`` (pipelined), ``COPY`` (binary), one multi-row ``VALUES``,
  and one ``INSERT … SELECT FROM unnest(arrays)`` — each in a transaction
  with the head's compare-and-set, as the backend needs it.

The raw baseline is one psycopg connection issuing the same statement the
backend issues (prepared by the server after its first uses), with the
payloads encoded before the clock starts and no validation, pool or objects:
what is left is agentlog's own cost. S3's baseline fetches the same keyset
pages and decodes each payload (any reader needs the events as objects:
agentlog's extra is its checksum check and the ``StoredEvent``s).

**A round** of S1, S2 and S3 compares agentlog with raw psycopg like with
like: ``--repetitions`` (5 by default) repetitions, each timing raw psycopg
and agentlog back to back, the order alternating (raw first in the 1st,
3rd, … repetition, agentlog first in the others), so that neither side
always runs on the machine as the other left it. Before each timed run of
S1 and S2 that side gets a fresh schema of its own (the same events to
append; ``autovacuum_enabled = off`` on its tables), then ``VACUUM
(ANALYZE)`` of the schema and a ``CHECKPOINT`` (the server's dirty pages
written before the clock starts, not during one side's run). S3 loads one
session of events per round (agentlog's append), vacuums and checkpoints
once, reads it untimed once by each side (the same warm cache for both),
then times each side reading that same session ``S3_PASSES`` times over.
The round's figure for each side is the median of its repetitions' rates,
and the round's ratio (printed per round, ``agentlog / raw``) the median of
its repetitions' ratios, each from the pair run back to back. Both sides'
connections run with ``synchronous_commit`` as ``--synchronous-commit``
says (``off`` by default, the throwaway server's setting too), set on the
connection string of both. Every figure is the median of ``--rounds``
rounds (each round's rate printed beside it, in brackets); client and
server share the machine's cores. The peers and S5 run round by round
too, each system in turn on a fresh schema.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agentlog.integrity import checksum

from .workload import events as workload
from .workload import time_langgraph_steps, time_threads_appending

S1_EVENTS = 10_000
S2_EVENTS = 100_000
S3_EVENTS = 10_000
S5_PROCESS_EVENTS = 100_000
BATCH = 100
#: S3 times each side reading the session this many times over (a read of 10k
#: events alone is ~0.05 s: far too short to stand above the machine's noise).
S3_PASSES = 20
#: The repetitions of a round of S1, S2 and S3 (see the module's docstring).
REPETITIONS = 5
SECTIONS = ("S1", "S2", "S3", "S5", "S5P", "batch")
#: The peers: a label, the module that must be importable, and how it appends.
PEER_MODULES = {
    "LangGraph PostgresSaver": "langgraph.checkpoint.postgres",
    "eventsourcing (PostgreSQL)": "eventsourcing.postgres",
}


def _fresh(conninfo: str, schema: str) -> None:
    """An empty store in ``schema``, its tables out of autovacuum's way (a
    worker starting during one side's run would fall on that side alone)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    from agentlog import PostgresCheckpointer

    PostgresCheckpointer(conninfo, schema=schema).close()  # the tables, empty
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for table in _tables(conn, schema):
            conn.execute(f"ALTER TABLE {schema}.{table} SET (autovacuum_enabled = off)")


def _tables(conn: Any, schema: str) -> list[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    return [str(name) for (name,) in rows.fetchall()]


def _drop(conninfo: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def settle(conninfo: str, schema: str) -> None:
    """Before a timed run: ``VACUUM (ANALYZE)`` of ``schema``'s tables (hint
    bits set, statistics fresh) and a ``CHECKPOINT`` (the dirty pages written
    now, not during the run)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        for table in _tables(conn, schema):
            conn.execute(f"VACUUM (ANALYZE) {schema}.{table}")
        conn.execute("CHECKPOINT")


def pinned(conninfo: str, synchronous_commit: str) -> str:
    """``conninfo`` with ``synchronous_commit`` set on its connections (both sides'
    alike), after whatever ``options`` it carries."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = str(conninfo_to_dict(conninfo).get("options") or "")
    setting = f"-c synchronous_commit={synchronous_commit}"
    return make_conninfo(conninfo, options=f"{options} {setting}".strip())


# -- agentlog ---------------------------------------------------------------------------


def agentlog_append(conninfo: str, schema: str, events: list[Any], batch: int) -> float:
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(conninfo, schema=schema) as log:
        # The pool connects in the background: its connection is made before
        # the clock starts, as the raw baseline's is.
        head = log.head("s")
        start = time.perf_counter()
        for i in range(0, len(events), batch):
            head = log.append("s", events[i : i + batch], expected_head=head)
        return time.perf_counter() - start


def agentlog_replay(conninfo: str, schema: str, count: int, passes: int = 1) -> float:
    """Read the ``count`` events of session ``s``, ``passes`` times over."""
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(conninfo, schema=schema) as log:
        log.head("s")  # the pool's connection, made before the clock starts
        start = time.perf_counter()
        seen = sum(1 for _ in range(passes) for _ in log.read("s"))
        elapsed = time.perf_counter() - start
    assert seen == count * passes, seen
    return elapsed


def agentlog_threads(
    conninfo: str, schema: str, events: list[Any], threads: int, notify: bool = True
) -> float:
    """S5: ``threads`` threads, one session each, one event per call, one pool."""
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(
        conninfo, schema=schema, pool_min_size=threads, pool_max_size=threads, notify=notify
    ) as log:
        return time_threads_appending(log, events, threads)


def _process_writer(
    conninfo: str, schema: str, slot: int, events: list[Any], barrier: Any, done: Any
) -> None:
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(conninfo, schema=schema, pool_min_size=1, pool_max_size=1) as log:
        log.head(f"p{slot}")  # the pool's connection is made before the clock starts
        barrier.wait()
        head = 0
        for event in events:
            head = log.append(f"p{slot}", [event], expected_head=head)
    done.put(head)


def agentlog_processes(conninfo: str, schema: str, events: list[Any], processes: int) -> float:
    """S5 across processes: each its own checkpointer and session, 1 event per call.

    The children are forked after the events are made (and before any pool
    is opened here); the clock runs from the moment all of them are
    connected and released together until the last one ends.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    share = len(events) // processes
    barrier = context.Barrier(processes + 1)
    done = context.Queue()
    children = [
        context.Process(
            target=_process_writer,
            args=(conninfo, schema, slot, events[slot * share : (slot + 1) * share], barrier, done),
        )
        for slot in range(processes)
    ]
    for child in children:
        child.start()
    barrier.wait(timeout=120)
    start = time.perf_counter()
    heads = [done.get(timeout=3600) for _ in children]
    elapsed = time.perf_counter() - start
    for child in children:
        child.join()
        assert child.exitcode == 0, child.exitcode
    assert heads == [share] * processes, heads
    return elapsed


# -- peers ----------------------------------------------------------------------------------


def _peer_schema(conninfo: str, schema: str) -> str:
    """A fresh, empty schema for a peer's own tables beside agentlog's ``schema``
    (LangGraph's would collide with agentlog's ``checkpoints``)."""
    import psycopg

    peer = f"{schema}_peer"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {peer} CASCADE")
        conn.execute(f"CREATE SCHEMA {peer}")
    return peer


def _on_schema(conninfo: str, schema: str) -> str:
    """``conninfo`` with ``schema`` first on the search path (a peer's own tables there)."""
    return f"{conninfo} options='-c search_path={schema}'"


def langgraph_append(conninfo: str, schema: str, events: list[Any], batch: int) -> float:
    """LangGraph's PostgresSaver, as ``benchmarks.systems.langgraph_append`` uses its
    SqliteSaver: one checkpoint per step, holding the whole message list."""
    from langgraph.checkpoint.postgres import PostgresSaver

    peer = _on_schema(conninfo, _peer_schema(conninfo, schema))
    with PostgresSaver.from_conn_string(peer) as saver:
        return time_langgraph_steps(saver, events, batch)


@functools.cache
def _conversation_class() -> Any:
    # eventsourcing registers an aggregate class by its topic: one class per process.
    from eventsourcing.domain import Aggregate, event

    class Conversation(Aggregate):
        @event("Appended")
        def append(self, body: dict[str, Any]) -> None:
            pass

    return Conversation


def eventsourcing_append(conninfo: str, schema: str, events: list[Any], batch: int) -> float:
    """eventsourcing's PostgreSQL recorder, as ``benchmarks.systems.eventsourcing_append``
    uses its SQLite one: an aggregate per session, saved once per call."""
    from eventsourcing.application import Application
    from psycopg.conninfo import conninfo_to_dict

    Conversation = _conversation_class()
    parts = conninfo_to_dict(conninfo)
    schema = _peer_schema(conninfo, schema)
    app = Application(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": str(parts["dbname"]),
            "POSTGRES_HOST": str(parts.get("host", "127.0.0.1")),
            "POSTGRES_PORT": str(parts.get("port", "5432")),
            "POSTGRES_USER": str(parts.get("user", "postgres")),
            "POSTGRES_PASSWORD": str(parts.get("password", "")),
            "POSTGRES_SCHEMA": schema,
        }
    )
    conversation = Conversation()
    app.save(conversation)
    start = time.perf_counter()
    for i in range(0, len(events), batch):
        for body in events[i : i + batch]:
            conversation.append(body)
        app.save(conversation)
    elapsed = time.perf_counter() - start
    app.close()
    return elapsed


def langgraph_events(count: int, batch: int) -> int:
    """How many of ``count`` events LangGraph runs on (as in ``python -m benchmarks``)."""
    from .run import Scenario
    from .run import langgraph_events as limit

    return limit(Scenario("", "", "append", count, batch=batch))


def installed(module: str) -> bool:
    """Whether a peer's module can be imported here."""
    from .systems import installed as found

    return found(module)


# -- raw psycopg ----------------------------------------------------------------------


def raw_append(conninfo: str, schema: str, events: list[Any], batch: int) -> float:
    import psycopg

    from agentlog.engine.postgres import PostgresDatabase, PostgresOptions

    database = PostgresDatabase(conninfo, options=PostgresOptions(schema=schema, pool_min_size=1))
    statement = database.q.append[False, True]
    first = database.q.append[True, True]
    channel, key = database.channel, database.notify_key("default", "s")
    database.close()
    encoded = [(event["type"], orjson.dumps(event)) for event in events]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        head = 0
        start = time.perf_counter()
        for i in range(0, len(encoded), batch):
            chunk = encoded[i : i + batch]
            params = {
                "t": "default",
                "name": "s",
                "n": len(chunk),
                "ts": time.time(),
                "exp": head,
                "types": [kind for kind, _ in chunk],
                "payloads": [payload for _, payload in chunk],
                "crcs": [checksum(payload) for _, payload in chunk],
                "channel": channel,
                "key": key,
            }
            row = conn.execute(first if head == 0 else statement, params).fetchone()
            assert row is not None
            head = row[0]
        return time.perf_counter() - start


def raw_replay(conninfo: str, schema: str, count: int, passes: int = 1) -> float:
    """Read the ``count`` events of session ``s``, ``passes`` times over."""
    import psycopg

    query = (
        f"SELECT seq, ts, type, payload FROM {schema}.events"
        " WHERE tenant = %s AND session = %s AND seq > %s ORDER BY seq LIMIT %s"
    )
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.cursor(binary=True) as cur:
        start = time.perf_counter()
        seen = 0
        for _ in range(passes):
            last = 0
            while True:
                rows = cur.execute(query, ("default", "s", last, 1000)).fetchall()
                # The events, as any reader needs them: decoded (orjson, as agentlog).
                seen += len([orjson.loads(row[3]) for row in rows])
                if len(rows) < 1000:
                    break
                last = rows[-1][0]
        elapsed = time.perf_counter() - start
    assert seen == count * passes, seen
    return elapsed


# -- how to insert a batch ----------------------------------------------------------------


def batch_methods(conninfo: str, schema: str, batches: int) -> dict[str, float]:
    """Seconds per 100-event batch, in a transaction with the head's CAS, by method."""
    import psycopg

    encoded = [(e["type"], orjson.dumps(e)) for e in workload(BATCH)]
    s = schema
    insert = f"INSERT INTO {s}.events (tenant, session, seq, ts, type, payload) VALUES "
    lock = f"SELECT head FROM {s}.sessions WHERE tenant = 'default' AND name = %s FOR UPDATE"
    move = f"UPDATE {s}.sessions SET head = %s WHERE tenant = 'default' AND name = %s"

    def executemany(cur: Any, name: str, head: int, ts: float) -> None:
        cur.executemany(
            insert + "('default', %s, %s, %s, %s, %s)",
            [(name, head + n, ts, kind, data) for n, (kind, data) in enumerate(encoded, 1)],
        )

    def copy(cur: Any, name: str, head: int, ts: float) -> None:
        with cur.copy(
            f"COPY {s}.events (tenant, session, seq, ts, type, payload) FROM STDIN (FORMAT BINARY)"
        ) as out:
            out.set_types(["text", "text", "int8", "float8", "text", "bytea"])
            for n, (kind, data) in enumerate(encoded, 1):
                out.write_row(("default", name, head + n, ts, kind, data))

    values = insert + ", ".join(["('default', %s, %s, %s, %s, %s)"] * BATCH)

    def multirow(cur: Any, name: str, head: int, ts: float) -> None:
        params: list[Any] = []
        for n, (kind, data) in enumerate(encoded, 1):
            params += [name, head + n, ts, kind, data]
        cur.execute(values, params)

    unnest = (
        f"INSERT INTO {s}.events (tenant, session, seq, ts, type, payload)"
        " SELECT 'default', %s, %s + e.ord, %s, e.type, e.payload"
        " FROM unnest(%s::text[], %s::bytea[]) WITH ORDINALITY AS e(type, payload, ord)"
    )
    # %b: the arrays in binary (psycopg's default, text, escapes each element).
    unnest_binary = unnest.replace(
        "unnest(%s::text[], %s::bytea[])", "unnest(%b::text[], %b::bytea[])"
    )

    def arrays(cur: Any, name: str, head: int, ts: float) -> None:
        cur.execute(unnest, (name, head, ts, [k for k, _ in encoded], [d for _, d in encoded]))

    def arrays_binary(cur: Any, name: str, head: int, ts: float) -> None:
        params = (name, head, ts, [k for k, _ in encoded], [d for _, d in encoded])
        cur.execute(unnest_binary, params)

    methods: dict[str, Callable[[Any, str, int, float], None]] = {
        "executemany (pipelined)": executemany,
        "COPY (binary)": copy,
        "multi-row VALUES": multirow,
        "unnest(arrays), text parameters": arrays,
        "unnest(arrays), binary parameters": arrays_binary,
    }
    from agentlog.engine.postgres import PostgresDatabase, PostgresOptions

    database = PostgresDatabase(conninfo, options=PostgresOptions(schema=schema, pool_min_size=1))
    statements = {
        True: database.q.append[True, False],  # the backend's: binary arrays
        False: database.q.append[True, False].replace("b::", "s::"),
    }
    database.close()

    def in_one_statement(binary: bool) -> Callable[[Any, str, int], int]:
        # What the backend does: the CAS and the insert in one statement, in
        # autocommit (one round trip, no BEGIN/COMMIT of its own).
        def run(conn: Any, name: str, head: int) -> int:
            params = {
                "t": "default",
                "name": name,
                "n": BATCH,
                "ts": time.time(),
                "exp": head,
                "types": [kind for kind, _ in encoded],
                "payloads": [data for _, data in encoded],
                "crcs": [checksum(data) for _, data in encoded],
            }
            return int(conn.execute(statements[binary], params).fetchone()[0])

        return run

    def in_a_transaction(method: Callable[[Any, str, int, float], None]) -> Any:
        def run(conn: Any, name: str, head: int) -> int:
            with conn.transaction(), conn.cursor() as cur:
                head = cur.execute(lock, (name,)).fetchone()[0]
                method(cur, name, head, time.time())
                cur.execute(move, (head + BATCH, name))
            return int(head + BATCH)

        return run

    runs: dict[str, Callable[[Any, str, int], int]] = {
        f"BEGIN; lock; {label}; move head; COMMIT": in_a_transaction(method)
        for label, method in methods.items()
    }
    runs["one statement: CAS + unnest, text parameters"] = in_one_statement(False)
    runs["one statement: CAS + unnest, binary parameters"] = in_one_statement(True)
    times: dict[str, list[float]] = {label: [] for label in runs}
    heads = dict.fromkeys(runs, 0)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for index in range(len(runs)):
            conn.execute(
                f"INSERT INTO {s}.sessions VALUES ('default', %s, 0, 0, 0, 0, NULL)",
                (f"method-{index}",),
            )
        # Round robin, so that the machine's moods fall on every method alike.
        for _ in range(batches):
            for index, (label, run) in enumerate(runs.items()):
                start = time.perf_counter()
                heads[label] = run(conn, f"method-{index}", heads[label])
                times[label].append(time.perf_counter() - start)
    return {label: statistics.median(values) for label, values in times.items()}


# -- the run ----------------------------------------------------------------------------


def _peers(
    conninfo: str, events: list[Any], count: int, batch: int, prefix: str, results: dict[str, Any]
) -> dict[str, tuple[int, Callable[[str], float]]]:
    """The installed peers' works for an append scenario (a row each for the others)."""
    appenders = {
        "LangGraph PostgresSaver": langgraph_append,
        "eventsourcing (PostgreSQL)": eventsourcing_append,
    }
    works: dict[str, tuple[int, Callable[[str], float]]] = {}
    for label, module in PEER_MODULES.items():
        if not installed(module):
            results[f"{prefix} {label}"] = "not installed"
            print(f'  {prefix} {label:<33} not installed (pip install -e ".[bench,postgres]")')
            continue
        n = langgraph_events(count, batch) if label.startswith("LangGraph") else count
        append = appenders[label]
        works[f"{prefix} {label}"] = (
            n,
            lambda sc, a=append, n=n: a(conninfo, sc, events[:n], batch),
        )
    return works


#: A timed run of one side in a round: given the repetition's index, its seconds.
Timed = Callable[[int], float]


def paired(
    prefix: str,
    labels: tuple[str, str],
    count: int,
    rounds: int,
    repetitions: int,
    round_works: Callable[[int], tuple[Timed, Timed]],
    results: dict[str, Any],
) -> None:
    """S1, S2 or S3, round by round, as the module's docstring says: each round
    ``round_works(round)`` makes raw psycopg's and agentlog's timed runs (each
    preparing its own conditions before its clock starts), which run
    ``repetitions`` times, back to back, in alternating order. ``count``: the
    events of one timed run. Prints and keeps each side's median rate, each
    round's rate, and the ratio agentlog / raw per round and over the rounds."""
    raw_label, agentlog_label = labels
    rates: dict[str, list[float]] = {raw_label: [], agentlog_label: []}
    ratios: list[float] = []
    for n in range(rounds):
        raw, agentlog = round_works(n)
        pair_rates: dict[str, list[float]] = {raw_label: [], agentlog_label: []}
        pair_ratios = []
        for k in range(repetitions):
            order = [(raw_label, raw), (agentlog_label, agentlog)]
            if k % 2:
                order.reverse()
            for label, work in order:
                pair_rates[label].append(count / work(k))
            pair_ratios.append(pair_rates[agentlog_label][-1] / pair_rates[raw_label][-1])
        for label, values in pair_rates.items():
            rates[label].append(statistics.median(values))
        ratios.append(statistics.median(pair_ratios))
    for label, values in rates.items():
        results[label] = statistics.median(values)
        # Each round's rate too: a ratio between two rows is per round (same round, same mood).
        each = ", ".join(f"{rate:,.0f}" for rate in values)
        print(f"  {label:<36} {results[label]:>12,.0f} events/s  [{each}]", flush=True)
    results[f"{prefix} agentlog / raw"] = statistics.median(ratios)
    results[f"{prefix} agentlog / raw, per round"] = ratios
    each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    label = f"{prefix} agentlog / raw"
    print(f"  {label:<36} {statistics.median(ratios):>12.2f}           [{each}]", flush=True)


_schemas = itertools.count()


def _appending(conninfo: str, events: list[Any], batch: int) -> tuple[Timed, Timed]:
    """S1 or S2's two timed runs: each on a fresh, settled schema of its own."""

    def side(append: Callable[[str, str, list[Any], int], float]) -> Timed:
        def work(_: int) -> float:
            schema = f"bench_pair_{next(_schemas)}"
            _fresh(conninfo, schema)
            settle(conninfo, schema)
            try:
                return append(conninfo, schema, events, batch)
            finally:
                _drop(conninfo, schema)

        return work

    return side(raw_append), side(agentlog_append)


def _replaying(conninfo: str, events: list[Any], passes: int) -> tuple[Timed, Timed]:
    """S3's two timed runs in a round: one session, loaded and settled once,
    read untimed once by each side, then timed reading it ``passes`` times."""
    schema = f"bench_pair_{next(_schemas)}"
    _fresh(conninfo, schema)
    agentlog_append(conninfo, schema, events, 1000)
    settle(conninfo, schema)
    count = len(events)
    raw_replay(conninfo, schema, count)  # the same warm cache for both
    agentlog_replay(conninfo, schema, count)
    return (
        lambda _: raw_replay(conninfo, schema, count, passes),
        lambda _: agentlog_replay(conninfo, schema, count, passes),
    )


def run(
    conninfo: str,
    rounds: int,
    quick: bool,
    only: tuple[str, ...] = SECTIONS,
    repetitions: int = REPETITIONS,
) -> dict[str, Any]:
    s1 = S1_EVENTS // (10 if quick else 1)
    s2 = S2_EVENTS // (10 if quick else 1)
    s3 = S3_EVENTS // (10 if quick else 1)
    s5p = S5_PROCESS_EVENTS // (10 if quick else 1)
    events = workload(max(s1, s2, s3, s5p))
    results: dict[str, Any] = {}

    def interleaved(count: int, works: dict[str, Any]) -> None:
        # Round by round, each system in turn: the machine's moods fall on all alike.
        # A work is a callable, or (events it runs on, callable).
        sized = {
            label: work if isinstance(work, tuple) else (count, work)
            for label, work in works.items()
        }
        rates: dict[str, list[float]] = {label: [] for label in works}
        failed: dict[str, str] = {}
        for n in range(rounds):
            for label, (events_run, work) in sized.items():
                if label in failed:
                    continue
                schema = f"bench_{len(results)}_{len(rates[label])}_{n}"
                _fresh(conninfo, schema)
                try:
                    rates[label].append(events_run / work(schema))
                except Exception as exc:
                    # A peer that fails is a row saying why; agentlog's own failures stop the run.
                    if not any(peer in label for peer in PEER_MODULES):
                        raise
                    failed[label] = f"failed: {type(exc).__name__}: {exc}".splitlines()[0]
        for label, (events_run, _) in sized.items():
            if label in failed:
                results[label] = failed[label]
                print(f"  {label:<36} {failed[label]}", flush=True)
                continue
            results[label] = statistics.median(rates[label])
            note = f"  (the first {events_run:,} events)" if events_run < count else ""
            # Each round's rate too: a ratio between two rows is per round (same round, same mood).
            each = ", ".join(f"{rate:,.0f}" for rate in rates[label])
            print(f"  {label:<36} {results[label]:>12,.0f} events/s{note}  [{each}]", flush=True)

    for prefix, count, batch in (("S1", s1, 1), ("S2", s2, BATCH)):
        if prefix not in only:
            continue
        print(f"{prefix} append {batch}/call, {count:,} ({repetitions} repetitions a round)")
        chunk = events[:count]
        paired(
            prefix,
            (f"{prefix} raw psycopg", f"{prefix} agentlog"),
            count,
            rounds,
            repetitions,
            lambda _, c=chunk, b=batch: _appending(conninfo, c, b),
            results,
        )
        peers = _peers(conninfo, events, count, batch, prefix, results)
        if peers:
            interleaved(count, peers)
    if "S3" in only:
        print(f"S3 replay {s3:,}, {S3_PASSES} times a run ({repetitions} repetitions a round)")
        paired(
            "S3",
            ("S3 raw psycopg (decoded)", "S3 agentlog (to StoredEvent)"),
            s3 * S3_PASSES,
            rounds,
            repetitions,
            lambda _: _replaying(conninfo, events[:s3], S3_PASSES),
            results,
        )
    if "S5" in only:
        print(f"S5 threads x 1 event/call, one session each, {s1:,} in all")
        interleaved(
            s1,
            {
                f"S5 {threads} thread(s), {'NOTIFY' if notify else 'notify=False'}": (
                    lambda sc, t=threads, n=notify: agentlog_threads(
                        conninfo, sc, events[:s1], t, n
                    )
                )
                for threads in (1, 4, 8)
                for notify in (True, False)
            },
        )
    if "S5P" in only:
        print(f"S5 processes x 1 event/call, a checkpointer and a session each, {s5p:,} in all")
        interleaved(
            s5p,
            {
                f"S5 {procs} process(es)": (
                    lambda sc, p=procs: agentlog_processes(conninfo, sc, events[:s5p], p)
                )
                for procs in (1, 8)
            },
        )
    if "batch" not in only:
        return results
    print(f"one {BATCH}-event batch with the head's CAS, by insert method")
    schema = "bench_batch"
    _fresh(conninfo, schema)
    per_batch = batch_methods(conninfo, schema, 30 if quick else 200)
    for label, seconds in per_batch.items():
        print(f"  {label:<36} {seconds * 1000:>9.2f} ms/batch", flush=True)
    results["batch_ms"] = {label: seconds * 1000 for label, seconds in per_batch.items()}
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conninfo", help="the server to measure (default: start a throwaway one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--repetitions",
        type=int,
        default=REPETITIONS,
        help=f"S1, S2 and S3: the back-to-back pairs of a round (default: {REPETITIONS})",
    )
    parser.add_argument(
        "--synchronous-commit",
        default="off",
        choices=("on", "off", "local", "remote_write", "remote_apply"),
        help="set on every connection of both sides (default: off)",
    )
    parser.add_argument("--quick", action="store_true", help="a tenth of the events, one round")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"the sections to run, comma-separated (default: {','.join(SECTIONS)})",
    )
    args = parser.parse_args(argv)
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}: choose from {', '.join(SECTIONS)}")
    rounds = 1 if args.quick else args.rounds
    repetitions = 1 if args.quick else args.repetitions
    if rounds < 1 or repetitions < 1:
        parser.error("--rounds and --repetitions must be at least 1")
    server = None
    conninfo = args.conninfo
    if not conninfo:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.postgres_server import PostgresServer

        server = PostgresServer().start()
        conninfo = server.conninfo
        print("a throwaway server on loopback (fsync=off)")
    try:
        import psycopg

        conninfo = pinned(conninfo, args.synchronous_commit)
        with psycopg.connect(conninfo) as conn:
            print(f"PostgreSQL {conn.info.server_version}, psycopg {psycopg.__version__}", end="")
            setting = conn.execute("SHOW synchronous_commit").fetchone()
            print(f", synchronous_commit={setting[0] if setting else '?'} on both sides")
        results = run(conninfo, rounds, args.quick, only, repetitions)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
