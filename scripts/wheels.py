"""Build agentlog's Linux wheels from its sdist, check them, and test them.

Run through ``scripts/build_wheels``, which first installs the pinned toolchain
(``scripts/wheel-constraints.txt``) into a virtual environment of its own and
runs this file with that environment's Python: the CPython each wheel is built
for (3.11 here; the aarch64 tests need 3.11, the version Debian's arm64
archive has).

Each target is compiled by ``zig cc`` against the oldest C library the wheel's
policy allows (glibc 2.17 for ``manylinux_2_17``, musl 1.2 for
``musllinux_1_2``), so no container is needed; a cross target (aarch64, musl)
gets its extension suffix and platform from setuptools' cross-compiling
switches (``SETUPTOOLS_EXT_SUFFIX``, ``_PYTHON_HOST_PLATFORM``) and, for
aarch64, the ``pyconfig.h`` of Debian's arm64 CPython 3.11. ``auditwheel
repair`` gives each wheel its final tag, and then every wheel is checked here:
the tag auditwheel reports, the one extension module's architecture, the
shared libraries it needs (the C library only), the glibc symbol versions it
asks for, no run path, and the symbols it exports (``PyInit_cengine`` only: no
``sqlite3_*``). ``AGENTLOG_REQUIRE_EXTENSIONS=1`` makes a wheel without the C
engine impossible: its build fails.

Testing: the x86_64 glibc wheel is installed into a fresh virtual environment
and the engine tests and the shipped conformance suites run against it; the
aarch64 one the same, under QEMU user-mode emulation with Debian's arm64
CPython 3.11 (``--no-test`` skips both; ``scripts/test`` runs the whole suite
against the x86_64 wheel itself). No musl CPython can be had from the
registries this project reaches, so the musl wheel is built and checked only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

ROOT = Path(__file__).resolve().parents[1]
PY = f"{sys.version_info.major}{sys.version_info.minor}"
PY_DOTTED = f"{sys.version_info.major}.{sys.version_info.minor}"

#: The tests an emulated wheel runs: the engine tests, the shipped conformance
#: suites on every backend that needs no server, and what the wheel holds.
TESTS = [
    "tests/engine",
    "tests/log/test_sqlite.py",
    "tests/log/test_file.py",
    "tests/log/test_memory.py",
    "tests/stores",
    "tests/test_packaging.py",
]

#: Debian's arm64 packages that make an aarch64 CPython (with the standard
#: library's extension modules) and its headers, unpacked into a sysroot.
ARM64_PACKAGES = [
    "libc6", "libgcc-s1", "gcc-12-base", "libbz2-1.0", "libcrypt1", "libdb5.3",
    "libexpat1", "libffi8", "liblzma5", "libmd0", "libncursesw6", "libnsl2",
    "libtirpc3", "libgssapi-krb5-2", "libk5crypto3", "libkeyutils1", "libkrb5-3",
    "libkrb5support0", "libcom-err2", "libreadline8", "libsqlite3-0", "libssl3",
    "libtinfo6", "libuuid1", "zlib1g", "libzstd1", f"libpython{PY_DOTTED}-minimal",
    f"libpython{PY_DOTTED}-stdlib", f"python{PY_DOTTED}-minimal", f"libpython{PY_DOTTED}-dev",
]  # fmt: skip


@dataclass(frozen=True)
class Target:
    """One wheel this script builds."""

    name: str
    zig: str  #: zig's target triple, with the C library's version
    platform: str  #: the platform setuptools tags the unrepaired wheel with
    multiarch: str  #: the interpreter's multiarch name, in the extension suffix
    policy: str  #: the tag auditwheel must report and repair to
    machine: str  #: the ELF machine of the extension
    libraries: frozenset[str]  #: every shared library the extension may need
    glibc: tuple[int, int] | None  #: the newest GLIBC_ symbol version allowed
    pip_platform: str  #: pip's --platform for the test environment's packages
    musl_libc: str = ""  #: the musl C library's name on a musl distribution

    @property
    def native(self) -> bool:
        return self.multiarch == sysconfig.get_config_var("MULTIARCH")


GLIBC_LIBRARIES = frozenset({"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2"})
TARGETS = {
    target.name: target
    for target in (
        Target(
            "manylinux_x86_64", "x86_64-linux-gnu.2.17", "linux-x86_64", "x86_64-linux-gnu",
            "manylinux_2_17_x86_64", "EM_X86_64", GLIBC_LIBRARIES, (2, 17),
            "manylinux2014_x86_64",
        ),
        Target(
            "manylinux_aarch64", "aarch64-linux-gnu.2.17", "linux-aarch64", "aarch64-linux-gnu",
            "manylinux_2_17_aarch64", "EM_AARCH64", GLIBC_LIBRARIES, (2, 17),
            "manylinux2014_aarch64",
        ),
        Target(
            "musllinux_x86_64", "x86_64-linux-musl", "linux-x86_64", "x86_64-linux-musl",
            "musllinux_1_2_x86_64", "EM_X86_64", frozenset({"libc.musl-x86_64.so.1"}), None,
            "musllinux_1_2_x86_64", "libc.musl-x86_64.so.1",
        ),
    )
}  # fmt: skip


class WheelError(Exception):
    """A wheel that could not be built, or that fails a check."""


def say(text: str) -> None:
    print(f"build_wheels: {text}", flush=True)


def run(command: list[str], **kwargs: object) -> None:
    say("$ " + " ".join(command))
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def zig_cc(target: Target, tools: Path) -> Path:
    """A ``cc`` that is ``zig cc`` for the target: setuptools takes one command."""
    path = tools / f"cc-{target.zig}"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang cc -target {target.zig} "$@"\n')
    path.chmod(0o755)
    return path


def arm64_sysroot(work: Path) -> Path:
    """Debian's arm64 CPython, unpacked (not installed) into ``work/sysroot``."""
    sysroot = work / "sysroot"
    if (sysroot / "usr" / "bin" / f"python{PY_DOTTED}").exists():
        return sysroot
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    run(["apt-get", "download", *(f"{name}:arm64" for name in ARM64_PACKAGES)], cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(sysroot)], check=True)
    return sysroot


def arm64_headers(work: Path) -> Path:
    """Debian's arm64 Python headers, with its aarch64 ``pyconfig.h`` in place of
    the multiarch dispatcher (which would pick the build machine's)."""
    sysroot = arm64_sysroot(work)
    headers = work / "arm64-include"
    if not headers.exists():
        shutil.copytree(sysroot / "usr" / "include" / f"python{PY_DOTTED}", headers)
        real = sysroot / "usr" / "include" / "aarch64-linux-gnu" / f"python{PY_DOTTED}"
        shutil.copy(real / "pyconfig.h", headers / "pyconfig.h")
    return headers


def unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (source,) = into.iterdir()
    return source


def build(target: Target, sdist: Path, work: Path, out: Path) -> Path:
    """Build, repair and check ``target``'s wheel from ``sdist``; its path in ``out``."""
    here = work / target.name
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    source = unpack(sdist, here / "source")
    cc = zig_cc(target, here)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTLOG_", "CFLAGS", "LDFLAGS"))
    }
    env.update(
        AGENTLOG_REQUIRE_EXTENSIONS="1",  # a wheel without the C engine fails its build
        AGENTLOG_NO_TTY_NOTICES="1",
        CC=str(cc),
        # No run path into this machine's Python, no debug information.
        LDSHARED=f"{cc} -shared -s",
        SETUPTOOLS_EXT_SUFFIX=f".cpython-{PY}-{target.multiarch}.so",
        _PYTHON_HOST_PLATFORM=target.platform,
    )
    if target.machine == "EM_AARCH64":
        env["CFLAGS"] = f"-I{arm64_headers(work)}"
    raw = here / "raw"
    run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(raw), "."],
        cwd=source,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    (unrepaired,) = raw.glob("*.whl")
    if target.musl_libc:
        musl_soname(unrepaired, target.musl_libc)
    repaired = here / "repaired"
    # "auto": auditwheel's --plat offers this machine's architecture only; the
    # tag it chooses (the wheel's own policy) is checked below.
    run(
        [sys.executable, "-m", "auditwheel", "repair", "--only-plat", "--plat", "auto",
         "--wheel-dir", str(repaired), str(unrepaired)],
    )  # fmt: skip
    (wheel,) = repaired.glob("*.whl")
    check(target, wheel)
    out.mkdir(parents=True, exist_ok=True)
    final = out / wheel.name
    shutil.copy(wheel, final)
    return final


@dataclass(frozen=True)
class Facts:
    """What an extension module's ELF says about itself."""

    machine: str
    needed: list[str]  #: DT_NEEDED: the shared libraries it loads
    paths: list[str]  #: DT_RPATH and DT_RUNPATH
    exported: list[str]  #: the defined, visible dynamic symbols
    glibc: tuple[int, ...] | None  #: the newest GLIBC_ version it asks for


def musl_soname(wheel: Path, soname: str) -> None:
    """Make the extension in ``wheel`` need musl's C library by the name a musl
    distribution's toolchain gives it (and the musllinux policy allows), not
    zig's ``libc.so``; the wheel's RECORD is rewritten to match."""
    with zipfile.ZipFile(wheel) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    (name,) = [n for n in members if n.endswith(".so")]
    with tempfile.TemporaryDirectory() as temporary:
        module = Path(temporary) / "module.so"
        module.write_bytes(members[name])
        run(["patchelf", "--replace-needed", "libc.so", soname, str(module)])
        members[name] = module.read_bytes()
    (record,) = [n for n in members if n.endswith(".dist-info/RECORD")]
    lines = []
    for line in members[record].decode().splitlines():
        path = line.split(",")[0]
        if path == name:
            digest = base64.urlsafe_b64encode(hashlib.sha256(members[name]).digest())
            line = f"{path},sha256={digest.rstrip(b'=').decode()},{len(members[name])}"
        lines.append(line)
    members[record] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)


def extension_facts(data: bytes) -> Facts:
    """The :class:`Facts` of the extension module ``data``."""
    elf = ELFFile(io.BytesIO(data))
    needed: list[str] = []
    paths: list[str] = []
    exported: set[str] = set()
    glibc: list[tuple[int, ...]] = []
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                    paths.append(getattr(tag, "rpath", "") or getattr(tag, "runpath", ""))
        elif isinstance(section, GNUVerNeedSection):
            for _, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    match = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", aux.name)
                    if match:
                        glibc.append(tuple(int(p) for p in match.group(1).split(".")))
    dynsym = elf.get_section_by_name(".dynsym")
    for symbol in dynsym.iter_symbols() if dynsym is not None else ():
        defined = symbol["st_shndx"] != "SHN_UNDEF"
        visible = symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        if defined and visible and symbol.name:
            exported.add(symbol.name)
    return Facts(
        elf["e_machine"], sorted(needed), paths, sorted(exported), max(glibc, default=None)
    )


def check(target: Target, wheel: Path) -> None:
    """Every check a wheel must pass; :class:`WheelError` names the first it fails."""
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    reported = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s*"([^"]+)"', show)
    if reported is None or reported.group(1) != target.policy:
        raise WheelError(
            f"{wheel.name}: auditwheel reports {reported and reported.group(1)}\n{show}"
        )
    platforms = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    if not wheel.name.startswith("agentlog-") or target.policy not in platforms:
        raise WheelError(f"{wheel.name}: not tagged {target.policy}")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        modules = [
            n for n in names if n.startswith("agentlog/engine/cengine") and n.endswith(".so")
        ]
        expected = f"agentlog/engine/cengine.cpython-{PY}-{target.multiarch}.so"
        if modules != [expected]:
            raise WheelError(f"{wheel.name}: its C engine is {modules}, not [{expected}]")
        if [n for n in names if n.endswith(".so") and n != expected]:
            raise WheelError(f"{wheel.name}: carries other shared objects: {names}")
        facts = extension_facts(archive.read(expected))
    problems = []
    if facts.machine != target.machine:
        problems.append(f"built for {facts.machine}, not {target.machine}")
    if not set(facts.needed) <= target.libraries:
        problems.append(f"needs {facts.needed}; only {sorted(target.libraries)} may be")
    if facts.paths:
        problems.append(f"has a run path {facts.paths}")
    if facts.exported != ["PyInit_cengine"]:
        problems.append(f"exports {facts.exported}, not PyInit_cengine alone")
    if facts.glibc is not None and (target.glibc is None or facts.glibc > target.glibc):
        problems.append(f"asks for GLIBC_{'.'.join(map(str, facts.glibc))}")
    if problems:
        raise WheelError(f"{wheel.name}: " + "; ".join(problems))
    size = wheel.stat().st_size
    say(
        f"{wheel.name}: {target.policy}, {facts.machine}, needs {', '.join(facts.needed)}, "
        f"exports PyInit_cengine only, {size / 1024:.0f} KiB"
    )


def emulated_python(target: Target, work: Path, env_dir: Path) -> Path:
    """A virtual environment whose ``bin/python`` runs Debian's aarch64 CPython
    under ``qemu-aarch64``: ``-0`` makes it its own ``sys.executable``, so the
    children the tests start run emulated too, and ``pyvenv.cfg`` makes it a
    virtual environment of its own (``/usr`` is the sysroot's, through ``-L``)."""
    sysroot = arm64_sysroot(work)
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        raise WheelError("qemu-aarch64 is missing (Debian's qemu-user)")
    python = env_dir / "bin" / "python"
    python.parent.mkdir(parents=True)
    interpreter = sysroot / "usr" / "bin" / f"python{PY_DOTTED}"
    python.write_text(f'#!/bin/sh\nexec "{qemu}" -L "{sysroot}" -0 "$0" "{interpreter}" "$@"\n')
    python.chmod(0o755)
    (env_dir / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {PY_DOTTED}\n"
    )
    version = subprocess.run(
        [
            str(python),
            "-c",
            "import sys, platform; print(*sys.version_info[:2], platform.machine())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if version != [*PY_DOTTED.split("."), "aarch64"]:
        raise WheelError(f"the emulated interpreter is {version}, not CPython {PY_DOTTED} aarch64")
    return python


def test(target: Target, wheel: Path, work: Path) -> float:
    """Install ``wheel`` into a fresh virtual environment and run :data:`TESTS`
    against it; the seconds the tests took."""
    env_dir = work / f"{target.name}-env"
    shutil.rmtree(env_dir, ignore_errors=True)
    if target.native:
        run([sys.executable, "-m", "venv", str(env_dir)])
        python = env_dir / "bin" / "python"
        run([str(python), "-m", "pip", "install", "--quiet", str(wheel), "pytest"])
    else:
        python = emulated_python(target, work, env_dir)
        # The build machine's pip fetches the target's wheels (orjson's, for one):
        # nothing has to be installed under emulation.
        site = env_dir / "lib" / f"python{PY_DOTTED}" / "site-packages"
        run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site),
             "--platform", target.pip_platform, "--python-version", PY_DOTTED,
             "--implementation", "cp", "--abi", f"cp{PY}", "--only-binary", ":all:",
             str(wheel), "pytest"],
        )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(AGENTLOG_REQUIRE_EXTENSIONS="1", AGENTLOG_TEST_WHEEL=str(wheel))
    started = time.monotonic()
    run(
        [str(python), "-m", "pytest", *(str(ROOT / t) for t in TESTS), "--rootdir", str(ROOT),
         "-p", "no:cacheprovider", "-q", "-x"],
        cwd=work,  # outside the checkout: `agentlog` can only be the installed one
        env=env,
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", choices=[[], *TARGETS], help="default: all")
    parser.add_argument("--sdist", type=Path, help="the sdist to build from (default: build one)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheels go")
    parser.add_argument("--work", type=Path, help="a work directory to keep (default: temporary)")
    parser.add_argument("--no-test", action="store_true", help="build and check only")
    args = parser.parse_args()
    targets = [TARGETS[name] for name in args.targets or TARGETS]
    with tempfile.TemporaryDirectory(prefix="agentlog-wheels.") as temporary:
        work = (args.work or Path(temporary)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        sdist = args.sdist
        if sdist is None:
            env = dict(os.environ, AGENTLOG_REQUIRE_EXTENSIONS="1")
            run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                 str(work / "sdist"), str(ROOT)], env=env, stdout=subprocess.DEVNULL)  # fmt: skip
            (sdist,) = (work / "sdist").glob("*.tar.gz")
        try:
            wheels = [
                (target, build(target, sdist.resolve(), work, args.out)) for target in targets
            ]
            if args.no_test:
                return
            for target, wheel in wheels:
                if target.multiarch.endswith("musl"):
                    say(f"{wheel.name}: checked, not run: no musl CPython can be had here")
                    continue
                seconds = test(target, wheel, work)
                say(f"{wheel.name}: its tests passed in {seconds:.0f} s")
        except (WheelError, subprocess.CalledProcessError) as exc:
            sys.exit(f"build_wheels: {exc}")


if __name__ == "__main__":
    main()
