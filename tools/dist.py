"""`make dist`: the sdist and the wheel a release publishes, checked as PyPI will read them.

    python -m tools.dist OUT [SOURCE]    # SOURCE: the checkout by default

uv builds the sdist from SOURCE, then the wheel from that sdist, as an installer given the sdist
would; `twine check --strict` then reads both (their metadata, and the README as PyPI will show
it). Earlier builds of memorybook in OUT are removed first, so OUT holds exactly what a release
uploads. tests/test_packaging.py builds its wheel with this too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(sys.executable).parent  # uv and twine are installed beside this Python
BUILT = ("memorybook-*.tar.gz", "memorybook-*.whl")


class DistError(Exception):
    """A build or a check failed; the message says which and what the tool printed."""


def build(out: Path, source: Path = REPO_ROOT) -> tuple[Path, Path]:
    """Build the sdist of `source` into `out`, then the wheel from it; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    for pattern in BUILT:
        for old in out.glob(pattern):
            old.unlink()
    run("uv build", [str(TOOLS / "uv"), "build", "--quiet", "--out-dir", str(out), str(source)])
    [sdist] = out.glob(BUILT[0])
    [wheel] = out.glob(BUILT[1])
    return sdist, wheel


def check(*paths: Path) -> None:
    """twine's check of what PyPI will read: metadata, and the README rendered."""
    run("twine check", [str(TOOLS / "twine"), "check", "--strict", *map(str, paths)])


def run(what: str, command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise DistError(f"make dist: {what} failed (exit {done.returncode}):\n"
                        f"{done.stdout}{done.stderr}".rstrip())


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        built = build(Path(argv[0]), Path(argv[1]) if len(argv) == 2 else REPO_ROOT)
        check(*built)
    except DistError as error:
        print(error, file=sys.stderr)
        return 1
    for path in built:
        print(f"make dist: {path} (twine check passed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
