"""The reader's page: as light as the official page, the pattern copies out in one piece, and
the way in stays short.

Notebook 1 is the official page's technique at about its size (222 non-blank code lines, the
wrapper and its dict 13), plus what the collection adds for a reader; what it defines, it uses.
The cells tagged `pattern` are what an app copies. Run alone, in a folder holding nothing but the
recording, with no key and nothing from this repository importable, they must reproduce the
official result. The word budgets keep the notebooks and the README quicker to learn from than
the official page they reproduce.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys
import textwrap

import nbformat

from memorybook.config import RECORDING_PATH
from tests.helpers import NOTEBOOKS, REPO_ROOT
from tools.loopback_server import closed_port
from tools.pattern import pattern_code, pattern_script

NOTEBOOK_1 = NOTEBOOKS[0]


def notebook_1_code() -> list[str]:
    """The sources of notebook 1's code cells, in order."""
    return [cell.source for cell in nbformat.read(NOTEBOOK_1, as_version=4).cells
            if cell.cell_type == "code"]


def notebook_1_data() -> dict:
    """The tickets notebook 1 defines, `DATA = {...}`, read from its cell without running it."""
    [data] = [node.value for source in notebook_1_code() for node in ast.parse(source).body
              if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "DATA"]
    return ast.literal_eval(data)

# The official page's own way of building states: its argument order and its ticket numbers.
OFFICIAL_STATES = textwrap.dedent("""
    DATA = json.loads({data!r})
    CUSTOMERS = DATA["customers"]


    def ticket_state(customer_id, ticket_id, received_on, subject, text):
        return {{"customer": CUSTOMERS[customer_id],
                 "ticket": {{"id": ticket_id, "received_on": received_on, "subject": subject,
                            "messages": [{{"from": "customer", "text": text}}]}}}}


    def later_state(customer_id, message_index):
        n = 201 + 3 * list(CUSTOMERS).index(customer_id) + message_index
        message = DATA["later_messages"][message_index]
        return ticket_state(customer_id, f"T-{{n}}", DATA["later_received_on"],
                            message["subject"], message["text"])


    for t in DATA["earlier_tickets"]:
        ask_with_memory(ticket_state(t["customer_id"], t["id"], t["received_on"], t["subject"],
                                     t["text"]), ROUTE)

    plain_right = remembered_right = 0
    for customer in CUSTOMERS:
        for index, message in enumerate(DATA["later_messages"]):
            expected = DATA["expected_team"][customer][message["subject"]]
            state = later_state(customer, index)
            plain_right += ask(state, ROUTE).answers["team"].choice == expected
            remembered_right += ask_with_memory(state, ROUTE).answers["team"].choice == expected
    print(f"{{plain_right}}/6 with ask(), {{remembered_right}}/6 with ask_with_memory()")

    import sys

    from_the_repository = sorted(name for name in sys.modules
                                 if name.split(".")[0] in ("memorybook", "tools", "tests"))
    print("imported from the repository:", from_the_repository or "nothing")
""")


def test_the_pattern_cells_alone_reproduce_the_published_result(tmp_path):
    folder = tmp_path / "app"
    (folder / "json_cache").mkdir(parents=True)
    recording = folder / "json_cache" / "json_cache.json"
    shutil.copyfile(RECORDING_PATH, recording)
    before = hashlib.sha256(recording.read_bytes()).hexdigest()
    data = json.dumps(notebook_1_data())
    script = folder / "app.py"
    script.write_text(pattern_code() + OFFICIAL_STATES.format(data=data), encoding="utf-8")

    # No key, and an endpoint that refuses: a call the recording lacked would fail.
    with closed_port() as refusing_url:
        result = subprocess.run([sys.executable, "-I", "app.py"], cwd=folder,
                                env={"PATH": "/usr/bin:/bin", "TYPESAFE_ENDPOINT": refusing_url},
                                capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "3/6 with ask(), 6/6 with ask_with_memory()",
        "imported from the repository: nothing",
    ]
    assert hashlib.sha256(recording.read_bytes()).hexdigest() == before, "a replay wrote nothing"
    assert sorted(path.name for path in folder.rglob("*")) == ["app.py", "json_cache",
                                                              "json_cache.json"]


def test_the_pattern_imports_nothing_from_this_repository():
    tree = ast.parse(pattern_script())
    modules = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names]
    modules += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    ours = [m for m in modules if m.split(".")[0] in ("memorybook", "tools")]
    assert modules and not ours, (
        f"the pattern cells (tagged `pattern`) import {ours} from this repository: an app "
        "copies them, so they must import only libraries")


def test_a_pattern_cell_says_so_in_its_first_line_and_only_a_pattern_cell_does():
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            tagged = "pattern" in cell.metadata.get("tags", [])
            marked = cell.source.startswith("# pattern: ")
            assert tagged == marked, f"{path.name}: {cell.source.splitlines()[0]!r}"


def test_the_pattern_covers_what_an_app_needs_in_reading_order():
    defined = []
    for node in ast.parse(pattern_code()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            defined += [target.id] if isinstance(target, ast.Name) else []
    needed = ["REMEMBER_AT", "MEMORY_KEY", "client", "json_cache", "ROUTE", "ask", "as_memory",
              "GATE", "remember_probability", "MEMORIES", "customer_id", "ask_with_memory"]
    assert [name for name in defined if name in needed] == needed, (
        f"notebook 1's pattern cells must define {needed}, in that order; they define "
        f"{[name for name in defined if name in needed]}")


# The official page holds 222 non-blank code lines, of which its dict of memories, customer_id()
# and ask_with_memory() take 13; notebook 1 adds keyless replay and misses that explain themselves.
CODE_LINES_AT_MOST = 245
WRAPPER = ("MEMORIES", "customer_id", "ask_with_memory")
WRAPPER_LINES_AT_MOST = 20


def non_blank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def bound_names(statements: list[ast.stmt]) -> list[tuple[str, ast.stmt]]:
    """What these statements bind at the top level of a cell, each with its statement: functions,
    classes, imports and assigned names, inside `if`, `for`, `with` and `try` blocks too (not
    inside functions or classes)."""
    found: list[tuple[str, ast.stmt]] = []
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append((node.name, node))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [((alias.asname or alias.name).split(".")[0], node) for alias in node.names]
        targets = {ast.Assign: lambda n: n.targets, ast.AnnAssign: lambda n: [n.target],
                   ast.AugAssign: lambda n: [n.target], ast.For: lambda n: [n.target]}
        for kind, of in targets.items():
            if isinstance(node, kind):
                found += [(name.id, node) for target in of(node) for name in ast.walk(target)
                          if isinstance(name, ast.Name)]
        for block in ("body", "orelse", "finalbody"):
            found += bound_names(getattr(node, block, []))
        for handler in getattr(node, "handlers", []):
            found += bound_names(handler.body)
    return found


def test_notebook_1_is_about_the_size_of_the_official_page():
    code = notebook_1_code()
    lines = sum(non_blank_lines(source) for source in code)
    wrapper = {name: non_blank_lines(ast.get_source_segment(source, node))
               for source in code for name, node in bound_names(ast.parse(source).body)
               if name in WRAPPER}
    print(f"\nnotebook 1: {lines} non-blank code lines (at most {CODE_LINES_AT_MOST}); "
          f"{', '.join(WRAPPER)}: {sum(wrapper.values())} (at most {WRAPPER_LINES_AT_MOST})")
    assert sorted(wrapper) == sorted(WRAPPER), (
        f"notebook 1 must define {WRAPPER} (a dict of memories, as the official page keeps "
        f"them); it defines {sorted(wrapper)}")
    assert lines <= CODE_LINES_AT_MOST, (
        f"notebook 1's code cells hold {lines} non-blank lines, more than {CODE_LINES_AT_MOST} "
        "(the official page has 222): move what the page does not need into memorybook/")
    assert sum(wrapper.values()) <= WRAPPER_LINES_AT_MOST, (
        f"notebook 1's {', '.join(WRAPPER)} take {wrapper} non-blank lines, more than "
        f"{WRAPPER_LINES_AT_MOST} together (the official page: 13): keep them as plain")


def test_notebook_1_uses_everything_it_defines():
    trees = [ast.parse(source) for source in notebook_1_code()]
    defined = {name for tree in trees for name, _ in bound_names(tree.body)}
    used = {node.id for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    unused = sorted(defined - used)
    assert unused == [], (
        f"notebook 1 defines {unused} and never uses them: remove them from its cells (what "
        "later notebooks or an app need lives in memorybook/)")


def words(text: str) -> int:
    return len(re.findall(r"\w+", text))


def prose(markdown: str) -> str:
    """Markdown without its tables' lines."""
    return "\n".join(line for line in markdown.splitlines() if not line.startswith("|"))


def markdown_words() -> dict[str, int]:
    """The reader's budgets, counted as `\\w+` words of Markdown prose."""
    before_wrapper, wrapper_defined, first_six, every = 0, False, 0, 0
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                wrapper_defined |= bool(re.search(r"^def ask_with_memory\(", cell.source, re.M))
            elif cell.cell_type == "markdown":
                counted = words(prose(cell.source))
                before_wrapper += 0 if wrapper_defined else counted
                first_six += counted if path.name[:2] <= "06" else 0
                every += counted
    assert wrapper_defined, "no notebook defines ask_with_memory()"
    readme_text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return {"before ask_with_memory()": before_wrapper, "notebooks 1-6": first_six,
            "every notebook": every, "README, without its tables": words(prose(readme_text))}


# Tables that list the notebooks grow by a row with each one (CONTRIBUTING, "Add a notebook"):
# the budgets hold prose. "every notebook": the nine notebooks before notebook 1 became the whole
# page held 5,892 words, 655 a notebook; so many a notebook, on average, however many there are.
# "README, without its tables": 1,200 words with the table of eight notebooks (157 words), and
# 200 more for its section for apps: the whole README within 1,400 words, tables included.
BUDGETS = {"before ask_with_memory()": 900, "notebooks 1-6": 3_400,
           "every notebook": 655 * len(NOTEBOOKS), "README, without its tables": 1_243}


def test_the_way_in_stays_within_its_word_budgets():
    counted = markdown_words()
    print("\n" + "\n".join(f"{name}: {counted[name]:,} words (at most {BUDGETS[name]:,})"
                           for name in BUDGETS))
    over = {name: count for name, count in counted.items() if count > BUDGETS[name]}
    assert not over, (
        f"over budget: {over}; shorten the prose there (the notebooks' Markdown cells, or "
        "README.md) rather than raise BUDGETS in tests/test_reader_page.py")
