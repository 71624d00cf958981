"""The benchmarks' one way of printing results: a Markdown table, ready for the README."""


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned first column, right-aligned figures, padded so the plain text reads too."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["| " + " | ".join(f"{cell:<{widths[0]}}" if i == 0 else f"{cell:>{widths[i]}}"
                               for i, cell in enumerate(line)) + " |"
             for line in [header, *rows]]
    rule = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":"
                          for i, w in enumerate(widths)) + "|"
    return "\n".join([lines[0], rule, *lines[1:]])


def timings_table(results: dict[str, float], baseline: float, baseline_name: str) -> str:
    """Wall times in seconds, each with its ratio to the baseline."""
    rows = [[what, f"{seconds:.1f} s", f"{seconds / baseline:.2f}x"]
            for what, seconds in results.items()]
    return markdown_table(["what", "wall time", f"vs {baseline_name}"], rows)
