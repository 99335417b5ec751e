"""One colour per JAX process, shared by every view so a process looks the same everywhere."""

PALETTE = (
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#c7c7c7",
)  # fmt: skip


def process_colour(index: int) -> str:
    """The fill colour of process ``index`` (stable across views)."""
    return PALETTE[index % len(PALETTE)]
