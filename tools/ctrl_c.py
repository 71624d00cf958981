"""How the commands stop: Ctrl-C (or SIGTERM) in one line, work in threads the main thread can
leave, kernels ended.

Imported before the slow imports of a command run as a script, so it must stay light.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, wait

POLL_SECONDS = 0.1  # how often the main thread looks up from waiting (Ctrl-C is seen at once)
STOP_SECONDS = 1.0  # how long stopped kernels get to exit before they are killed


def one_line_while_starting(message: str, status: int = 130) -> None:
    """Until the command installs its own handler, Ctrl-C prints `message` and exits at once."""

    def interrupted(signum: int, frame: object) -> None:
        print(message, file=sys.stderr)
        os._exit(status)

    signal.signal(signal.SIGINT, interrupted)


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a cancelled CI job) or SIGHUP (its terminal closed), raised where Ctrl-C
    raises KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# What stops a command as Ctrl-C does (SIGHUP: POSIX only).
TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                    if hasattr(signal, name))


def stop_as_on_ctrl_c() -> None:
    """From here on, Ctrl-C raises KeyboardInterrupt in the main thread and SIGTERM or SIGHUP
    raises Terminated: a command stops the same way whichever it gets, its kernels ended, what it
    wrote kept, and says so in one line (how_stopped)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for number in TERMINATING:
        signal.signal(number, _terminated)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def how_stopped(error: KeyboardInterrupt) -> str:
    if isinstance(error, Terminated):
        return f"terminated ({signal.Signals(error.signum).name})"
    return "interrupted (Ctrl-C)"


def stop_status(error: KeyboardInterrupt) -> int:
    """The exit status of a command stopped by a signal, as a shell gives it: 128 + its number."""
    return 128 + (error.signum if isinstance(error, Terminated) else signal.SIGINT)


def in_background(function: Callable, *args: object) -> Future:
    """Run `function(*args)` in a daemon thread; its Future holds the result or the error.

    Daemon threads, not a ThreadPoolExecutor: a pool's threads are joined when the interpreter
    exits, so one call stuck on a slow endpoint would keep a stopped run alive. In a thread, a
    notebook run also leaves Ctrl-C to the main thread (nbclient handles it only there).
    """
    future: Future = Future()

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(error)
        else:
            future.set_result(result)

    name = f"background-{getattr(function, '__name__', 'task')}"
    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def wait_for_all(futures: list[Future]) -> list:
    """Their results, or the first error as soon as one fails; Ctrl-C interrupts the wait."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_EXCEPTION)
        for future in done:
            if future.exception() is not None:
                raise future.exception()
    return [future.result() for future in futures]


def stop_kernels() -> None:
    """End the notebook kernels this process started (they run in sessions of their own), and
    remove their folders: their sockets, and connection files that hold their keys. The process
    is about to os._exit(), so their managers will not.

    Kernels are this process's only child processes. They would also exit on their own once
    this process has gone (ipykernel watches its parent), but not before a second or more.
    """
    import psutil  # here, not above: this module is imported before the slow imports

    children = psutil.Process().children()
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            child.terminate()
    _, still_running = psutil.wait_procs(children, timeout=STOP_SECONDS)
    for child in still_running:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            child.kill()
    if (kernels := sys.modules.get("memorybook_dev.kernels")) is not None:  # kernels were started
        kernels.end_kernels_left_running()
