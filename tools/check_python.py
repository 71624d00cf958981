"""Whether the Python that `make setup` was given can run this collection, said in one message.

    python3 tools/check_python.py           # this Python against pyproject.toml's requires-python
    python3 tools/check_python.py .venv     # and, when .venv exists, whether it was made from it

The Makefile runs it with the Python that PYTHON names, before it makes anything. That Python may
be any version, so this file is written to run (and say what it found) on Python 2.7 and every
Python 3, and imports only the standard library.
"""

import os
import platform
import re
import subprocess
import sys

PYPROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "pyproject.toml")
DESCRIBE = "import platform, sys; print(platform.python_version()); print(sys.base_prefix)"


def needed(pyproject_text):
    """requires-python's bounds as version tuples: (lowest allowed, first excluded or None)."""
    found = re.search(r'^requires-python = "([^"]*)"', pyproject_text, re.MULTILINE)
    lowest, excluded = None, None
    for clause in found.group(1).split(","):
        bound = re.match(r"\s*(>=|<)\s*([0-9.]+)\s*$", clause)
        if bound is None:
            raise ValueError("tools/check_python.py reads a requires-python of one >= and at "
                             "most one < bound, not %r: teach it the new form" % found.group(1))
        version = tuple(int(part) for part in bound.group(2).split("."))
        if bound.group(1) == ">=":
            lowest = version
        else:
            excluded = version
    if lowest is None:
        raise ValueError("requires-python has no >= bound: %r" % found.group(1))
    return lowest, excluded


def shown(version):
    return ".".join(str(part) for part in version)


def version_problem(version, lowest, excluded):
    """What is wrong with a Python of `version` for these bounds, or None."""
    if lowest <= version[:len(lowest)] and (excluded is None or version[:len(excluded)] < excluded):
        return None
    wanted = "%s or later" % shown(lowest)
    if excluded is not None:
        wanted += ", below %s" % shown(excluded)
    return "this collection needs Python %s (requires-python in pyproject.toml)" % wanted


def venv_problem(venv, version, base_prefix):
    """Why `venv` was not made from this Python (version, base_prefix), or None."""
    venv_python = os.path.join(venv, "bin", "python")
    if not os.path.exists(venv_python):
        return None
    try:
        described = subprocess.check_output([venv_python, "-c", DESCRIBE]).decode().split("\n")
    except (OSError, subprocess.CalledProcessError):
        return ("%s was made from a Python that no longer runs (moved, upgraded or removed)"
                % venv)
    venv_version, venv_base = described[0].strip(), described[1].strip()
    if (venv_version, os.path.realpath(venv_base)) == (version, os.path.realpath(base_prefix)):
        return None
    return "%s was made from Python %s (%s), not from this one" % (venv, venv_version, venv_base)


def main(arguments):
    version = platform.python_version()
    this = "PYTHON=%s is %s %s (%s)" % (
        os.environ.get("NAMED_PYTHON", "python3"), platform.python_implementation(), version,
        os.path.realpath(sys.executable))
    with open(PYPROJECT) as pyproject:
        lowest, excluded = needed(pyproject.read())
    problem = version_problem(tuple(sys.version_info[:3]), lowest, excluded)
    if problem is not None:
        sys.stderr.write(
            "make setup: %s; %s. Install one (python.org, your package manager, pyenv or uv) and "
            "name it, e.g. `make setup PYTHON=python3.12`. Nothing was set up.\n"
            % (this, problem))
        return 1
    base_prefix = getattr(sys, "base_prefix", sys.prefix)
    problem = arguments and venv_problem(arguments[0], version, base_prefix)
    if problem:
        sys.stderr.write(
            "make setup: %s, but %s. Run `make clean`, then `make setup` with the PYTHON you "
            "want, or leave PYTHON unset to keep using %s.\n" % (this, problem, arguments[0]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
