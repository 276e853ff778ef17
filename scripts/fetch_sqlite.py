"""Fetch the pinned SQLite amalgamation and verify it against csrc/sqlite/checksums.

    python scripts/fetch_sqlite.py [--source pypi|official] [--dest DIR]

The amalgamation is a dependency, never committed. Two sources carry the same
unmodified files:

* ``pypi`` (default): the sdist of ``sqlean-py==3.50.4.5``, which ships the
  3.50.4 amalgamation under ``sqlite/`` (with a few lines of its own appended
  after the amalgamation's end marker, which are cut off here); fetched with
  pip, so it works wherever PyPI is reachable.
* ``official``: the amalgamation zip from the SQLite project, for release
  builds on machines that reach it.

Whatever the source, every file is checked for its length, SHA-256 and
SHA3-256 before it is written to DEST (default ``csrc/sqlite``, beside the
committed checksums; ``sqlite3.c`` and ``sqlite3.h`` are git-ignored there); a
file without an entry in the checksums file, or one that does not match, aborts.
setup.py runs this for a build from a checkout, and cibuildwheel before each
build (``before-build`` in pyproject.toml).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKSUMS = ROOT / "csrc" / "sqlite" / "checksums"
DEFAULT_DEST = ROOT / "csrc" / "sqlite"
PYPI_PIN = "sqlean-py==3.50.4.5"
OFFICIAL_URL = "https://www.sqlite.org/2025/sqlite-amalgamation-3500400.zip"
FILES = ("sqlite3.c", "sqlite3.h")
END_MARKER = b"/************************** End of sqlite3.c ******************************/\n"


class VerificationError(Exception):
    """A fetched file is missing, unlisted, or differs from its checksum."""


def expected_checksums() -> dict[str, tuple[int, str, str]]:
    """``{file: (length, sha256, sha3_256)}`` from csrc/sqlite/checksums."""
    entries = {}
    for line in CHECKSUMS.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0].endswith((".c", ".h")):
            entries[parts[0]] = (int(parts[1]), parts[2], parts[3])
    return entries


def verify(name: str, data: bytes) -> None:
    """Raise unless ``data`` is exactly the pinned ``name``."""
    entry = expected_checksums().get(name)
    if entry is None:
        raise VerificationError(f"{name} has no entry in {CHECKSUMS.name}")
    length, sha256, sha3 = entry
    if len(data) != length:
        raise VerificationError(f"{name}: length {len(data)}, expected {length}")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise VerificationError(f"{name}: SHA-256 mismatch")
    if hashlib.sha3_256(data).hexdigest() != sha3:
        raise VerificationError(f"{name}: SHA3-256 mismatch")


def is_verified(directory: Path) -> bool:
    """Whether ``directory`` holds the pinned, unmodified amalgamation."""
    try:
        for name in FILES:
            verify(name, (directory / name).read_bytes())
    except (OSError, VerificationError):
        return False
    return True


def from_pypi() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", "-d", tmp, PYPI_PIN],
            check=True,
        )  # fmt: skip
        (archive,) = Path(tmp).glob("*.tar.gz")
        found = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if len(parts) == 3 and parts[1] == "sqlite" and parts[2] in FILES:
                    handle = tar.extractfile(member)
                    assert handle is not None
                    found[parts[2]] = handle.read()
    source = found.get("sqlite3.c", b"")
    if END_MARKER in source:
        found["sqlite3.c"] = source[: source.index(END_MARKER) + len(END_MARKER)]
    return found


def from_official() -> dict[str, bytes]:
    with urllib.request.urlopen(OFFICIAL_URL, timeout=120) as response:
        archive = zipfile.ZipFile(io.BytesIO(response.read()))
    return {
        Path(name).name: archive.read(name)
        for name in archive.namelist()
        if Path(name).name in FILES
    }


def fetch(dest: Path = DEFAULT_DEST, source: str = "pypi") -> Path:
    """Fetch, verify and write the amalgamation into ``dest``; return ``dest``."""
    if is_verified(dest):
        return dest
    files = from_pypi() if source == "pypi" else from_official()
    for name in FILES:
        if name not in files:
            raise VerificationError(f"{name} is not in the {source} download")
        verify(name, files[name])
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        (dest / name).write_bytes(files[name])
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("pypi", "official"), default="pypi")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args()
    try:
        print(f"verified SQLite amalgamation in {fetch(args.dest, args.source)}")
    except (OSError, subprocess.CalledProcessError, VerificationError) as exc:
        sys.exit(f"fetch_sqlite: {exc}")


if __name__ == "__main__":
    main()
