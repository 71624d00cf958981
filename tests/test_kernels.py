"""Kernels of a test run talk over Unix sockets in a folder of their own (memorybook_dev).

Over TCP, a kernel binds ports its manager found free a moment earlier; in a parallel run another
process can take one first, and nbval then waits out its 60 s start-up timeout on a kernel that
never answers. These tests start kernels the way nbval and nbclient do, through jupyter_client's
default provisioner, and check where their sockets are.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from memorybook_dev import kernels
from tests.helpers import REPO_ROOT, kernels_of, wait_until


def started_kernel() -> KernelManager:
    manager = KernelManager(kernel_name="python3")  # no transport given, as nbval does it
    manager.start_kernel(extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return manager


def sockets_of(manager: KernelManager) -> list[Path]:
    folder = Path(manager.ip).parent
    return sorted(path for path in folder.iterdir() if stat.S_ISSOCK(path.stat().st_mode))


def test_a_test_runs_kernels_use_unix_sockets_in_a_folder_of_their_own():
    assert os.environ[kernels.DEFAULT_PROVISIONER_ENV] == kernels.PROVISIONER_NAME  # conftest.py
    first, second = started_kernel(), started_kernel()
    try:
        for manager in (first, second):
            assert isinstance(manager.provisioner, kernels.UnixSocketProvisioner)
            assert manager.transport == "ipc"
            client = manager.client()
            client.start_channels()
            client.wait_for_ready(timeout=60)
            client.stop_channels()
            assert len(sockets_of(manager)) == 5  # shell, iopub, stdin, control, heartbeat
        assert Path(first.ip).parent != Path(second.ip).parent
    finally:
        folders = [Path(manager.ip).parent for manager in (first, second)]
        for manager in (first, second):
            manager.shutdown_kernel(now=True)
    assert not any(folder.exists() for folder in folders), "a shut-down kernel left its folder"


def test_a_restarted_kernel_keeps_its_folder_and_answers_again():
    manager = started_kernel()
    try:
        folder = Path(manager.ip).parent
        manager.restart_kernel(now=True)
        assert Path(manager.ip).parent == folder and folder.is_dir()
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        client.stop_channels()
    finally:
        manager.shutdown_kernel(now=True)
    assert not folder.exists()


def test_a_process_about_to_exit_can_end_its_kernels_and_remove_their_folders():
    manager = started_kernel()
    folder, connection_file = Path(manager.ip).parent, Path(manager.connection_file)
    try:
        assert connection_file.parent == folder, (
            "the kernel's connection file, which holds its key, is not in its folder: "
            "UnixSocketProvisioner.pre_launch must put it there")
        kernels.end_kernels_left_running()
        assert not folder.exists()
        assert not manager.is_alive()
    finally:
        manager.shutdown_kernel(now=True)  # its folder is gone already: nothing fails


# A process that ends with its kernel still running, as a test run's worker after Ctrl-C.
ENDS_WITH_ITS_KERNEL_RUNNING = """
from jupyter_client.manager import KernelManager
manager = KernelManager(kernel_name="python3")
manager.start_kernel(extra_arguments=["--IPKernelApp.log_level=ERROR"])
print(manager.ip, flush=True)
raise KeyboardInterrupt
"""


def test_a_process_that_ends_without_shutting_its_kernel_down_leaves_none_of_its_files():
    run = subprocess.Popen([sys.executable, "-c", ENDS_WITH_ITS_KERNEL_RUNNING], cwd=REPO_ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = run.communicate(timeout=60)
    assert "KeyboardInterrupt" in stderr, stderr
    folder = Path(stdout.strip()).parent
    assert folder.name.startswith("memorybook-kernel-"), stdout
    assert not folder.exists(), (
        f"the kernel's folder was left with {sorted(p.name for p in folder.iterdir())} (its "
        "connection file holds its key): memorybook_dev/kernels.py must remove the folders of "
        "kernels still running when the process exits (atexit)")
    wait_until(lambda: not kernels_of(run.pid), 10, "the kernel to exit after its parent")


def test_an_environment_set_up_before_the_provisioner_existed_is_told_to_set_up_again(
        monkeypatch):
    monkeypatch.setattr(kernels, "entry_points", lambda **selection: [])
    with pytest.raises(kernels.ProvisionerNotInstalled, match=r"Run `make setup`"):
        kernels.use_unix_socket_kernels()
