"""Jupyter kernels that talk over Unix sockets in a folder of their own, never over TCP ports.

Over TCP, jupyter_client picks ports that are free at that moment and the kernel binds them a
moment later. Any process on the machine can take one in between: another process starting
kernels, a test's loopback server, an outgoing connection. The kernel then dies with "Address
already in use", or stays up on the wrong sockets and its client waits out the whole start-up
timeout. Sockets in a new folder per kernel cannot collide.

The folder also holds the kernel's connection file, with the key that signs its messages, where a
manager has not named one (nbval's and nbclient's do not; jupyter_client would then leave it in
/tmp whenever the manager never shuts the kernel down, as after Ctrl-C). So removing the folder
leaves nothing of the kernel behind.

`UnixSocketProvisioner` is a jupyter_client kernel provisioner, registered in pyproject.toml as
"memorybook-unix-sockets". With JUPYTER_DEFAULT_PROVISIONER_NAME set to that name, every kernel
manager in the process and its children uses it: nbval's, nbclient's, nbconvert's and a JupyterLab
server's. conftest.py sets it for every test run, and tools/execute.py for `make run` and
`make record`. The reader's own JupyterLab (`make lab`) keeps jupyter_client's default.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from jupyter_client.provisioning import LocalProvisioner

PROVISIONER_NAME = "memorybook-unix-sockets"
PROVISIONERS_GROUP = "jupyter_client.kernel_provisioners"  # entry points jupyter_client reads
DEFAULT_PROVISIONER_ENV = "JUPYTER_DEFAULT_PROVISIONER_NAME"  # read by jupyter_client

_RUNNING: set[UnixSocketProvisioner] = set()  # the kernels this process started, until shut down


class ProvisionerNotInstalled(RuntimeError):
    """The environment does not register the provisioner: this project was installed before it."""


def use_unix_socket_kernels() -> None:
    """Make every kernel this process or its children start use `UnixSocketProvisioner`.

    Call it before the first kernel starts: jupyter_client reads the variable once per process.
    jupyter_client finds provisioners through their entry points, which this project's install
    registers; without it every kernel would fail with a misleading "No such kernel named python3".
    """
    if not entry_points(group=PROVISIONERS_GROUP, name=PROVISIONER_NAME):
        raise ProvisionerNotInstalled(
            f"The kernel provisioner {PROVISIONER_NAME!r} is not registered in this environment "
            "(pyproject.toml declares it; this .venv was set up before it was added). "
            "Run `make setup` to install the project again.")
    os.environ[DEFAULT_PROVISIONER_ENV] = PROVISIONER_NAME


def end_kernels_left_running() -> None:
    """Kill the kernels this process started and has not shut down, and remove their folders.

    It runs when this process exits: after Ctrl-C, say, no manager shuts its kernel down, and a
    kernel still starting would make its sockets after its folder was removed. A process about
    to os._exit() calls it.
    """
    for provisioner in list(_RUNNING):
        provisioner.end_now()


atexit.register(end_kernels_left_running)


class UnixSocketProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the kernel's sockets and connection file in a new
    private folder.

    The folder lives as long as the kernel: a restart keeps it, a shutdown removes it.
    """

    folder: Path | None = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        manager = self.parent
        if manager is not None and self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="memorybook-kernel-"))
            _RUNNING.add(self)
            manager.transport = "ipc"
            manager.ip = str(self.folder / "kernel")  # sockets kernel-1 ... kernel-5
            manager.cache_ports = False  # port numbers only name files here
            if not manager.connection_file:
                manager.connection_file = str(self.folder / "connection.json")
        return await super().pre_launch(**kwargs)

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart=restart)
        if not restart:
            self._remove_folder()

    def end_now(self) -> None:
        """Kill the kernel (its process group), wait for it, and remove its folder."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                if self.pgid:
                    os.killpg(self.pgid, signal.SIGKILL)
                else:
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self._remove_folder()

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        _RUNNING.discard(self)
