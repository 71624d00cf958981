"""Notebook 1 and its pattern in a reader's own folder: what an app that copies them gets.

Notebook 1 is the whole technique on one page. Copied alone beside the recording it must run in a
fresh kernel with no key and show both headline results; with a threshold the recording does not
replay, or beside a file of another model version, each miss names its call, guessing no cause.
The pattern it teaches, run as an app's script with tickets the recording lacks, must stop before
any connection without a key, and with one keep every paid answer in a cache file (and folder)
it creates.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from memorybook.config import RECORDING_PATH
from memorybook.recording import cache_key, recorded_requests
from tests.helpers import (
    COMMITTED_RECORDING,
    NOTEBOOKS,
    REPO_ROOT,
    decode,
    notebook,
    stdout_text,
)
from tools.loopback_server import LoopbackSystemOne
from tools.pattern import pattern_code

FROM_THE_REPOSITORY = ("memorybook", "memorybook_dev", "tools", "tests")
NOTEBOOK_1 = NOTEBOOKS[0]


def test_notebook_1_imports_nothing_from_this_repository():
    notebook = nbformat.read(NOTEBOOK_1, as_version=4)
    imported = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                imported += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported.append(node.module or "")
    assert imported, "notebook 1 imports nothing at all"
    ours = [m for m in imported if m.split(".")[0] in FROM_THE_REPOSITORY]
    assert ours == [], (
        f"notebook 1 imports {ours} from this repository; it must stand alone beside the "
        "recording: define that code in notebook 1 itself")


def notebook_1_alone(tmp_path) -> tuple[Path, nbformat.NotebookNode]:
    """Notebook 1 copied into a folder of its own beside the recording, and read back."""
    folder = tmp_path / "my_app"
    (folder / "json_cache").mkdir(parents=True)
    shutil.copyfile(RECORDING_PATH, folder / "json_cache" / "json_cache.json")
    shutil.copyfile(NOTEBOOK_1, folder / NOTEBOOK_1.name)
    return folder, nbformat.read(folder / NOTEBOOK_1.name, as_version=4)


def test_notebook_1_alone_beside_the_recording_shows_both_results(tmp_path):
    folder, notebook = notebook_1_alone(tmp_path)
    notebook.cells.append(nbformat.v4.new_code_cell(
        "import sys\n"
        f"print('from the repository:', sorted(m for m in sys.modules "
        f"if m.split('.')[0] in {FROM_THE_REPOSITORY!r}))"))
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(folder)}})
    client.execute(env={"PATH": "/usr/bin:/bin"})  # no key, no PYTHONPATH

    printed = "".join(output.get("text", "") for cell in notebook.cells
                      for output in cell.get("outputs", []) if output.get("name") == "stdout")
    alone = "notebook 1, copied alone beside json_cache/json_cache.json and run with no key,"
    assert "plain Jev -> cloud_ops 0.55" in printed, f"{alone} did not route the first ticket"
    assert "Expected routes: 3/6 without memory, 6/6 with memory." in printed, (
        f"{alone} did not show both results")
    assert "from the repository: []" in printed, f"{alone} imported from this repository"
    assert (folder / "json_cache" / "json_cache.json").read_bytes() == COMMITTED_RECORDING, (
        "notebook 1 replaying with no key changed the recording beside it")
    assert sorted(p.name for p in folder.rglob("*")) == [
        NOTEBOOK_1.name, "json_cache", "json_cache.json"], "notebook 1 wrote files beside itself"


def run_alone_with_errors_allowed(folder: Path, notebook) -> list:
    """Run every cell of notebook 1 alone in `folder`, errors allowed (as `jupyter nbconvert
    --execute --allow-errors` runs it), with no key; the error outputs, in order."""
    NotebookClient(notebook, kernel_name="python3", timeout=120, allow_errors=True,
                   shutdown_kernel="immediate",
                   resources={"metadata": {"path": str(folder)}}).execute(
        env={"PATH": "/usr/bin:/bin"})  # no key, outside the collection
    return [output for cell in notebook.cells for output in cell.get("outputs", [])
            if output.output_type == "error"]


def assert_each_names_its_call(errors: list, where: str) -> None:
    """Each error is the page's own miss: the call named, nothing sent, its link once, and no
    cause guessed (notebook 1's `ask(), cached` cell)."""
    for error in errors:
        assert error.ename == "NotInCacheError", f"{where}: {error.ename}: {error.evalue[:300]}"
        said = error.evalue.split("https://")[0]
        assert re.search(r"has no answer to \['(team|remember)'\] about ticket T-\d+; without "
                         r"TYPESAFE_API_KEY nothing was sent\. The call: $", said), (
            f"{where}: the page's miss must name the call and say nothing was sent: {said}")
        assert "REMEMBER_AT" not in said and "cause" not in said, (
            f"{where}: the page's miss must guess no cause: {said}")
        assert "\n".join(error.traceback).count("playground#share/") == 1, (
            f"{where}: a miss must show its playground link once")


def test_notebook_1_alone_at_a_threshold_the_recording_does_not_replay_names_each_miss(
        tmp_path):
    folder, notebook = notebook_1_alone(tmp_path)
    [settings] = [cell for cell in notebook.cells
                  if cell.source.startswith("# pattern: the settings")]
    settings.source, edits = re.subn(r"(?m)^REMEMBER_AT = 0\.5\b", "REMEMBER_AT = 1",
                                     settings.source)
    assert edits == 1, "notebook 1's settings cell must set `REMEMBER_AT = 0.5`"
    errors = run_alone_with_errors_allowed(folder, notebook)
    assert errors, "notebook 1 alone with REMEMBER_AT = 1 replayed other memories without a miss"
    assert_each_names_its_call(errors, "notebook 1 alone with REMEMBER_AT = 1")
    assert "about ticket T-103" in errors[0].evalue, errors[0].evalue[:300]
    assert (folder / "json_cache" / "json_cache.json").read_bytes() == COMMITTED_RECORDING


def test_notebook_1_beside_a_file_of_another_model_version_misses_every_call(tmp_path):
    """What a reader sees with another model version's json_cache.json (the copy of the official
    file this collection could fetch answered for jev-1.13.0): notebook 1 says so."""
    folder, notebook = notebook_1_alone(tmp_path)
    entries = json.loads(RECORDING_PATH.read_text(encoding="utf-8"))
    other = {cache_key("jev-1.13.0", json.dumps(request["state"]), json.dumps(
        request["questions"])): {**entries[key], "model": "jev-1.13.0"}
        for key, request in recorded_requests().items() if key in entries}
    (folder / "json_cache" / "json_cache.json").write_text(json.dumps(other), encoding="utf-8")
    errors = run_alone_with_errors_allowed(folder, notebook)
    asking = [cell for cell in notebook.cells if cell.cell_type == "code"
              and re.search(r"\bask(_with_memory)?\(", cell.source)
              and not cell.source.startswith("# pattern:")]
    assert len(errors) == len(asking) >= 3, (
        f"beside another model version's file each of notebook 1's {len(asking)} cells that ask "
        f"Jev must stop at its first call, and nothing else fail: {[e.ename for e in errors]}")
    assert_each_names_its_call(errors, "notebook 1 beside a jev-1.13.0 file")
    text = next(cell.source for cell in nbformat.read(NOTEBOOK_1, as_version=4).cells
                if "jev-1.13.0" in cell.source and cell.cell_type == "markdown")
    assert "every call misses, each explained" in text, (
        "notebook 1 must say what a reader sees beside a file of another model version")


# An app's own ticket, which no recording holds, sent through the copied pattern.
APP = textwrap.dedent("""

    state = {"customer": {"id": "C-77", "company": "Reader's Own Ltd"},
             "ticket": {"id": "R-1", "subject": "Login",
                        "messages": [{"from": "customer", "text": "We cannot log in."}]}}
    print(ask_with_memory(state, ROUTE).answers["team"].choice)
""")


def synthetic_answer(body: dict) -> dict:
    """A well-formed answer to any routing or gate request: made up, never Jev's."""
    question_id, question = next(iter(body["questions"].items()))
    if question_id == "remember":
        answer = {"type": "noul", "noul": 0.9}
    else:
        options = list(question["criteria"])
        probabilities = {option: 0.4 if option == "general" else round(0.6 / 6, 2)
                         for option in options}
        answer = {"type": "choice", "choice": "general", "confidence": 0.3,
                  "probabilities": probabilities}
    return {"model": body["model"], "usage": {"input_tokens": 1, "output_tokens": 1},
            "answers": {question_id: answer}}


def run_app(folder, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "app.py"], cwd=folder, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})


def test_without_a_key_a_call_the_cache_lacks_stops_at_once_naming_key_and_file(tmp_path):
    folder = tmp_path / "app"
    (folder / "json_cache").mkdir(parents=True)
    shutil.copyfile(RECORDING_PATH, folder / "json_cache" / "json_cache.json")
    (folder / "app.py").write_text(pattern_code() + APP, encoding="utf-8")
    with LoopbackSystemOne({}, answer_with=synthetic_answer) as server:
        result = run_app(folder, TYPESAFE_ENDPOINT=server.base_url)
        sent = len(server.requests)
    assert result.returncode == 1, "the pattern, keyless, did not fail on a call its cache lacks"
    assert sent == 0, "a request was sent without a key"
    last = result.stderr.strip().splitlines()[-1]
    looked = (folder / "json_cache" / "json_cache.json").resolve()
    assert last.startswith(f"NotInCacheError: {looked} has no answer to ['team'] about ticket "
                           "R-1; without TYPESAFE_API_KEY nothing was sent."), (
        "notebook 1's `_system_one` must stop a keyless miss with NotInCacheError naming the "
        f"cache file, the call and the key; the last line was: {last}")
    assert "cause" not in last.split("https://")[0], (
        "the pattern's NotInCacheError (notebook 1's `ask(), cached` cell) knows only that the "
        f"call is not in its cache: it must guess no cause: {last}")
    assert result.stderr.count("playground#share/") == 1, result.stderr
    [link] = re.findall(r"https://console\.typesafe\.ai/playground#share/\S+", last) or [None]
    assert link, f"the pattern's miss must print the call's playground link: {last}"
    state, questions, share = decode(link)
    assert state["ticket"]["id"] == "R-1" and list(questions) == ["team"], (
        "the link must open exactly the call that missed")
    assert share["selectedModels"] == ["jev-1.14.0"]
    assert len(result.stderr.splitlines()) <= 16, result.stderr
    assert "httpx" not in result.stderr and "typesafe_sdk" not in result.stderr, (
        "a keyless miss went as far as the HTTP client: `_system_one` must raise before it")
    assert sorted(p.name for p in folder.iterdir()) == ["app.py", "json_cache"], (
        "nothing was written")
    assert (folder / "json_cache" / "json_cache.json").read_bytes() == COMMITTED_RECORDING


def test_with_a_key_each_answer_is_kept_in_a_cache_the_app_did_not_have(tmp_path):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "app.py").write_text(pattern_code() + APP, encoding="utf-8")
    with LoopbackSystemOne({}, answer_with=synthetic_answer) as server:
        live = run_app(folder, TYPESAFE_ENDPOINT=server.base_url, TYPESAFE_API_KEY="sk-app")
        sent_live = len(server.requests)
        replayed = run_app(folder, TYPESAFE_ENDPOINT=server.base_url)
        sent_after = len(server.requests)
    assert live.returncode == 0, live.stderr
    assert live.stdout == replayed.stdout == "general\n", replayed.stderr
    assert sent_live == 2, "the routing request and the gate"
    assert sent_after == sent_live, "the second run replayed what the first one paid for"
    saved = json.loads((folder / "json_cache" / "json_cache.json").read_text(encoding="utf-8"))
    assert len(saved) == 2 and "sk-app" not in json.dumps(saved), (
        "the app's cache must hold its two answers, and never the key")


def test_the_readmes_sample_output_is_what_notebook_1_prints():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    sample = readme.split("```text\n", 1)[1].split("```", 1)[0]
    printed = stdout_text(notebook("01"))
    assert sample.strip() and all(line in printed for line in sample.splitlines()), (
        "README.md's sample output (its first ```text block) must be lines notebook 1 prints; "
        "copy them from notebook 1's outputs")


def test_code_lines_in_the_notebooks_fit_in_88_characters():
    long = [f"{path.name}: {line!r}" for path in NOTEBOOKS
            for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > 88]
    assert long == [], f"code lines longer than 88 characters; wrap them: {long}"


NUMBERED_LINK = re.compile(r"\[(?:[Nn]otebook |)(\d)(?: ·[^\]]*)?\]\(((\d\d)_[a-z_]+\.ipynb)\)")
MENTION = re.compile(r"\b[Nn]otebooks? (\d)\b")


def reader_facing_texts() -> dict[str, str]:
    """The notebooks' Markdown and code, the README, and the package's modules."""
    texts = {path.name: "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
             for path in NOTEBOOKS}
    texts["README.md"] = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for folder in ("memorybook", "dev/memorybook_dev"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            texts[str(path.relative_to(REPO_ROOT))] = path.read_text(encoding="utf-8")
    return texts


def test_every_numbered_notebook_link_and_mention_points_at_a_notebook_that_is_there():
    names = {path.name for path in NOTEBOOKS}
    wrong = []
    for where, text in reader_facing_texts().items():
        for number, target, prefix in NUMBERED_LINK.findall(text):
            if target not in names or int(number) != int(prefix):
                wrong.append(f"{where}: [{number} ...]({target})")
        wrong += [f"{where}: notebook {n}" for n in MENTION.findall(text)
                  if not 1 <= int(n) <= len(NOTEBOOKS)]
    assert wrong == [], (
        f"these links or mentions name a notebook that is not there (or link N to another "
        f"number): {wrong}; fix the number or the file name")


# What a message or a paragraph sends the reader to a notebook for, and what that notebook must
# hold for it.
SENT_THERE_FOR = [
    ("memorybook/replay.py", "notebook 2 says which thresholds replay", 2,
     "## Which thresholds replay"),
    ("02_memory_gate.ipynb", "notebook 1's settings cell", 1, "# pattern: the settings"),
    ("01_memory_system.ipynb", "[notebook 6](06_persistent_memory.ipynb)", 6,
     "open_store("),
    ("01_memory_system.ipynb", "[notebook 7](07_next_steps.ipynb)", 7,
     "## 1 · Choose which memories to add"),
    ("02_memory_gate.ipynb", "[Notebook 7](07_next_steps.ipynb) picks a threshold", 7,
     "pick_threshold("),
]


def test_what_a_reader_is_sent_to_a_notebook_for_is_in_that_notebook():
    texts = reader_facing_texts()
    for where, words, number, held in SENT_THERE_FOR:
        assert words in texts[where].replace("\n", " "), f"{where} no longer says {words!r}"
        assert held in texts[NOTEBOOKS[number - 1].name], f"{words!r}: not in notebook {number}"


@pytest.fixture(scope="module")
def kernel_without_memorybook(tmp_path_factory) -> str:
    """A kernel as a hosted notebook or a plain Jupyter has: the libraries, not this collection.

    Its Python is a fresh venv that sees this environment's libraries by a .pth line, which adds
    their folder without running its .pth files, so the editable install of memorybook is not
    there. Returns the JUPYTER_PATH holding its kernelspec, `alone`."""
    folder = tmp_path_factory.mktemp("alone")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    spec = folder / "kernels" / "alone"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f",
                 "{connection_file}"],
        "display_name": "Python 3, without this collection", "language": "python"}))
    return str(folder)


@pytest.mark.parametrize("path", NOTEBOOKS[1:], ids=lambda path: path.name[:2])
def test_a_later_notebook_opened_alone_stops_in_its_first_cell_saying_what_to_install(
        path, tmp_path, kernel_without_memorybook, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", kernel_without_memorybook)
    shutil.copyfile(path, tmp_path / path.name)
    notebook = nbformat.read(tmp_path / path.name, as_version=4)
    for cell in notebook.cells:  # as a reader opens it after clearing its outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(notebook, kernel_name="alone", timeout=60,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError):
        client.execute(env={"PATH": "/usr/bin:/bin"})
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [output for output in code[0].get("outputs", []) if output.output_type == "error"]
    assert errors and errors[0].ename == "ModuleNotFoundError" and (
        "make setup" in errors[0].evalue and "pip install" in errors[0].evalue), (
        f"{path.name} opened outside the collection must stop in its first code cell with a "
        "ModuleNotFoundError saying what to install (`make setup`, `pip install`): start that "
        "cell with the `find_spec(\"memorybook\")` check the other notebooks have; it showed "
        f"{[(e.ename, e.evalue) for e in errors] or code[0].get('outputs')}")
    assert "\n" not in errors[0].evalue, "the message is one line"
    assert not any(cell.get("outputs") or cell.get("execution_count") for cell in code[1:]), (
        f"{path.name}: cells after the first ran; nbclient should have stopped at the first")


def test_the_readmes_table_has_a_row_for_every_notebook():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| \[[^\]]+\]\(notebooks/(\d\d_[a-z0-9_]+\.ipynb)\)", readme,
                      re.M)
    assert rows == [(str(n), path.name) for n, path in enumerate(NOTEBOOKS, start=1)], (
        "README.md's table of notebooks must have one row per notebook, in order, "
        "`| N | [what](notebooks/NN_name.ipynb) | what it shows |`; it lists "
        f"{[name for _, name in rows]} for {[path.name for path in NOTEBOOKS]}")
