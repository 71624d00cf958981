"""Settings once (memorybook/settings.py): every variable the library reads is read there, when a
part is made and never at import, into one Settings each part is handed; a value that cannot be
used stops it in one line naming the variable; no secret shows in a repr or a message; NEVER is
the one retention default. README.md's table lists every variable with its default, and
CONTRIBUTING.md those only the collection's tests and CI set."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from memorybook.settings import (
    NEVER,
    VARIABLES,
    ConfigError,
    Mode,
    Settings,
)
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
CONTRIBUTING = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
# Read by the library, but set only by the collection's own tests and live CI run: CONTRIBUTING.md
# names them, not the README's table (which says so in its lead sentence).
THE_COLLECTIONS_OWN = {"MEMORYBOOK_USAGE_LOG", "MEMORYBOOK_LIVE_IN_CI"}
KEY = "settings-canary-key-5e2a7c91"
TOKEN = "settings-canary-token-0b8d4f63"
STORE_KEY = "c2V0dGluZ3MtY2FuYXJ5LXN0b3JlLWtleS0zMmJ5dGU="
OLD_KEY = "c2V0dGluZ3MtY2FuYXJ5LW9sZC1zdG9yZS1rZXktMzI="

# A value each variable takes, and what its field then holds: a variable added to Settings needs
# its line here, so that it is known to be read.
SAMPLES = {
    "TYPESAFE_API_KEY": (f" {KEY} ", KEY),
    "TYPESAFE_ENDPOINT": ("http://127.0.0.1:9", "http://127.0.0.1:9"),
    "CI": ("true", True),
    "MEMORYBOOK_RECORDING": ("app.json", Path("app.json")),
    "MEMORYBOOK_RECORD_MODE": ("Record", Mode.RECORD),
    "MEMORYBOOK_TIMEOUT_SECONDS": ("2.5", 2.5),
    "MEMORYBOOK_ALLOW_PLAIN_HTTP": ("1", True),
    "MEMORYBOOK_LIVE_IN_CI": ("1", True),
    "MEMORYBOOK_USAGE_LOG": ("usage.log", Path("usage.log")),
    "MEMORYBOOK_STORE_URL": ("sqlite:///m.sqlite3", "sqlite:///m.sqlite3"),
    "MEMORYBOOK_STORE_KEY": (STORE_KEY, STORE_KEY),
    "MEMORYBOOK_STORE_OLD_KEYS": (f" {OLD_KEY}, ,{STORE_KEY} ", (OLD_KEY, STORE_KEY)),
    "MEMORYBOOK_RETENTION_DAYS": ("1.5", timedelta(days=1.5)),
    "MEMORYBOOK_SWEEP_MINUTES": ("5", timedelta(minutes=5)),
    "MEMORYBOOK_MAX_IN_FLIGHT": ("3", 3),
    "MEMORYBOOK_MAX_BODY_BYTES": ("2000", 2000),
    "MEMORYBOOK_ALLOWED_HOSTS": ("Memory.Example., api.example",
                                 frozenset({"memory.example", "api.example"})),
    "MEMORYBOOK_SERVICE_TOKEN": (TOKEN, TOKEN),
    "MEMORYBOOK_LOG_FORMAT": ("JSON", "json"),
}
# A value each variable that can be wrong refuses, in one line naming it.
UNUSABLE = {
    "MEMORYBOOK_RECORD_MODE": "tape",
    "MEMORYBOOK_TIMEOUT_SECONDS": "abc",
    "MEMORYBOOK_RETENTION_DAYS": "-1",
    "MEMORYBOOK_SWEEP_MINUTES": "soon",
    "MEMORYBOOK_MAX_IN_FLIGHT": "0",
    "MEMORYBOOK_MAX_BODY_BYTES": "1e6",
    "MEMORYBOOK_SERVICE_TOKEN": "a token with spaces inside",
    "MEMORYBOOK_LOG_FORMAT": "xml",
}
# Variables whose default weakens what protects the customers' data: set but blank (an empty
# ${VALUE} in a deployment's file), each is refused rather than read as unset.
BLANK_REFUSED = {"MEMORYBOOK_SERVICE_TOKEN", "MEMORYBOOK_STORE_KEY", "MEMORYBOOK_RETENTION_DAYS"}


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment holding none of the variables Settings reads."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_only_memorybook_settings_reads_the_environment():
    reading = re.compile(r"\benviron\b|\bgetenv\(")
    readers = sorted(str(path.relative_to(REPO_ROOT))
                     for path in (REPO_ROOT / "memorybook").rglob("*.py")
                     if reading.search(path.read_text(encoding="utf-8")))
    assert readers == ["memorybook/settings.py"], (
        f"these modules read the environment: {readers}; only memorybook/settings.py may. Give "
        "the setting a field of Settings there, and hand the part its Settings (settings=None: "
        "Settings.from_environment() when the part is made)")


def test_importing_any_module_reads_no_setting():
    # Every variable holds a value Settings refuses: an import that read one would fail.
    modules = sorted(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
                     .removesuffix(".__init__")
                     for path in (REPO_ROOT / "memorybook").rglob("*.py"))
    code = (f"import {', '.join(modules)}\n"
            "from memorybook.settings import ConfigError, Settings\n"
            "try:\n    Settings.from_environment()\nexcept ConfigError:\n    print('refused')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, env={**clean_environment(), **UNUSABLE})
    assert result.returncode == 0 and result.stdout == "refused\n", (
        "importing memorybook's modules read the settings (the last lines say which module); "
        "read them when a part is made, not at import (memorybook/settings.py): "
        f"{result.stdout}{result.stderr[-2000:]}")


def clean_environment() -> dict[str, str]:
    import os

    return {name: value for name, value in os.environ.items() if name not in VARIABLES}


def test_every_variable_sets_its_field_and_says_so(no_settings):
    assert set(SAMPLES) == set(VARIABLES), (
        f"tests/test_settings.py's SAMPLES lacks {sorted(set(VARIABLES) - set(SAMPLES))} or "
        f"names what Settings does not read: {sorted(set(SAMPLES) - set(VARIABLES))}")
    defaults = Settings()
    for variable, (text, value) in SAMPLES.items():
        no_settings.setenv(variable, text)
        field = VARIABLES[variable]
        read = Settings.from_environment()
        assert getattr(read, field) == value != getattr(defaults, field), (
            f"{variable}={text!r} gave Settings.{field} = {getattr(read, field)!r}, not "
            f"{value!r} (memorybook/settings.py)")
        assert read.source(field) == f"${variable}" and defaults.source(field) == (
            f"Settings.{field}"), read.source(field)
        no_settings.delenv(variable)


def test_a_field_given_wins_and_its_variable_is_not_read(no_settings):
    for variable, text in UNUSABLE.items():
        no_settings.setenv(variable, text)
    given = {"record_mode": "live", "timeout_seconds": 5, "retention": NEVER,
             "sweep_every": timedelta(seconds=1), "max_in_flight": 2, "max_body_bytes": 10,
             "token": None, "log_format": "text"}
    settings = Settings.from_environment(**given)
    assert {name: getattr(settings, name) for name in given} == {
        **given, "record_mode": Mode.LIVE, "timeout_seconds": 5.0}, settings
    with pytest.raises(TypeError, match="no field colour"):
        Settings.from_environment(colour="blue")


@pytest.mark.parametrize("variable", sorted(UNUSABLE))
def test_an_unusable_value_is_refused_in_one_line_naming_its_variable(no_settings, variable):
    no_settings.setenv(variable, UNUSABLE[variable])
    with pytest.raises(ConfigError) as refused:
        Settings.from_environment()
    said = str(refused.value)
    assert variable in said and "\n" not in said, (
        f"{variable}={UNUSABLE[variable]!r} must be refused in one line naming it: {said!r}")
    if variable == "MEMORYBOOK_SERVICE_TOKEN":
        assert UNUSABLE[variable] not in said, "the message repeats the token"


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_a_variable_set_but_blank_is_refused_where_unset_would_weaken_protection(no_settings,
                                                                                 variable):
    for blank in ("", "  \t"):
        no_settings.setenv(variable, blank)
        if variable not in BLANK_REFUSED:
            assert Settings.from_environment() == Settings(), (
                f"{variable}={blank!r} must read as unset (memorybook/settings.py)")
            continue
        with pytest.raises(ConfigError) as refused:
            Settings.from_environment()
        said = str(refused.value)
        assert variable in said and "blank" in said and "\n" not in said, (
            f"{variable} set but blank must stop the part being made, in one line naming it: "
            "unset, its default protects less (a token off, a key file beside the database, "
            "memories kept for ever); give its field `unset_means=` in memorybook/settings.py: "
            f"{said!r}")
    if variable == "MEMORYBOOK_STORE_KEY":
        with pytest.raises(ConfigError, match="store_key is blank"):
            Settings(store_key=" ")


@pytest.mark.parametrize("given, named", [
    ({"record_mode": "tape"}, "mode="), ({"timeout_seconds": 0}, "timeout_seconds"),
    ({"timeout_seconds": float("nan")}, "timeout_seconds"),
    ({"retention": timedelta(0)}, "retention"), ({"retention": None}, "retention"),
    ({"retention": timedelta(days=36_526)}, "retention"),
    ({"max_in_flight": 0}, "max_in_flight"), ({"max_body_bytes": True}, "max_body_bytes"),
    ({"sweep_every": 60}, "sweep_every"), ({"token": "short"}, "token"),
    ({"allowed_hosts": "a.example"}, "allowed_hosts"), ({"in_ci": "yes"}, "in_ci"),
    ({"store_old_keys": OLD_KEY}, "store_old_keys")])
def test_an_unusable_field_is_refused_in_one_line_naming_it(given, named):
    with pytest.raises(ConfigError) as refused:
        Settings(**given)
    said = str(refused.value)
    assert named in said and "\n" not in said, (
        f"Settings({given}) must be refused in one line naming {named}: {said!r}")


def test_no_secret_shows_in_a_repr(no_settings):
    secrets = {"TYPESAFE_API_KEY": KEY, "MEMORYBOOK_STORE_KEY": STORE_KEY,
               "MEMORYBOOK_STORE_OLD_KEYS": OLD_KEY,
               "MEMORYBOOK_SERVICE_TOKEN": TOKEN,
               "MEMORYBOOK_STORE_URL": "postgresql://app:pw-7f3e1d@db/memories",
               "TYPESAFE_ENDPOINT": "https://api.example/?password=pw-8c2b0a"}
    for variable, value in secrets.items():
        no_settings.setenv(variable, value)
    shown = repr(Settings.from_environment())
    for value in (KEY, STORE_KEY, OLD_KEY, TOKEN, "pw-7f3e1d", "pw-8c2b0a"):
        assert value not in shown, f"repr(Settings) shows a secret: {shown}"
    assert shown.count("=<set>") == len(secrets), (
        f"repr(Settings) must say that each secret is set, without it: {shown}")


# -- retention --------------------------------------------------------------------------------

def test_never_is_one_value_the_default_and_a_variables_value(no_settings):
    import memorybook
    import memorybook.store

    assert memorybook.NEVER is memorybook.store.NEVER is NEVER, (
        "memorybook and memorybook.store must export the same NEVER (memorybook/settings.py)")
    assert Settings().retention is Settings.from_environment().retention is NEVER
    for text in ("never", "NEVER", " Never "):
        no_settings.setenv("MEMORYBOOK_RETENTION_DAYS", text)
        assert Settings.from_environment().retention is NEVER, text


def test_open_store_and_the_service_take_the_settings_retention(no_settings, tmp_path):
    from memorybook import MadeUpJev, open_store
    from memorybook.service import create_app
    from tests.helpers import new_key, talk

    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    no_settings.setenv("MEMORYBOOK_STORE_KEY", new_key())
    opened = {}
    for case, retention, days in (("unset", None, None), ("never", None, "never"),
                                  ("2 days", None, "2"), ("given", timedelta(days=3), "2"),
                                  ("NEVER given", NEVER, "2")):
        if days is not None:
            no_settings.setenv("MEMORYBOOK_RETENTION_DAYS", days)
        with open_store(url, retention=retention) as store:
            opened[case] = store.retention
    assert opened == {"unset": None, "never": None, "2 days": timedelta(days=2),
                      "given": timedelta(days=3), "NEVER given": None}, (
        "open_store(retention=None) must take the settings' retention ($MEMORYBOOK_RETENTION_DAYS, "
        f"else NEVER: the store keeps None), and a retention given wins: {opened}")
    with open_store(url, settings=Settings.from_environment(retention=timedelta(days=4))) as store:
        assert store.retention == timedelta(days=4), "open_store(settings=...) must take theirs"

    app = create_app(url, ask=MadeUpJev(lambda state, questions: {}).ask_async)

    async def retention_served(http):
        return app.state.memory.store.retention

    assert talk(app, retention_served) == timedelta(days=2), (
        "create_app() must open its store with the settings' retention (memorybook/service.py)")


# -- the key, however it was given ------------------------------------------------------------

def test_a_key_given_only_in_settings_is_kept_out_of_errors_and_logs(no_settings, caplog):
    from typesafe_sdk import Noul, TypeSafeError

    from memorybook.api_errors import describe_api_failure
    from memorybook.config import RECORDING_PATH
    from memorybook.jev import Jev
    from tools.loopback_server import LoopbackSystemOne

    with LoopbackSystemOne(RECORDING_PATH, failure="bad_request", echo_headers=True) as server:
        settings = Settings(api_key=KEY, endpoint=server.base_url)
        jev = Jev(mode="live", settings=settings)
        with caplog.at_level(logging.DEBUG), pytest.raises(TypeSafeError) as failed:
            jev.ask({"ticket": {"subject": "Invoice"}},
                    {"yes": Noul(instructions="Is `ticket.subject` about billing?")})
        sent = [request["headers"].get("authorization") for request in server.requests]
    assert sent and set(sent) == {f"Bearer {KEY}"}, f"the key given was not the one sent: {sent}"
    shown = f"{failed.value} {failed.value!r} {vars(failed.value)}"
    described = describe_api_failure(failed.value, settings=settings)
    assert "[redacted]" in shown and KEY not in shown + described + caplog.text, (
        "a key given in Settings (not $TYPESAFE_API_KEY) must be kept out of the SDK's error, "
        "describe_api_failure() and the libraries' logs as the environment's is "
        "(memorybook/transport.py, memorybook/redaction.py)")


# -- README.md's table ------------------------------------------------------------------------

def readme_table(header: str) -> dict[str, list[str]]:
    """The rows of the README table under `header` (its first line), by their first cell."""
    lines = README.split(header + "\n", 1)[1].splitlines()[1:]  # after the |---| line
    rows = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def variables_table() -> dict[str, list[str]]:
    assert "| variable | sets | default |" in README, (
        "README.md lost its table of variables ('| variable | sets | default |', in 'Use it in "
        "an app'): tests/test_settings.py checks it against memorybook/settings.py")
    return readme_table("| variable | sets | default |")


def test_the_readme_table_lists_every_variable_the_library_reads_and_no_other():
    listed = variables_table()
    read = {variable for variable in VARIABLES if variable.startswith(("MEMORYBOOK_", "TYPESAFE_"))}
    missing = sorted(read - THE_COLLECTIONS_OWN - set(listed))
    assert not missing, (
        f"memorybook/settings.py reads {missing}, which README.md's table of variables ('Use it "
        "in an app') lacks: add a row for each there (variable, what it sets, default)")
    unread = sorted(set(listed) - read)
    assert not unread, (
        f"README.md's table of variables lists {unread}, which memorybook/settings.py does not "
        "read: remove the row, or read the variable there (a field of Settings)")
    elsewhere = sorted(set(listed) & THE_COLLECTIONS_OWN)
    assert not elsewhere, f"{elsewhere} are the collection's own: CONTRIBUTING.md lists them"
    assert "the tests' own are in CONTRIBUTING" in README, (
        "the README table's lead sentence must say where the tests' own variables are")


@pytest.mark.parametrize("variable", sorted(set(VARIABLES) - THE_COLLECTIONS_OWN - {"CI"}))
def test_the_readme_gives_each_variables_default(no_settings, variable):
    table = variables_table()
    assert variable in table, f"README.md's table of variables lacks a row for {variable}"
    sets, default = table[variable]
    field = VARIABLES[variable]
    library = getattr(Settings(), field)
    value = re.fullmatch(r"`([^`]+)`", default)
    if value is None:  # in words: the field has no value of its own until one is given
        assert library in (None, frozenset()), (
            f"README.md's table says {variable} defaults to {default!r}, but Settings.{field} "
            f"defaults to {library!r}: write that value there, in backticks")
        return
    no_settings.setenv(variable, value.group(1))
    assert Settings.from_environment() == Settings(), (
        f"README.md's table says {variable} defaults to {default}, but setting it so differs "
        f"from leaving it unset (Settings.{field} defaults to {library!r} in "
        "memorybook/settings.py): correct the table or the default")


def mentioned(text: str) -> set[str]:
    """The MEMORYBOOK_ variables `text` names."""
    return set(re.findall(r"\bMEMORYBOOK_[A-Z0-9_]*[A-Z0-9]\b", text))


def test_every_variable_the_collection_uses_is_in_the_readme_or_contributing():
    files = subprocess.run(["git", "ls-files", "memorybook", "tools", "tests", "dev", "examples",
                            "benchmarks", "conftest.py", "Makefile", ".github", ".ci",
                            "pyproject.toml"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    used: dict[str, str] = {}
    for name in files:
        path = REPO_ROOT / name
        if path.suffix in (".py", ".sh", ".yml", ".toml", ".md", "") and path.is_file():
            for variable in mentioned(path.read_text(encoding="utf-8", errors="replace")):
                used.setdefault(variable, name)
    # A prefix of other names is no variable (`MEMORYBOOK_USAGE`, matching MEMORYBOOK_USAGE_LOG
    # and MEMORYBOOK_USAGE_DIR in tests/test_usage_folder.py).
    used = {variable: where for variable, where in used.items()
            if not any(other.startswith(variable + "_") for other in used)}
    documented = set(variables_table()) | mentioned(CONTRIBUTING)
    undocumented = {variable: where for variable, where in sorted(used.items())
                    if variable not in documented}
    assert "MEMORYBOOK_STORE_KEY" in used and not undocumented, (
        f"these variables (and a file using each) are in neither README.md's table of variables "
        f"nor CONTRIBUTING.md: {undocumented}; an app's setting goes in the table (read in "
        "memorybook/settings.py), one only the collection's tests or CI set in CONTRIBUTING.md")
