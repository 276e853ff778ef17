"""Check commit messages against the convention in CONTRIBUTING.md.

    python scripts/check_commits.py main..HEAD        # every commit of a branch
    python scripts/check_commits.py -C REPO REV..     # in another repository

A message is ``area: imperative subject``: the subject matches
``^[a-z0-9][a-z0-9 ,/._-]*: .+`` and has at most 72 characters, then a blank
line, then a body that says why. Merge commits are left out (their subject is
git's own). Prints one line per broken rule and exits 1 if there is any, 0
when every commit keeps the convention.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

SUBJECT = re.compile(r"[a-z0-9][a-z0-9 ,/._-]*: .+")
MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What ``message`` (a whole commit message) breaks of the convention."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if not SUBJECT.fullmatch(subject):
        found.append(f"subject is not 'area: imperative subject': {subject!r}")
    if len(subject) > MAX_SUBJECT:
        found.append(f"subject has {len(subject)} characters, more than {MAX_SUBJECT}")
    if len(lines) > 1 and lines[1].strip():
        found.append("no blank line after the subject")
    if not any(line.strip() for line in lines[1:]):
        found.append("no body saying why")
    return found


def commits(revisions: list[str], repo: str | None) -> list[tuple[str, str]]:
    """``(hash, message)`` of every non-merge commit ``git log`` lists for ``revisions``."""
    git = ["git", *(["-C", repo] if repo else [])]
    out = subprocess.run(
        [*git, "log", "--no-merges", "--format=%H%x00%B%x1e", *revisions, "--"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = []
    for record in out.split("\x1e"):
        if "\x00" in record:
            sha, message = record.lstrip("\n").split("\x00", 1)
            found.append((sha, message))
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the commits of ``argv``'s revisions; 1 if any breaks the convention."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="+", metavar="REV", help="as git log takes them")
    parser.add_argument("-C", dest="repo", metavar="REPO", help="the repository (default: .)")
    args = parser.parse_args(argv)
    try:
        listed = commits(args.revisions, args.repo)
    except subprocess.CalledProcessError as exc:
        print(f"check_commits: git log failed: {exc.stderr.strip()}", file=sys.stderr)
        return 2
    bad = 0
    for sha, message in listed:
        for problem in problems(message):
            print(f"{sha[:12]}: {problem}")
            bad += 1
    print(f"{len(listed)} commit(s) checked, {bad} problem(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
