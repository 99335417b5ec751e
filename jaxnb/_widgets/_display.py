"""Show a widget together with a static rendering that survives headless runs."""

from __future__ import annotations

import base64
from typing import Any


def widget_bundle(widget: Any, html: str, png: bytes | None = None) -> dict[str, Any]:
    """A MIME bundle holding the live widget view plus static HTML (and PNG).

    Frontends with widget support render the widget; papermill, nbconvert,
    nbviewer and GitHub fall back to the HTML/PNG, so a saved notebook shows
    the result in any viewer.
    """
    bundle: dict[str, Any] = {"text/html": html, "text/plain": html_to_text(html)}
    if png is not None:
        bundle["image/png"] = base64.b64encode(png).decode("ascii")
    model_id = getattr(widget, "model_id", None)
    if model_id:
        bundle["application/vnd.jupyter.widget-view+json"] = {
            "version_major": 2,
            "version_minor": 0,
            "model_id": model_id,
        }
    return bundle


def display_widget(widget: Any, html: str, png: bytes | None = None) -> None:
    """Display ``widget`` with ``html`` (and ``png``) as its static fallback."""
    from IPython.display import display

    display(widget_bundle(widget, html, png), raw=True)


def html_to_text(html: str) -> str:
    """A plain-text reading of a static widget rendering: one line per row, paragraph, title."""
    import re

    text = re.sub(r"<(br|table|/tr|/p|/h\d|/div)[^>]*>", "\n", html)
    text = re.sub(r"</t[dh]>", "  ", text)
    text = re.sub(r"<[^>]+>", "", text)
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())
