"""Charts read cleanly: show_figure() refuses text that overlaps or is cut off.

Every chart a notebook draws goes through show_figure(), so nbval running the notebooks proves
each of them passes this check; the tests here prove the check itself catches what it must.
"""

import pytest

from memorybook_dev.charts import ChartLayoutError, new_figure, show_figure, text_problems


def test_a_clean_chart_has_no_problems():
    fig, ax = new_figure()
    ax.barh([0, 1], [0.5, 0.9])
    ax.set_yticks([0, 1], ["first", "second"])
    ax.set_title("A title", loc="left")
    assert text_problems(fig) == []


def test_overlapping_labels_are_named():
    fig, ax = new_figure()
    ax.text(0.5, 0.5, "one label")
    ax.text(0.5, 0.5, "another label")
    assert "'one label' overlaps 'another label'" in text_problems(fig)


def test_a_label_running_into_the_next_panel_is_named():
    fig, axes = new_figure(ncols=2)
    fig.set_layout_engine(None)  # panels placed by hand, with too narrow a gap
    fig.subplots_adjust(wspace=0.05)
    axes[1].set_yticks([0], ["a label far too long for the gap between the panels"])
    assert any("runs into another panel" in problem for problem in text_problems(fig))


def test_text_past_the_figures_edge_is_named():
    fig, ax = new_figure()
    fig.text(0.97, 0.5, "far right")
    assert "'far right' is cut off by the figure's edge" in text_problems(fig)


def test_show_figure_refuses_a_chart_that_does_not_read_cleanly():
    fig, ax = new_figure()
    ax.text(0.5, 0.5, "one label")
    ax.text(0.5, 0.5, "another label")
    with pytest.raises(ChartLayoutError, match="overlaps"):
        show_figure(fig)
