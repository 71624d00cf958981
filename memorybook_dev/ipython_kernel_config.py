# IPython kernel configuration for this repository's virtual environment: `make setup` copies it
# to .venv/etc/ipython/, where every kernel of that environment reads it. Kernels started in the
# repository's notebooks/ folder load the collection's set-up (memorybook_dev/collection_kernel.py)
# before their first cell; kernels anywhere else are left as they are.
import pathlib

_notebooks = pathlib.Path(__file__).resolve().parents[3] / "notebooks"  # .venv/etc/ipython/..
if pathlib.Path.cwd().resolve() == _notebooks:
    c.InteractiveShellApp.extensions.append("memorybook_dev.collection_kernel")  # noqa: F821
