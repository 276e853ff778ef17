"""What the framework migration tests check of a rerun and of a refused source."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlog.cli import main
from agentlog.migrate import migrate

from ..conftest import digest


def assert_rerun_skips(source: Path, target: Path, units: int) -> None:
    """Migrating ``source`` into ``target`` a second time migrates nothing
    and skips each of its ``units``."""
    migrate(source, target)
    again = migrate(source, target)
    assert (again.migrated, again.skipped) == (0, units)


def assert_refused(
    capsys: pytest.CaptureFixture[str],
    source: Path,
    target: Path,
    kind: str | None,
    message: str,
) -> None:
    """``agentlog migrate SOURCE TARGET [--from KIND]`` fails in one line on
    stderr saying ``message``; the target is not made and the source is
    left byte for byte as it was."""
    before = digest(source)
    args = ["migrate", str(source), str(target), *(["--from", kind] if kind else [])]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not target.exists()
    assert digest(source) == before
