"""Print the framework extras of the installed agentlog, comma-separated.

A framework extra is one whose requirements are ranges (no exact pin: that is
the bench extra) and that requires a package constraints/oldest.txt pins. These
are the extras scripts/test installs at the oldest end of their ranges, and
those tests/test_constraints.py checks both ends of. Usage:
``python scripts/framework_extras.py constraints/oldest.txt``.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def pins(path: Path) -> list[Requirement]:
    """The requirements of a constraints file, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def is_exact(requirement: Requirement) -> bool:
    """Whether ``requirement`` pins one version (``==`` without a wildcard, or ``===``)."""
    return any(
        spec.operator == "===" or (spec.operator == "==" and not spec.version.endswith(".*"))
        for spec in requirement.specifier
    )


#: The test tools' extra: installed at both ends anyway, so never a framework
#: extra, even where it names a framework's package (tests/test_constraints.py
#: checks those at both ends too).
TEST_EXTRA = "test"


def framework_extras(
    extras: Mapping[str, Sequence[str]], oldest: Sequence[Requirement]
) -> list[str]:
    """The extras (of ``extras``, name to requirements) that are framework extras."""
    pinned = {canonicalize_name(pin.name) for pin in oldest}
    found = []
    for name, texts in extras.items():
        if name == TEST_EXTRA:
            continue
        requirements = [Requirement(text) for text in texts]
        if any(is_exact(r) for r in requirements):
            continue
        if any(canonicalize_name(r.name) in pinned for r in requirements):
            found.append(name)
    return sorted(found)


def installed_requirements(
    distribution: str = "agentlog",
) -> tuple[list[str], dict[str, list[str]]]:
    """An installed distribution's requirements: ``(its own, its extras' by extra name)``
    (markers dropped), as its metadata states them (which a build writes from
    pyproject.toml)."""
    base: list[str] = []
    extras: dict[str, list[str]] = {
        name: []
        for name in importlib.metadata.metadata(distribution).get_all("Provides-Extra") or []
    }
    for text in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(text)
        extra = re.search(r'extra == "([^"]+)"', str(requirement.marker or ""))
        requirement.marker = None
        (extras.setdefault(extra[1], []) if extra else base).append(str(requirement))
    return base, extras


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: framework_extras.py CONSTRAINTS_FILE", file=sys.stderr)
        return 2
    _, extras = installed_requirements()
    print(",".join(framework_extras(extras, pins(Path(argv[0])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
