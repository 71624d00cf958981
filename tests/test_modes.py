"""Recording modes, as VCR-style libraries name theirs: replay (no key, always in CI), record
(a key and a recording asked for) and live (a key and none): which one a Jev is in, what each
sends, and what each writes. Live calls go to a loopback server, never off this machine."""

from __future__ import annotations

import inspect
import json
import re

import pytest

import memorybook
from memorybook import ConfigError, MemorybookError, Mode, RecordingMissError
from memorybook.config import RECORDING_PATH
from memorybook.example import ROUTE, later_state
from tests.helpers import COMMITTED_RECORDING, REPO_ROOT, fresh_jev
from tools.loopback_server import LoopbackSystemOne

KEY = "mode-test-key-91f3"
SLOW = later_state("C-1042", 0)  # plainly routed, the recording holds it: cloud_ops 0.55


@pytest.mark.parametrize(("env", "recording", "expected"), [
    ({}, None, Mode.REPLAY),
    ({}, "app.json", Mode.REPLAY),
    ({"TYPESAFE_API_KEY": KEY, "CI": "true"}, "app.json", Mode.REPLAY),
    ({"TYPESAFE_API_KEY": KEY}, "app.json", Mode.RECORD),
    ({"TYPESAFE_API_KEY": KEY}, None, Mode.LIVE),
    ({"TYPESAFE_API_KEY": KEY, "MEMORYBOOK_RECORD_MODE": "replay"}, "app.json", Mode.REPLAY),
    ({"TYPESAFE_API_KEY": KEY, "MEMORYBOOK_RECORDING": "{tmp}/app.json"}, None, Mode.RECORD),
])
def test_the_mode_follows_the_key_and_the_recording_asked_for(monkeypatch, tmp_path, env,
                                                              recording, expected):
    env = {name: value.format(tmp=tmp_path) for name, value in env.items()}
    jev = fresh_jev(monkeypatch, recording and tmp_path / recording, **env)
    assert jev.mode is expected, (
        f"with {sorted(env)} and recording={recording}, a Jev is in {jev.mode} mode, not "
        f"{expected}: see choose_mode() in memorybook/jev.py")


def test_replay_with_no_recording_asked_for_reads_the_collections(monkeypatch):
    jev = fresh_jev(monkeypatch)
    assert jev.recording == RECORDING_PATH.resolve(), (
        f"replaying with no recording asked for reads {jev.recording}, not the collection's")


@pytest.mark.parametrize(("env", "mode", "says"), [
    ({}, "record", "TYPESAFE_API_KEY is not set"),
    ({"TYPESAFE_API_KEY": KEY, "CI": "true"}, "live", "CI is set"),
    ({"TYPESAFE_API_KEY": KEY}, "record", "name its file"),
    ({"TYPESAFE_API_KEY": KEY}, "tape", "replay, record, live"),
])
def test_a_mode_that_cannot_be_had_is_a_config_error_saying_why(monkeypatch, env, mode, says):
    with pytest.raises(ConfigError) as refused:
        fresh_jev(monkeypatch, mode=mode, **env)
    assert says in str(refused.value), f"mode={mode!r} was refused with: {refused.value}"
    assert isinstance(refused.value, MemorybookError)


def test_live_with_a_recording_asked_for_is_refused_naming_it(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="live mode reads and writes no recording"):
        fresh_jev(monkeypatch, tmp_path / "app.json", mode="live", TYPESAFE_API_KEY=KEY)


def test_replay_sends_nothing_even_with_a_key_and_names_the_apps_recording(monkeypatch,
                                                                          tmp_path):
    recording = tmp_path / "app.json"
    recording.write_text("{}", encoding="utf-8")
    with LoopbackSystemOne({}) as server:
        jev = fresh_jev(monkeypatch, recording, mode="replay", TYPESAFE_API_KEY=KEY,
                        TYPESAFE_ENDPOINT=server.base_url, MEMORYBOOK_LIVE_IN_CI="1")
        with pytest.raises(RecordingMissError) as missed:
            jev.ask(SLOW, ROUTE)
        assert server.requests == [], "replay mode sent a request"
    how = missed.value.how_to_record
    assert str(recording) in how and "MEMORYBOOK_RECORD_MODE=record" in how, (
        f"a miss in an app's own recording must say how to record into it, not: {how}")
    assert recording.read_text(encoding="utf-8") == "{}", "replay mode wrote to the recording"


def test_record_asks_what_the_recording_lacks_and_adds_it_there_only(monkeypatch, tmp_path):
    recording = tmp_path / "app.json"
    with LoopbackSystemOne(RECORDING_PATH) as server:
        jev = fresh_jev(monkeypatch, recording, TYPESAFE_API_KEY=KEY,
                        TYPESAFE_ENDPOINT=server.base_url, MEMORYBOOK_LIVE_IN_CI="1")
        first = jev.ask(SLOW, ROUTE).answers["team"]
        again = jev.ask(SLOW, ROUTE).answers["team"]
        asked = len(server.requests)
    assert (first.choice, first.probabilities[first.choice]) == ("cloud_ops", 0.55)
    assert again == first and asked == 1, (
        f"record mode asked {asked} times for one call: the second must come from the recording")
    saved = json.loads(recording.read_text(encoding="utf-8"))
    assert len(saved) == 1, f"record mode wrote {len(saved)} answers for one call"
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING, (
        "record mode into an app's recording changed the committed one")


def test_live_asks_every_call_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with LoopbackSystemOne(RECORDING_PATH) as server:
        jev = fresh_jev(monkeypatch, TYPESAFE_API_KEY=KEY, TYPESAFE_ENDPOINT=server.base_url,
                        MEMORYBOOK_LIVE_IN_CI="1")
        for _ in range(2):
            jev.ask(SLOW, ROUTE)
        asked = len(server.requests)
    assert (jev.mode, jev.recording, asked) == (Mode.LIVE, None, 2), (
        f"live mode: {jev.mode}, recording {jev.recording}, {asked} requests for two calls")
    assert list(tmp_path.iterdir()) == [], f"live mode wrote {list(tmp_path.iterdir())}"
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING, "live mode changed the recording"


def test_every_error_an_app_can_catch_derives_from_memorybook_error():
    exported = [getattr(memorybook, name) for name in memorybook.__all__]
    errors = [value for value in exported
              if inspect.isclass(value) and issubclass(value, BaseException)]
    assert len(errors) >= 10, f"memorybook exports only {len(errors)} errors"
    strays = [error.__name__ for error in errors if not issubclass(error, MemorybookError)]
    assert strays == [], (
        f"{strays} do not derive from memorybook.MemorybookError: add it to their bases where "
        f"they are defined")


def test_threads_asking_first_together_share_one_jev_and_its_cache():
    import threading
    import time

    from memorybook.jev import made_once

    made = []

    def make():
        made.append(object())
        time.sleep(0.05)  # long enough for every thread to ask meanwhile
        return made[-1]

    once, got = made_once(make), []
    threads = [threading.Thread(target=lambda: got.append(once())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len(set(map(id, got))) == 1, (
        f"{len(made)} objects were made for threads asking first together: the example's Jev "
        f"must be made once (made_once(), memorybook/jev.py), or a call one Jev recorded is "
        f"asked live again by the other")


# -- README.md's table of modes ---------------------------------------------------------------

# When choose_mode() (memorybook/jev.py) picks each mode by itself, as README.md's table says in
# its "when" column: a mode added to Mode needs its cases here and its row there.
MODE_CASES = {
    Mode.REPLAY: [{}, {"recording": "app.json"}, {"api_key": KEY, "in_ci": True},
                  {"api_key": KEY, "in_ci": True, "recording": "app.json"}],
    Mode.RECORD: [{"api_key": KEY, "recording": "app.json"}],
    Mode.LIVE: [{"api_key": KEY}],
}
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def readme_modes() -> dict[str, str]:
    """README.md's table of a Jev's modes: {mode: when it is chosen}."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    header = "| mode | when | a call the recording lacks | writes |"
    assert header in readme, (
        f"README.md lost its table of modes ({header!r}, in 'Use it in an app'): "
        "tests/test_modes.py checks it against memorybook.jev.Mode and choose_mode()")
    rows = {}
    for line in readme.split(header + "\n", 1)[1].splitlines()[1:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    counted = re.search(r"A `Jev` has (\w+)\s+modes", readme)
    assert counted and counted.group(1) == NUMBER_WORDS.get(len(rows)), (
        f"README.md says a Jev has {counted and counted.group(1)} modes above a table of "
        f"{len(rows)}: make them agree")
    return rows


def test_the_readmes_table_of_modes_is_every_mode_a_jev_has(monkeypatch):
    from memorybook.settings import Settings

    listed = readme_modes()
    assert list(listed) == list(Mode), (
        f"README.md's table of modes lists {list(listed)}, memorybook.jev.Mode has "
        f"{[mode.value for mode in Mode]}: give each mode its row there ('Use it in an app': "
        "when, a call the recording lacks, writes), in Mode's order, and no other")
    for name in listed:
        monkeypatch.setenv("MEMORYBOOK_RECORD_MODE", name)
        assert Settings.from_environment().record_mode == name, (
            f"MEMORYBOOK_RECORD_MODE={name}, which the README lists, is not taken "
            "(checked_mode() in memorybook/settings.py)")


def test_choose_mode_picks_each_mode_where_the_readme_says():
    from memorybook.jev import choose_mode
    from memorybook.settings import Settings

    assert set(MODE_CASES) == set(Mode) == set(readme_modes()), (
        f"tests/test_modes.py's MODE_CASES must say, for each mode of memorybook.jev.Mode and "
        f"README.md's table, when choose_mode() picks it: it has {sorted(MODE_CASES)}")
    for mode, cases in MODE_CASES.items():
        for case in cases:
            chosen, _, _ = choose_mode(None, None, settings=Settings(**case))
            assert chosen is mode, (
                f"with {case} choose_mode() picks {chosen}, where README.md's table says "
                f"{mode} ({readme_modes()[mode]!r}): correct choose_mode() in "
                "memorybook/jev.py, or the table")
