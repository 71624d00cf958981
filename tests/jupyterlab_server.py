"""A throwaway JupyterLab server for the browser test: local, token-protected, always stopped.

    with jupyterlab_server(REPO_ROOT) as lab:
        ...                      # anything that can be done while the server starts
        lab.wait_until_ready()   # bounded: /api/status answers, or an error with the server's log
        lab.url("lab/tree/notebooks/01_memory_system.ipynb")

The server runs with this interpreter (the project's environment) on 127.0.0.1, on a port it
binds itself (a port picked here and handed to it could be taken by another process while it
starts), with a random token (in its environment, not on its command line), in a session of its
own (so a Ctrl-C reaches only pytest, which then stops it). Its Jupyter config, data, runtime,
settings and workspace folders are temporary, so nothing from the user's Jupyter set-up changes
what it does and it writes nothing outside them except what the notebooks themselves write:
checkpoints go to the temporary folder too, and document autosave is off, so opening, clearing
and running a notebook never writes it back to disk.

Its kernels never see an API key, so they can only replay the recording. They talk over Unix
sockets like every kernel of a test run (the server inherits conftest.py's choice of
memorybook_dev/kernels.py's provisioner). On leaving the `with` block, whatever happened in it
(Ctrl-C and SIGTERM included: conftest.py), the server is asked to stop (SIGTERM shuts its
kernels down), and whatever it started that is still running a few seconds later is killed. If
the test process is killed without getting there, the server culls idle kernels and then exits
on its own after ten idle minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

STARTUP_SECONDS = 60  # bound on waiting for /api/status to answer
STOP_SECONDS = 10  # bound on waiting for a clean exit after SIGTERM, and again after SIGKILL
HIDDEN_FROM_SERVER = (  # kernels must replay only; and no outside Jupyter set-up
    "TYPESAFE_API_KEY", "TYPESAFE_ENDPOINT", "MEMORYBOOK_RECORDING", "MEMORYBOOK_LIVE_IN_CI",
    "MEMORYBOOK_USAGE_LOG", "JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTER_TOKEN",
)
# User settings, in JupyterLab's settings folder layout: no autosave, no requests to the internet.
SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False,
    },
}


@dataclass
class Lab:
    token: str = field(repr=False)
    log: Path  # the server's stdout and stderr
    info_file: Path  # what the server writes once it listens: its port among other things
    process: subprocess.Popen = field(repr=False)
    base: str = ""  # http://127.0.0.1:PORT/, known once the server is ready

    def url(self, path: str) -> str:
        if not self.base:
            raise RuntimeError("JupyterLab's address is known once wait_until_ready() returns")
        return self.base + path.lstrip("/")

    def get_json(self, path: str):
        request = urllib.request.Request(
            self.url(path), headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    def wait_until_ready(self) -> None:
        """Wait for the port the server chose (its info file), then for /api/status to answer."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with code {self.process.returncode} before it was "
                    "ready:\n" + self.log_tail()
                )
            try:
                if not self.base:
                    port = json.loads(self.info_file.read_text(encoding="utf-8"))["port"]
                    self.base = f"http://127.0.0.1:{port}/"
                self.get_json("api/status")
                return
            except (OSError, ValueError, KeyError):  # not written yet (or half); not answering
                time.sleep(0.2)
        raise RuntimeError(
            f"JupyterLab did not answer /api/status within {STARTUP_SECONDS} s:\n"
            + self.log_tail()
        )

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log, for error messages; the token is blanked out."""
        text = self.log.read_text(encoding="utf-8", errors="replace").replace(self.token, "...")
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def jupyterlab_server(root_dir: Path) -> Iterator[Lab]:
    with tempfile.TemporaryDirectory(prefix="memorybook-lab-") as tmp:
        tmp = Path(tmp)
        settings_dir = tmp / "settings"
        for name, values in SETTINGS.items():
            (settings_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (settings_dir / name).write_text(json.dumps(values), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k not in HIDDEN_FROM_SERVER}
        env.update(
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_DATA_DIR=str(tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONPATH=str(root_dir),  # kernels import the memorybook of the folder served
        )
        token = secrets.token_hex(16)
        env["JUPYTER_TOKEN"] = token  # not on its command line, which every local user can read
        command = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",  # it binds a free port itself: Lab.wait_until_ready reads which
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={settings_dir}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}",  # not in notebooks/
            "--MappingKernelManager.cull_idle_timeout=300",
            "--MappingKernelManager.cull_interval=60",
            "--ServerApp.shutdown_no_activity_timeout=600",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        log = tmp / "server.log"
        with open(log, "wb") as log_file:
            process = subprocess.Popen(
                command, cwd=root_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
        try:
            info_file = tmp / "runtime" / f"jpserver-{process.pid}.json"
            yield Lab(token=token, log=log, info_file=info_file, process=process)
        finally:
            stop(process)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (the server shuts its kernels down); SIGKILL to whatever it started that is left.

    Kernels run in sessions of their own, so they are found as the server's descendants before it
    is asked to stop, and only those still alive afterwards (psutil checks that a pid was not
    reused by another process) are killed.
    """
    try:
        started = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)
    for child in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
