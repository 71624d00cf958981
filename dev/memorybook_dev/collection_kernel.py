"""What the collection's notebook kernels do before their first cell runs.

An IPython extension, loaded by the kernel configuration `make setup` writes into the virtual
environment (dev/memorybook_dev/ipython_kernel_config.py), and only in kernels whose working
folder is this repository's notebooks/: JupyterLab's, nbval's, `make run`'s, nbconvert's. A
copy of a notebook anywhere else runs as it is written. Loaded, it:

- removes TYPESAFE_API_KEY from the kernel's environment in CI, so nothing can be sent;
- shows a call the recording lacks, a damaged recording or a failed live call as its explanation
  (the call, its likely cause, a playground link to exactly that call, how to record it) instead
  of a traceback; the cell still fails;
- checks every answer notebook 1's own cache (cooksafe's plain `JsonCache`, which checks
  nothing) hands back, as the collection's cache does for notebooks 2-8: once a cell has made
  `json_cache`, it is wrapped in `AnswersChecked`, so a damaged entry (an answer outside the
  question's options, a probability outside 0-1, a missing `usage`) stops the cell that reads
  it, naming the file and the call; notebook 1's cells are unchanged;
- refuses a cell that assigns one of notebook 1's settings (`REMEMBER_AT = 1`) in a notebook that
  uses notebook 1's code from `memorybook.memory_system`, where the assignment would change
  nothing, and says where to set it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import TracebackType

from memorybook.api_errors import LiveCallFailed, describe_api_failure
from memorybook.config import API_KEY_ENV, replay_only_reason
from memorybook.recording import RecordingError, check_answer, read_recording
from memorybook.recording.cache import cache_key, cooksafe_key, system_one_request
from memorybook.replay import explain_miss, read_threshold_from

NOTEBOOK_1_MODULE = "memorybook.memory_system"
# The collection's recording, as notebook 1 finds it from notebooks/: json_cache/ one folder up
NOTEBOOK_1_CACHE = Path("../json_cache/json_cache.json")


class SettingHasNoEffectError(RecordingError):
    """A cell assigned one of notebook 1's settings where notebook 1's code does not read it."""


def load_ipython_extension(shell) -> None:
    reason = replay_only_reason()
    if reason is not None and reason.startswith("CI"):
        os.environ.pop(API_KEY_ENV, None)  # notebook 1 then builds no client at all

    def show_explained(shell, exc_type, error, traceback, tb_offset=None):
        explained = explanation(shell, error, traceback, reason or f"{API_KEY_ENV} is not set")
        if explained is None:
            shell.showtraceback((exc_type, error, traceback), tb_offset=tb_offset)
        else:
            shell.showtraceback((type(explained), explained, None), exception_only=True)

    shell.set_custom_exc((Exception,), show_explained)
    shell.events.register("post_run_cell", lambda result: check_notebook_1s_answers(shell))
    shell.ast_transformers.append(RefuseSettingsWithoutEffect(shell))
    read_threshold_from(lambda: threshold_the_gate_reads(shell))


def check_notebook_1s_answers(shell) -> None:
    """Wrap notebook 1's own cache, once a cell has made it, so that its answers are checked."""
    from cooksafe import JsonCache

    cache = shell.user_ns.get("json_cache")
    if type(cache) is JsonCache:  # not the collection's CheckedJsonCache, nor wrapped already
        shell.user_ns["json_cache"] = AnswersChecked(cache)


class AnswersChecked:
    """A cooksafe JsonCache whose System One answers are checked as the collection's are
    (memorybook.recording.check_answer): a recorded one when it is read, a live one before the
    cache keeps it. Everything else is the cache's own (`path` included)."""

    def __init__(self, cache) -> None:
        self._cache = cache

    def __getattr__(self, name: str):
        return getattr(self._cache, name)

    def __repr__(self) -> str:
        return repr(self._cache)

    def __call__(self, fn):
        def live(*args, **kwargs):  # what the cache calls for an answer it lacks
            return self._checked(fn.__name__, args, kwargs, fn(*args, **kwargs))

        cached = self._cache(functools.wraps(fn)(live))  # filed under fn's name, as before

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            return self._checked(fn.__name__, args, kwargs, cached(*args, **kwargs))

        return checked

    def _checked(self, name: str, args: tuple, kwargs: dict, answer: object) -> object:
        request = system_one_request(args, kwargs)
        if request is not None:
            check_answer(answer, request, key=cooksafe_key(name, args, kwargs),
                         path=Path(self._cache.path).resolve())
        return answer


def explanation(shell, error: BaseException, traceback: TracebackType | None,
                reason: str) -> Exception | None:
    """What to show for an error a cell raised, or None for its usual traceback."""
    from typesafe_sdk import TypeSafeError

    if isinstance(error, RecordingError):
        return error
    if isinstance(error, TypeSafeError):
        return LiveCallFailed(describe_api_failure(error))
    frames = frames_of(traceback)
    cached_call = next((f.f_locals for f in reversed(frames)
                        if f.f_code.co_name == "_system_one"), None)
    if isinstance(error, LookupError) and cached_call is not None:
        request = {name: cached_call.get(name) for name in ("model", "state", "questions")}
        if all(isinstance(value, str) for value in request.values()):
            return explain_miss({"model": request["model"],
                                 "state": json.loads(request["state"]),
                                 "questions": json.loads(request["questions"])}, reason)
    if isinstance(error, ValueError):  # JSONDecodeError, or pydantic's ValidationError
        return damaged_recording(shell, frames)
    return None


def frames_of(traceback: TracebackType | None) -> list:
    frames = []
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    return frames


def recording_in_use(shell) -> Path:
    """The file notebook 1's cache reads (cooksafe's JsonCache keeps it as `path`), or the
    collection's before that cache is made."""
    cache_path = getattr(shell.user_ns.get("json_cache"), "path", NOTEBOOK_1_CACHE)
    return Path(cache_path).resolve()


def damaged_recording(shell, frames: list) -> RecordingError | None:
    """The recording's own error when reading it, or an answer in it, failed."""
    path = recording_in_use(shell)
    try:
        entries = read_recording(path)
    except RecordingError as error:
        return error
    asked = next((f.f_locals for f in reversed(frames) if f.f_code.co_name == "ask"), None)
    model = shell.user_ns.get("TYPESAFE_MODEL")
    if asked is None or not isinstance(model, str):
        return None
    try:
        state_json, questions_json = request_json(asked["state"], asked["questions"])
    except Exception:  # not the request this error came from
        return None
    key = cache_key(model, state_json, questions_json)
    if key not in entries:
        return None
    try:
        check_answer(entries[key], (model, state_json, questions_json), key=key, path=path)
    except RecordingError as error:
        return error
    return None


def request_json(state: dict, questions: dict) -> tuple[str, str]:
    """The JSON text of a request's state and questions, as ask() files them in the cache."""
    return json.dumps(state), json.dumps({
        question_id: question.model_dump(mode="json", exclude_none=True)
        for question_id, question in questions.items()})


def threshold_the_gate_reads(shell):
    """REMEMBER_AT where the wrapper this kernel holds reads it (notebook 1's own cells, or
    its module); None without a wrapper, and replay then reads the module's."""
    wrapper = shell.user_ns.get("ask_with_memory")
    return getattr(wrapper, "__globals__", {}).get("REMEMBER_AT") if callable(wrapper) else None


class RefuseSettingsWithoutEffect(ast.NodeTransformer):
    """Replaces a cell by one that raises SettingHasNoEffectError when it assigns a setting of
    notebook 1's module in a notebook that uses that module's code rather than its own gate.

    A notebook uses it once the module is imported, or from the cell that imports it (the module
    is not imported yet when the cell is read): an assignment in the importing cell is refused
    too, and so is the first cell that imports it after an earlier cell assigned a setting.
    Notebook 1 defines its own gate (`worth_keeping` in `__main__`) and is left alone.
    """

    def __init__(self, shell) -> None:
        self.shell = shell
        self.assigned_before: dict[str, None] = {}  # settings assigned before the module was used

    def visit_Module(self, node: ast.Module) -> ast.Module:
        own_gate = getattr(self.shell.user_ns.get("worth_keeping"), "__module__", None)
        if own_gate == "__main__":
            return node
        settings = notebook_1_settings()
        assigned = [name for name in assigned_names(node) if name in settings]
        uses_it = NOTEBOOK_1_MODULE in sys.modules or imports_the_collection(node)
        if not uses_it:
            self.assigned_before.update(dict.fromkeys(assigned))
            return node
        earlier = [name for name in self.assigned_before if name in self.shell.user_ns]
        if not assigned and not earlier:
            return node
        name = (assigned or earlier)[0]
        where = "here" if assigned else "in an earlier cell of this kernel"
        undo = "" if assigned else f" Run `del {name}` (or restart the kernel without it) first."
        message = (
            f"{name} {where} would change nothing: this notebook uses notebook 1's code from "
            f"{NOTEBOOK_1_MODULE}, which reads its own {name}. Set it there instead: "
            f"`import {NOTEBOOK_1_MODULE}` and `{NOTEBOOK_1_MODULE}.{name} = ...`, or edit "
            f"notebook 1's settings cell and run notebook 1.{undo} Nothing in this cell was run.")
        raise_it = ast.parse(
            f"raise __import__({__name__!r}, fromlist=['_']).SettingHasNoEffectError({message!r})")
        return ast.fix_missing_locations(raise_it)


def notebook_1_settings() -> set[str]:
    """The upper-case names notebook 1's module binds, read from its source when it is not
    imported: importing it here would make notebook 1's own kernel look like a user of it."""
    module = sys.modules.get(NOTEBOOK_1_MODULE)
    if module is not None:
        return {name for name in vars(module) if name.isupper()}
    spec = importlib.util.find_spec(NOTEBOOK_1_MODULE)
    if spec is None or spec.origin is None:
        return set()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return {name for name in assigned_names(tree) if name.isupper()}


def imports_the_collection(node: ast.Module) -> bool:
    """Whether a cell imports anything from the `memorybook` package (whose modules use
    notebook 1's code)."""
    for statement in ast.walk(node):
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0:
            names = [statement.module or ""]
        else:
            continue
        if any(name == "memorybook" or name.startswith("memorybook.") for name in names):
            return True
    return False


def assigned_names(node: ast.Module) -> list[str]:
    """The names a cell binds by assignment at its top level, inside `if`, `for`, `with` and
    `try` blocks included (not inside functions or classes), tuple targets included."""
    found: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.Assign):
                targets = statement.targets
            elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
                targets = [statement.target]
            else:
                targets = []
            for target in targets:
                found.extend(name.id for name in ast.walk(target)
                             if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store))
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            for block in ("body", "orelse", "finalbody"):
                visit(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                visit(handler.body)

    visit(node.body)
    return found
