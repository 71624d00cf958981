# IPython kernel configuration for this repository's virtual environment: `make setup` copies it
# to .venv/etc/ipython/, where every kernel of that environment reads it. A kernel working in a
# collection's notebooks/ folder (this checkout's, or a copy of it) loads the collection's set-up
# (dev/memorybook_dev/collection_kernel.py) before its first cell; kernels anywhere else are left as
# they are, so a notebook copied into a folder of its own runs exactly as it is written.
#
# Such a kernel also reports its language without the Python version (ipykernel's language_info
# minus "version", a field nothing here reads). JupyterLab copies the kernel's language_info into
# a notebook's metadata as it opens it, and marks the notebook changed unless the stored one is
# equal; without the version, what `make run` stores is the same on Python 3.11, 3.12 and 3.13,
# and opening a notebook changes nothing.
import pathlib

from ipykernel.ipkernel import IPythonKernel

_here = pathlib.Path.cwd()
_set_up = _here.parent / "dev" / "memorybook_dev" / "collection_kernel.py"
if _here.name == "notebooks" and _set_up.is_file():
    c.InteractiveShellApp.extensions.append("memorybook_dev.collection_kernel")  # noqa: F821
    IPythonKernel.language_info = {
        key: value for key, value in IPythonKernel.language_info.items() if key != "version"
    }
