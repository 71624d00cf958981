"""`make test` (tools/test.sh) stops when it is told to.

SIGTERM from `kill`, `timeout`, make or a cancelled CI job reaches the script alone; the script
must pass it on to its pytest run, which then stops as on Ctrl-C (its tests' clean-ups run),
within seconds rather than once every test has run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil

from tests.helpers import REPO_ROOT, wait_until

STOP_BOUND = 20.0  # seconds from SIGTERM to the script having exited
# A test that is still running when the script gets SIGTERM.
WAITS = """
import os, time

def test_waits():
    open(os.environ["STARTED"], "w").close()
    try:
        time.sleep(120)
    finally:  # as a fixture stops its server
        open(os.environ["STARTED"] + ".cleaned-up", "w").close()
"""


def test_sigterm_to_the_test_command_stops_its_pytest_run_within_seconds(tmp_path):
    test_file, started = tmp_path / "test_waits.py", tmp_path / "started"
    test_file.write_text(WAITS, encoding="utf-8")
    env = {**os.environ, "STARTED": str(started), "MEMORYBOOK_TEST_WORKERS": "1",
           "MEMORYBOOK_TEST_PG_URL": "postgresql://127.0.0.1:1/unused"}  # no server started
    # The collection's conftest.py as a plugin: the test file is outside the collection.
    script = subprocess.Popen(["tools/test.sh", "-q", "-p", "conftest", str(test_file)],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_until(started.exists, 60, "the test to start")
        ran = [p for p in psutil.process_iter(["pid"]) if _in_session(p, script.pid)]
        began = time.monotonic()
        script.send_signal(signal.SIGTERM)  # the script alone, as `kill` or `timeout` send it
        try:
            output, _ = script.communicate(timeout=STOP_BOUND + 60)
        except subprocess.TimeoutExpired:
            output = ""
        took = time.monotonic() - began
        assert took < STOP_BOUND, (
            f"tools/test.sh took {took:.0f} s to exit after SIGTERM: it must run pytest in the "
            "background, wait for it, and pass SIGTERM on from its trap")
        assert script.returncode == 128 + signal.SIGTERM, output
        assert started.with_name("started.cleaned-up").exists(), (
            "the running test's clean-up did not run: tools/test.sh must pass SIGTERM on to the "
            "xdist workers too, and conftest.py make it stop a test as Ctrl-C does")
        left = [p.pid for p in ran if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"processes of the run outlived it: {left}\n{output}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
        script.communicate()


def _in_session(process: psutil.Process, session: int) -> bool:
    with contextlib.suppress(psutil.Error, OSError):
        return os.getsid(process.pid) == session
    return False
