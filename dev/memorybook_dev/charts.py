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
    """A figure in the collection's style: fixed size, laid out to fit, no top or right spines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=FIGURE_SIZE, dpi=FIGURE_DPI, layout="constrained",
                             **subplot_kwargs)
    for ax in axes if ncols > 1 else [axes]:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="x", color="#e3e6ea", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=9)
    return fig, axes


class ChartLayoutError(ValueError):
    """A chart whose text would not read cleanly: labels on top of each other, or cut off."""


def text_problems(fig) -> list[str]:
    """Every pair of texts that overlap, and every text the figure's edge or its axes cut off.

    Texts are the visible, non-empty ones: titles, tick and axis labels, annotations, legends.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _drawn_texts(fig)
    boxes = [(text, text.get_window_extent(renderer)) for text, _ in texts]
    problems = []
    edge = fig.bbox
    panels = [(ax, ax.get_window_extent(renderer)) for ax in fig.axes if ax.get_visible()]
    for (text, box), (_, own_panel) in zip(boxes, texts, strict=True):
        for ax, panel in panels:
            if own_panel is not None and ax is not own_panel and box.overlaps(panel):
                problems.append(f"{text.get_text()!r} runs into another panel")
        if not _inside(box, edge):
            problems.append(f"{text.get_text()!r} is cut off by the figure's edge")
        clip = text.get_clip_box() if text.get_clip_on() else None
        if clip is not None and text.axes is not None and not _inside(box, clip):
            problems.append(f"{text.get_text()!r} is cut off by its axes")
    for index, (text, box) in enumerate(boxes):
        for other, other_box in boxes[index + 1:]:
            if box.overlaps(other_box):
                problems.append(f"{text.get_text()!r} overlaps {other.get_text()!r}")
    return problems


def _drawn_texts(fig) -> list[tuple]:
    """The texts a figure draws, each with the panel it belongs to (None for the figure's own).

    matplotlib also keeps labels for ticks outside a panel's view, which it does not draw; those
    are left out.
    """
    from matplotlib.text import Text

    panel_of, undrawn = {}, set()
    for ax in fig.axes:
        panel_of.update((id(text), ax) for text in ax.findobj(Text))
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    undrawn.update((id(tick.label1), id(tick.label2)))
    return [(text, panel_of.get(id(text))) for text in fig.findobj(Text)
            if id(text) not in undrawn and text.get_visible() and text.get_text().strip()]


def _inside(box, frame, tolerance: float = 0.5) -> bool:
    return (box.x0 >= frame.x0 - tolerance and box.y0 >= frame.y0 - tolerance
            and box.x1 <= frame.x1 + tolerance and box.y1 <= frame.y1 + tolerance)


def show_figure(fig) -> None:
    """Display a figure as a PNG with stable bytes, then close it.

    A figure whose texts overlap or are cut off is refused with ChartLayoutError, naming them.
    """
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    problems = text_problems(fig)
    if problems:
        plt.close(fig)
        raise ChartLayoutError("The chart does not read cleanly: " + "; ".join(problems))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))
