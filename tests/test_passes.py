"""Every test module is in a pass of ``scripts/test`` (tests/passes.py), and the
passes name only what exists."""

from __future__ import annotations

import subprocess
import sys

from . import passes


def test_every_module_is_in_exactly_one_of_pure_and_once() -> None:
    undecided = [m for m in passes.modules() if not passes.covers(passes.PURE + passes.ONCE, m)]
    assert not undecided, (
        f"add each to PURE or ONCE in tests/passes.py (does it depend on the engine?): {undecided}"
    )
    both = [
        m
        for m in passes.modules()
        if passes.covers(passes.PURE, m) and passes.covers(passes.ONCE, m)
    ]
    assert not both, f"in PURE and ONCE at once: {both}"


def test_every_entry_of_every_pass_exists() -> None:
    for name, entries in passes.PASSES.items():
        for entry in entries:
            assert (passes.ROOT / entry).exists(), f"{name} names {entry}, which is not there"
        assert len(set(entries)) == len(entries), f"{name} names an entry twice"


def test_the_pure_pass_leaves_out_what_never_touches_the_engine() -> None:
    # The point of the split: PostgreSQL, the viewer and the docs run once.
    for module in ("tests/log/test_postgres.py", "tests/serve/test_api.py", "tests/test_docs.py"):
        assert not passes.covers(passes.PURE, module)
    assert passes.covers(passes.PURE, "tests/log/test_sqlite.py")


def test_the_script_prints_a_pass_and_refuses_an_unknown_one() -> None:
    script = str(passes.TESTS / "passes.py")
    out = subprocess.run(
        [sys.executable, script, "pure"], capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines() == [str(passes.ROOT / entry) for entry in passes.PURE]
    asan = subprocess.run([sys.executable, script, "asan"], capture_output=True, text=True)
    assert asan.stdout.splitlines()[-2:] == ["-k", passes.ASAN_SELECT]
    refused = subprocess.run([sys.executable, script, "nope"], capture_output=True, text=True)
    assert refused.returncode != 0 and "usage" in refused.stderr
