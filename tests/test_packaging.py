"""What an app installs, `pip install "memorybook[service,postgres]"`: the package memorybook/
alone, with nothing of the collection's own tooling (dev/: the kernel set-up and provisioner), so
no kernel of the app's changes; none of the notebook stack (JupyterLab, IPython, matplotlib,
nbformat...), which only the collection's dev group brings; at most 116 MB of site-packages; and,
used from a folder of its own, a module that replays the recording $MEMORYBOOK_RECORDING names,
or says that it needs that variable; and the README's test of an app's own tickets, copied into a
fresh folder beside the wheel and pytest alone, passes with no key."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import tools.dist
from memorybook.config import RECORDING_ENV, RECORDING_PATH
from tests.helpers import REPO_ROOT, readme_app_example
from tools.release_notes import release_notes

UV = Path(sys.executable).with_name("uv")
EXTRAS = "service,postgres"
# What the notebooks need and an app must never be made to install: the collection's dev group
# in pyproject.toml brings them, [project] dependencies and its extras must not.
NOTEBOOK_STACK = {"jupyterlab", "notebook", "ipykernel", "ipython", "matplotlib", "nbformat",
                  "nbclient", "nbconvert", "jupyter-server", "jupyter-client", "asgi-lifespan"}
# An app's site-packages with both extras, .pyc files included (`pip install` compiles them):
# 58 MB on 2026-12-02 (`du -sm`); 443 MB when `pip install .` brought the notebook stack too.
MOST_MEGABYTES = 116


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    # Built as `make dist` builds them (tools/dist.py: the sdist, then the wheel from it), from a
    # clone: here the files git tracks for it, holding what an earlier build of an older version
    # left in build/ (as setuptools did), a module deleted since among it.
    clone = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z", "memorybook", "pyproject.toml", "README.md",
                              "LICENSE"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, clone / name)
    old_build = clone / "build" / "lib" / "memorybook" / "deleted_since.py"
    old_build.parent.mkdir(parents=True)
    old_build.write_text("LEFT_BY_AN_OLD_BUILD = True\n", encoding="utf-8")
    before = sorted(clone.rglob("*"))
    try:
        built = tools.dist.build(tmp_path_factory.mktemp("dist"), clone)
    except tools.dist.DistError as error:
        pytest.fail(str(error), pytrace=False)
    made = [str(path.relative_to(clone)) for path in sorted(set(clone.rglob("*")) - set(before))]
    assert not made, (
        f"building the wheel wrote {len(made)} files into the clone ({', '.join(made[:3])}...): "
        "whatever a build leaves there can go into the next wheel built from it; keep "
        "pyproject.toml's [build-system] a backend that builds from the files as they are")
    return built


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    return dist[1]


def test_make_dist_builds_an_sdist_and_a_wheel_that_twine_check_passes(dist):
    sdist, wheel = dist
    try:
        tools.dist.check(sdist, wheel)
    except tools.dist.DistError as error:
        pytest.fail(f"{error}\nfix what twine names (pyproject.toml's [project], README.md)",
                    pytrace=False)
    with tarfile.open(sdist) as archive:
        top = {name.split("/", 1)[1].split("/")[0] for name in archive.getnames() if "/" in name}
    assert {"memorybook", "README.md", "LICENSE", "pyproject.toml"} <= top, (
        f"the sdist holds {sorted(top)}: [tool.hatch.build.targets.sdist] in pyproject.toml "
        "must include memorybook/, README.md and LICENSE")


def test_the_version_is_set_in_pyproject_alone_and_the_changelog_describes_it(wheel):
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["version"]
    assert wheel.name.startswith(f"memorybook-{version}-")
    sources = [path for pattern in ("*.py", "*.pyi")
               for path in (REPO_ROOT / "memorybook").rglob(pattern)]
    elsewhere = [str(path.relative_to(REPO_ROOT)) for path in sources
                 if f'"{version}"' in path.read_text(encoding="utf-8")]
    assert elsewhere == [], (
        f"{elsewhere} spell the version {version} out: read it with "
        "importlib.metadata.version('memorybook'), so that pyproject.toml stays its one place")
    notes = release_notes(f"v{version}")
    assert "###" in notes, f"CHANGELOG.md's section for {version} has no Added/Changed heading"
    with pytest.raises(ValueError, match=f"does not name pyproject.toml's version {version}"):
        release_notes("v999.0.0")


def test_the_wheel_an_app_installs_holds_memorybook_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"memorybook", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                   + ".dist-info"}, (
        f"the wheel holds {sorted(top)}: only memorybook/ belongs in it; change "
        "[tool.hatch.build.targets.wheel] in pyproject.toml")
    assert not any(name.endswith("entry_points.txt") for name in names), (
        "the wheel registers entry points: an app's install must register nothing")
    # __init__.pyi too: without it `import memorybook` fails, as it reads there what it exports;
    # and py.typed, without which a type checker skips the installed package (PEP 561)
    missing = {"memorybook/__init__.py", "memorybook/__init__.pyi", "memorybook/py.typed",
               "memorybook/store/__init__.py"} - set(names)
    assert not missing, (
        f"the wheel lacks {sorted(missing)}: check the file is committed in memorybook/, not "
        "ignored by .gitignore, and [tool.hatch.build.targets.wheel] in pyproject.toml")
    tracked = subprocess.run(["git", "ls-files", "memorybook"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    packaged = {name for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packaged == set(tracked), (
        f"the wheel holds {sorted(packaged - set(tracked))} that git does not track in "
        f"memorybook/, and lacks {sorted(set(tracked) - packaged)} that it does: the wheel "
        "must be built from the files as they are, never from a build/ folder of old copies "
        "(pyproject.toml's [build-system])")


def test_the_lock_resolves_an_apps_install_without_the_notebook_stack():
    # What uv.lock would install for memorybook[service,postgres] without the dev group: the
    # same question as the install below, answered offline and at once.
    exported = subprocess.run(
        [str(UV), "export", "--frozen", "--offline", "--no-dev", "--no-emit-project",
         *(f"--extra={extra}" for extra in EXTRAS.split(",")), "--no-hashes", "--no-header",
         "--no-annotate"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    names = {canonicalize_name(line.split("==")[0].split("[")[0])
             for line in exported.stdout.splitlines() if "==" in line}
    assert {"fastapi", "uvicorn", "psycopg", "cryptography", "typesafe-sdk"} <= names, (
        f"uv.lock's install of memorybook[{EXTRAS}] lacks what the store or the service "
        f"imports: {sorted(names)}; check [project] dependencies and "
        "[project.optional-dependencies] in pyproject.toml, then `make lock`")
    assert not names & NOTEBOOK_STACK, (
        f"memorybook[{EXTRAS}] brings {sorted(names & NOTEBOOK_STACK)}: the notebook stack "
        "belongs in pyproject.toml's dev group, not in [project] dependencies or its extras")


@pytest.fixture(scope="module")
def app_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv outside the checkout, given `<wheel>[service,postgres]` and whatever it
    asks for, from the package index (or uv's cache) as an app's install would get them."""
    folder = tmp_path_factory.mktemp("app-install")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   cwd=folder, timeout=120)
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # --compile-bytecode: the .pyc files `pip install` writes count in the size too
    installed = subprocess.run(
        [str(UV), "pip", "install", "--compile-bytecode", "--python",
         str(venv / "bin" / "python"), f"{wheel}[{EXTRAS}]"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, (
        f"installing {wheel.name}[{EXTRAS}] in a fresh venv failed (it needs the package "
        f"index, or uv's cache that `make setup` filled):\n{installed.stderr}")
    # What uv says it resolved, downloaded, built and installed (shown with `pytest -s`)
    print("".join(line + "\n" for line in installed.stderr.splitlines()
                  if not line.startswith(" + ")), end="")
    return venv


def in_app_venv(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=venv.parent,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})


def test_an_apps_install_holds_none_of_the_notebook_stack(app_venv):
    listed = in_app_venv(app_venv, "import importlib.metadata as m, json; "
                                   "print(json.dumps([d.metadata['Name'] for d in "
                                   "m.distributions()]))")
    assert listed.returncode == 0, listed.stderr
    names = {canonicalize_name(name) for name in json.loads(listed.stdout)}
    assert {"memorybook", "fastapi", "uvicorn", "psycopg"} <= names, (
        f"memorybook[{EXTRAS}] did not install the extras' distributions: {sorted(names)}; "
        "check [project.optional-dependencies] in pyproject.toml")
    assert not names & NOTEBOOK_STACK, (
        f"`pip install memorybook[{EXTRAS}]` installed {sorted(names & NOTEBOOK_STACK)}: "
        "move what brings them from [project] dependencies or its extras to the dev group "
        "in pyproject.toml (`uv tree --no-dev` shows who asks for them)")


def site_packages_megabytes(venv: Path) -> float:
    """What `du -sm` says site-packages takes on disk: every file's and folder's blocks, each
    file once however many links it has (uv links files from its cache), in MiB."""
    [site] = (venv / "lib").glob("python3*/site-packages")
    blocks = {(found.st_dev, found.st_ino): found.st_blocks
              for found in (path.lstat() for path in [site, *site.rglob("*")])}
    return sum(blocks.values()) * 512 / 2**20


def test_an_apps_install_weighs_at_most_116_megabytes(app_venv):
    megabytes = site_packages_megabytes(app_venv)
    print(f"site-packages of memorybook[{EXTRAS}]: {megabytes:.1f} MB "
          f"(at most {MOST_MEGABYTES} MB)")
    assert megabytes <= MOST_MEGABYTES, (
        f"memorybook[{EXTRAS}] installs {megabytes:.1f} MB of site-packages, more than "
        f"{MOST_MEGABYTES} MB: find the heavy distribution (`du -sh` in the venv) and keep it "
        "out of [project] dependencies and the extras in pyproject.toml")


def test_an_apps_install_imports_the_package_the_store_and_the_extras(app_venv):
    # Every name memorybook exports (each loads its module at first use), the store, the extras
    imported = in_app_venv(app_venv, "import memorybook; from memorybook import *; "
                                     "import memorybook.store, fastapi, uvicorn, psycopg; "
                                     "print(memorybook.__file__)")
    assert imported.returncode == 0, (
        f"`from memorybook import *`, `import memorybook.store` or an extra's module "
        f"fails where only memorybook[{EXTRAS}] is installed: memorybook/ imports something "
        f"its dependencies do not bring (add it to pyproject.toml, or import it lazily):\n"
        f"{imported.stderr}")
    assert imported.stdout.startswith(str(app_venv)), (
        f"the app imported another memorybook than the one installed: {imported.stdout}")


def test_the_readmes_app_example_runs_as_printed_in_an_apps_install(app_venv, tmp_path):
    code, printed = readme_app_example()
    app = tmp_path / "my_app"
    app.mkdir()
    (app / "app.py").write_text(code, encoding="utf-8")
    recording = tmp_path / "elsewhere" / "json_cache.json"  # without provenance.json beside it
    recording.parent.mkdir()
    shutil.copyfile(RECORDING_PATH, recording)
    python = str(app_venv / "bin" / "python")

    def run_app(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run([python, "app.py"], cwd=app, capture_output=True, text=True,
                              timeout=120, env={"PATH": "/usr/bin:/bin", **env})

    replayed = run_app(**{RECORDING_ENV: str(recording)})
    assert replayed.returncode == 0 and replayed.stdout.strip() == printed, (
        f"README.md's app example, installed as an app installs memorybook[{EXTRAS}] and run "
        f"from a folder of its own with {RECORDING_ENV}, must print {printed!r}; "
        f"memorybook/config.py's paths must not need the checkout:\n{replayed.stderr}")
    missing = run_app()
    last = missing.stderr.strip().splitlines()[-1]
    [site] = (app_venv / "lib").glob("python3*/site-packages")
    assert missing.returncode != 0 and RECORDING_ENV in last and (
        str(site / "json_cache" / "json_cache.json") in last), (
        f"installed without {RECORDING_ENV}, a call must stop with one line naming the variable "
        f"and the path looked for (memorybook/config.py, missing_recording_problem()); got: "
        f"{last}")
    assert "FileNotFoundError" not in missing.stderr, missing.stderr


# -- the README's test of an app's own tickets, in a fresh folder ---------------------------


def readme_test_of_an_apps_own_tickets() -> str:
    """The one Python block of README.md's that defines a pytest test."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    tests = [block for block in blocks if re.search(r"^def test_\w+\(", block, re.M)]
    assert len(tests) == 1, (
        f"README.md has {len(tests)} Python blocks defining a test (`def test_...(`), not 1: "
        "its section 'Use it in an app' shows one, testing an app's own tickets on "
        "`made_up_jev`; keep it, and keep it the only one (tests/test_packaging.py)")
    return tests[0]


@pytest.fixture(scope="module")
def test_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv outside the checkout holding the wheel, without extras, and pytest (the
    version the lock pins), from the package index or uv's cache."""
    venv = tmp_path_factory.mktemp("app-tests") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    installed = subprocess.run(
        [str(UV), "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel),
         f"pytest=={version('pytest')}"], env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, (
        f"installing {wheel.name} and pytest in a fresh venv failed (it needs the package "
        f"index, or uv's cache that `make setup` filled):\n{installed.stderr}")
    return venv


def test_the_readmes_test_of_an_apps_own_tickets_passes_in_a_fresh_folder(test_venv, tmp_path):
    code = readme_test_of_an_apps_own_tickets()
    app = tmp_path / "my_app"
    app.mkdir()
    (app / "test_my_app.py").write_text(code, encoding="utf-8")
    ran = subprocess.run([str(test_venv / "bin" / "python"), "-m", "pytest", "-q"], cwd=app,
                         capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin"})  # no TYPESAFE_* or MEMORYBOOK_*
    said = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ran.stderr.strip()
    assert ran.returncode == 0 and re.fullmatch(r"1 passed in [\d.]+s", said), (
        f"README.md's test of an app's own tickets, copied into a fresh folder with only "
        f"memorybook (installed from a clone) and pytest, must pass with no key and no "
        f"recording; it ended with {said!r}. Fix the snippet in README.md's section 'Use it in "
        f"an app', or the `made_up_jev` fixture (memorybook/testing.py) or MadeUpJev "
        f"(memorybook/stand_in.py) it uses:\n{ran.stdout[-3000:]}{ran.stderr[-2000:]}")
