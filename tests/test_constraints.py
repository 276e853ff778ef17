"""pyproject.toml's extras and the constraints files stay in step.

Every extra but ``bench`` (the benchmark's peers) states a range,
``>=oldest,<next``, never an exact pin. Each framework extra (see
scripts/framework_extras.py) has both ends pinned: constraints/oldest.txt pins
each of its requirements at the range's floor, constraints/newest.txt inside
the range (one pin for this Python, where markers split it), and scripts/test
runs the adapters' tests at each end.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .conftest import TESTS_DIR

ROOT = TESTS_DIR.parent
CONSTRAINTS = ROOT / "constraints"
#: Exact pins are for the benchmark's peers only.
PINNED_EXTRAS = {"bench"}


def scripts_module(name: str) -> ModuleType:
    """A module of scripts/ (not a package), loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


extras_script = scripts_module("framework_extras")


def end(name: str) -> list[Requirement]:
    if not (CONSTRAINTS / name).exists():
        pytest.skip("the constraints files are not beside the tests")
    pins: list[Requirement] = extras_script.pins(CONSTRAINTS / name)
    return pins


def extras() -> dict[str, list[Requirement]]:
    from .test_compatibility_doc import project

    _, _, found = project()
    return {name: [Requirement(text) for text in texts] for name, texts in found.items()}


def floor(requirement: Requirement) -> Version:
    lower = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    assert len(lower) == 1, f"{requirement}: no single >= floor"
    return lower[0]


def pins_of(pins: list[Requirement], requirement: Requirement) -> list[Requirement]:
    name = canonicalize_name(requirement.name)
    return [pin for pin in pins if canonicalize_name(pin.name) == name]


def pinned_version(pin: Requirement) -> Version:
    assert extras_script.is_exact(pin) and len(pin.specifier) == 1, f"{pin}: not an exact pin"
    return Version(next(iter(pin.specifier)).version)


def frameworks() -> dict[str, list[Requirement]]:
    found = extras_script.framework_extras(
        {name: [str(r) for r in reqs] for name, reqs in extras().items()}, end("oldest.txt")
    )
    return {name: extras()[name] for name in found}


def test_no_extra_but_bench_pins_and_each_states_a_range() -> None:
    for name, requirements in extras().items():
        if name in PINNED_EXTRAS:
            continue
        for requirement in requirements:
            assert not extras_script.is_exact(requirement), f"[{name}] pins {requirement}"
            operators = sorted(s.operator for s in requirement.specifier)
            assert operators == ["<", ">="], f"[{name}] {requirement}: not >=oldest,<next"


def test_the_frameworks_are_the_adapters_extras() -> None:
    assert {"openai-agents", "langgraph", "postgres"} <= set(frameworks())


def test_the_oldest_end_pins_each_framework_at_its_floor() -> None:
    oldest = end("oldest.txt")
    for name, requirements in frameworks().items():
        for requirement in requirements:
            pins = pins_of(oldest, requirement)
            assert len(pins) == 1, f"[{name}] {requirement.name}: not pinned once in oldest.txt"
            assert pins[0].marker is None, f"{pins[0]}: the floor is every Python's"
            assert pinned_version(pins[0]) == floor(requirement), f"[{name}] {pins[0]}"


def test_the_newest_end_pins_each_framework_inside_its_range() -> None:
    newest = end("newest.txt")
    for name, requirements in frameworks().items():
        for requirement in requirements:
            pins = pins_of(newest, requirement)
            assert pins, f"[{name}] {requirement.name}: not pinned in newest.txt"
            for pin in pins:
                assert requirement.specifier.contains(pinned_version(pin)), f"[{name}] {pin}"
            here = [pin for pin in pins if pin.marker is None or pin.marker.evaluate()]
            assert len(here) == 1, f"[{name}] {requirement.name}: {len(here)} pins for this Python"


def test_the_test_extras_framework_packages_are_pinned_at_both_ends() -> None:
    """A framework package the test extra names (PostgresSaver, which writes a
    migration's source) is pinned at its floor and inside its range, as a
    framework extra's are, so each end of the adapters' tests runs it."""
    oldest, newest = end("oldest.txt"), end("newest.txt")
    names = {canonicalize_name(pin.name) for pin in oldest}
    peers = [r for r in extras()["test"] if canonicalize_name(r.name) in names]
    assert any(canonicalize_name(r.name) == "langgraph-checkpoint-postgres" for r in peers)
    for requirement in peers:
        (low,) = pins_of(oldest, requirement)
        assert pinned_version(low) == floor(requirement), f"[test] {low}"
        here = [p for p in pins_of(newest, requirement) if p.marker is None or p.marker.evaluate()]
        assert len(here) == 1, f"[test] {requirement.name}: not pinned once in newest.txt"
        assert requirement.specifier.contains(pinned_version(here[0])), f"[test] {here[0]}"


def test_every_pin_is_exact_and_a_constrained_extra_requirement_is_in_range() -> None:
    requirements = [r for name, reqs in extras().items() if name not in PINNED_EXTRAS for r in reqs]
    for file in ("oldest.txt", "newest.txt"):
        for pin in end(file):
            assert not pin.extras, f"{file}: {pin}: pip refuses extras in a constraint"
            version = pinned_version(pin)
            for requirement in pins_of(requirements, pin):
                assert requirement.specifier.contains(version), f"{file}: {pin} vs {requirement}"


def test_a_pinned_extra_or_a_missing_end_is_caught() -> None:
    """The checks above fail on what they are for: an extra pinned again, a
    framework without an end."""
    pinned = {"langgraph": ["langgraph==1.2.24"], "postgres": ["psycopg>=3.2.2,<4"]}
    oldest = [Requirement("langgraph==1.2.0")]
    assert extras_script.framework_extras(pinned, oldest) == []  # an exact pin is no framework
    tools = {"test": ["pytest>=8,<10", "langgraph>=1.2,<2"]}
    assert extras_script.framework_extras(tools, oldest) == []  # nor is the test tools' extra
    assert extras_script.is_exact(Requirement("langgraph==1.2.24"))
    assert not extras_script.is_exact(Requirement("langgraph==1.2.*"))
    assert not pins_of(oldest, Requirement("psycopg>=3.2.2,<4"))
