"""Show a widget together with a static rendering that survives headless runs."""

from __future__ import annotations

import base64
from typing import Any


def widget_bundle(
    widget: Any, html: str, png: bytes | None = None, text: str | None = None
) -> dict[str, Any]:
    """A MIME bundle holding the live widget view plus static HTML (and PNG).

    Frontends with widget support render the widget; papermill, nbconvert,
    nbviewer and GitHub fall back to the HTML/PNG, so a saved notebook shows
    the result in any viewer.
    """
    bundle: dict[str, Any] = {"text/html": html, "text/plain": text or html_to_text(html)}
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


def display_widget(
    widget: Any, html: str, png: bytes | None = None, updatable: bool = False, text: str | None = None
) -> Any:
    """Display ``widget`` with ``html`` (and ``png``) as its static fallback.

    With ``updatable``, returns a ``DisplayHandle`` whose ``update`` replaces the
    static fallback later (the live widget view stays the same).
    """
    from IPython.display import display

    bundle = widget_bundle(widget, html, png, text)
    if not in_ipython():  # a plain script: text, not the repr of a MIME bundle
        print(bundle["text/plain"])
        return TextHandle()
    return display(bundle, raw=True, display_id=True if updatable else None)


def in_ipython() -> bool:
    """Whether an IPython shell runs here (a notebook kernel or IPython); not in a plain script."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


class TextHandle:
    """The handle of a display in a plain script: an update prints the new text once."""

    def update(self, bundle: dict[str, Any], raw: bool = True) -> None:
        print(bundle.get("text/plain", ""))


def png_img(png: bytes, width: int | None = None) -> str:
    """An ``<img>`` holding ``png`` inline, ``width`` CSS pixels wide (static HTML that keeps the plot)."""
    size = f' width="{width}"' if width else ""
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"{size}>'



def html_to_text(html: str) -> str:
    """A plain-text reading of a static widget rendering: one line per row, paragraph, title;
    the characters HTML escapes (``&quot;``, ``&#x27;``, ``&lt;``) as themselves."""
    import html as entities
    import re

    text = re.sub(r"<(br|table|/tr|/p|/h\d|/div)[^>]*>", "\n", html)
    text = re.sub(r"</t[dh]>", "  ", text)
    text = entities.unescape(re.sub(r"<[^>]+>", "", text))
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())
