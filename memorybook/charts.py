"""Charts: one style for every notebook.

Figures are rendered to PNG here, with no software version or date in the file, so a re-run
stores the same bytes.
"""

from __future__ import annotations

import io

FIGURE_SIZE = (8.0, 3.6)
FIGURE_DPI = 100
COLOURS = {"right": "#2f6f4f", "wrong": "#b5452f"}  # the expected team, and any other


def new_figure(ncols: int = 1, **subplot_kwargs):
    """A figure in the collection's style: fixed size, no top or right spines, a light x-grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=FIGURE_SIZE, dpi=FIGURE_DPI, **subplot_kwargs)
    for ax in axes if ncols > 1 else [axes]:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="x", color="#e3e6ea", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=9)
    return fig, axes


def show_figure(fig) -> None:
    """Display a figure as a PNG with stable bytes, then close it."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))
