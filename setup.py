"""Build agentlog, with the C engine when it can be built.

Environment switches (``AGENTLOG_NO_EXTENSIONS`` is also honoured at import
time, see agentlog/engine/__init__.py):

* ``AGENTLOG_NO_EXTENSIONS=1`` — build and install the pure-Python engine only.
* ``AGENTLOG_REQUIRE_EXTENSIONS=1`` (implied by ``CIBUILDWHEEL=1``) — a C engine
  that fails to build fails the install, so a wheel never ships pure by accident.
* ``AGENTLOG_ASAN=1`` — compile the C engine with AddressSanitizer.
* ``AGENTLOG_NO_TTY_NOTICES=1`` — say the build's notices (pure fallback,
  system SQLite) in the build's log only, not also on the terminal.
* ``AGENTLOG_FAULTS=1`` — compile in the fault-injection seam
  (``csrc/fault_injection.h``, ``agentlog.engine.faults``): a test build's
  switch, which the AddressSanitizer run of ``scripts/test`` sets. It needs the
  embedded SQLite; a wheel built without it carries no trace of the seam.

When no C compiler (or no Python headers) is found, the pure-Python engine is
installed and nothing is fetched for the C one.

The C engine is one extension module, ``agentlog.engine.cengine``: Cython
compiles ``src/agentlog/engine/cengine.pyx`` (which includes the ``.pxi`` parts
beside it; declarations in ``src/agentlog/engine/includes/*.pxd``) into one C
file that also compiles in the headers of ``csrc/`` and, through
``csrc/sqlite_embed.h``, the pinned SQLite amalgamation: one translation unit.
The amalgamation (``csrc/sqlite/sqlite3.c`` and ``sqlite3.h``: fetched, git-ignored)
is verified against ``csrc/sqlite/checksums``. A build from a git checkout
fetches it when it is missing (``scripts/fetch_sqlite.py``); an sdist carries
it. Only when no verified copy can be had is the system's SQLite linked instead.
The sdist carries these sources (MANIFEST.in); a wheel carries the compiled
module and ``cengine.pyi`` only (``exclude-package-data`` in pyproject.toml).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
SQLITE_DIR = ROOT / "csrc" / "sqlite"


def flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


NO_EXTENSIONS = flag("AGENTLOG_NO_EXTENSIONS")
REQUIRE_EXTENSIONS = flag("AGENTLOG_REQUIRE_EXTENSIONS") or flag("CIBUILDWHEEL")
if NO_EXTENSIONS and REQUIRE_EXTENSIONS:
    sys.exit("AGENTLOG_NO_EXTENSIONS and AGENTLOG_REQUIRE_EXTENSIONS are both set")


def notice(text: str) -> None:
    """Say ``text`` where the person installing sees it.

    pip shows a build's output only under ``pip -v`` (or when it fails), so a
    notice also goes to the controlling terminal when standard error is not
    one — the way to be seen at pip's default verbosity. Without a terminal
    (CI, a container build) it is in the build's log only.
    """
    message = f"\n*** agentlog: {text}\n\n"
    sys.stderr.write(message)
    sys.stderr.flush()
    if sys.stderr.isatty() or flag("AGENTLOG_NO_TTY_NOTICES"):
        return
    try:
        tty = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return  # no controlling terminal
    try:
        os.write(tty, message.encode())
    except OSError:
        pass
    finally:
        os.close(tty)


def compiler_problem() -> str | None:
    """Why the C engine cannot be compiled here (no C compiler, no Python
    headers), or ``None`` when it can be tried — found before anything is
    fetched for it. (On Windows, setuptools finds MSVC itself: tried.)"""
    if os.name == "nt":
        return None
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    compiler = shlex.split(command)[0] if command.strip() else "cc"
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) was found"
    include = sysconfig.get_paths().get("include", "")
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"Python's headers (Python.h) are not installed in {include}"
    return None


def fetcher() -> Any:
    spec = importlib.util.spec_from_file_location(
        "fetch_sqlite", ROOT / "scripts" / "fetch_sqlite.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verified_amalgamation() -> Path | None:
    """The verified amalgamation directory, fetching it into a checkout if missing."""
    fetch = fetcher()
    if fetch.is_verified(SQLITE_DIR):
        return SQLITE_DIR
    if not (ROOT / "PKG-INFO").exists():  # a checkout, not an sdist
        try:
            return Path(fetch.fetch(SQLITE_DIR))
        except Exception as exc:  # no network, no pip: fall back, loudly
            notice(f"could not fetch the pinned SQLite amalgamation ({exc})")
    return None


def engine_extension() -> Extension:
    sqlite_dir = verified_amalgamation()
    # Hidden by default: the module exports PyInit_cengine (PyMODINIT_FUNC marks
    # it visible) and nothing else, not even Cython's own globals.
    compile_args = ["-O2", "-fvisibility=hidden"]
    link_args: list[str] = []
    if flag("AGENTLOG_ASAN"):
        compile_args += ["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"]
        link_args += ["-fsanitize=address"]
    macros: list[tuple[str, str | None]] = []
    if sqlite_dir is None:
        notice("building the C engine against the system SQLite, not the pinned one")
    else:
        macros.append(("AGENTLOG_EMBEDDED_SQLITE", "1"))
    if flag("AGENTLOG_FAULTS"):
        if sqlite_dir is None:
            notice("no fault-injection seam: it needs the embedded SQLite")
        macros.append(("AGENTLOG_FAULT_INJECTION", "1"))
    return Extension(
        "agentlog.engine.cengine",
        ["src/agentlog/engine/cengine.pyx"],
        include_dirs=["csrc", *([str(sqlite_dir)] if sqlite_dir else [])],
        define_macros=macros,
        libraries=[] if sqlite_dir else ["sqlite3"],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
        optional=not REQUIRE_EXTENSIONS,
    )


class BuildExt(build_ext):
    """Say clearly when the C engine could not be built and pure Python is installed."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if REQUIRE_EXTENSIONS:
                raise
            notice(f"the C engine failed to build ({exc}); installing the pure-Python engine")
            self.extensions.remove(ext)  # nothing to copy or install for it


class Sdist(sdist):
    """An sdist always carries the verified amalgamation, so it installs offline."""

    def run(self) -> None:
        if verified_amalgamation() is None:
            sys.exit("cannot build an sdist without the verified SQLite amalgamation")
        super().run()


def extensions() -> list[Extension]:
    if NO_EXTENSIONS:
        return []
    problem = compiler_problem()
    if problem is not None:
        if REQUIRE_EXTENSIONS:
            sys.exit(f"agentlog: the C engine cannot be built: {problem}")
        # Nothing is fetched for a C engine that cannot be compiled.
        notice(f"{problem}; installing the pure-Python engine (slower, same API)")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRE_EXTENSIONS:
            raise
        notice("Cython is not available; installing the pure-Python engine")
        return []
    return cythonize(  # type: ignore[no-any-return]
        [engine_extension()],
        include_path=["src"],
        compiler_directives={"language_level": 3},
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt, "sdist": Sdist})
