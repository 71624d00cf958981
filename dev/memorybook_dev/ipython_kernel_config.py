# IPython kernel configuration for this repository's virtual environment: `make setup` copies it
# to .venv/etc/ipython/, where every kernel of that environment reads it. A kernel working in a
# collection's notebooks/ folder (this checkout's, or a copy of it) loads the collection's set-up
# (dev/memorybook_dev/collection_kernel.py) before its first cell; kernels anywhere else are left as
# they are, so a notebook copied into a folder of its own runs exactly as it is written.
import pathlib

_here = pathlib.Path.cwd()
_set_up = _here.parent / "dev" / "memorybook_dev" / "collection_kernel.py"
if _here.name == "notebooks" and _set_up.is_file():
    c.InteractiveShellApp.extensions.append("memorybook_dev.collection_kernel")  # noqa: F821
