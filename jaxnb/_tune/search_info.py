"""What a search tells its study about itself (user attribute ``jaxnb_search``, JSON): its metric,
mode, how many trials it was asked for, its base config when JSON can hold it, and how it ended.
A kernel that follows the search from its folder (:mod:`.attached`) reads it back; nothing read
back can run code."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

KEY = "jaxnb_search"
#: ``status`` while a search runs; a search whose kernel died leaves it so (its lease tells).
RUNNING = "running"


def started(study: Any, metric: str, mode: str, trials: int, config: Mapping[str, Any] | None
            ) -> None:
    """Record a search (or a resumed one) starting on ``study``."""
    study.set_user_attr(KEY, {"metric": metric, "mode": mode, "trials": trials,
                              "config": _json_or_none(config), "status": RUNNING,
                              "message": "", "since": time.time()})


def ended(study: Any, status: str, message: str) -> None:
    """Record how the search ended (``finished``, ``failed``, ``interrupted``) and why."""
    info = read(study)
    if info:
        study.set_user_attr(KEY, {**info, "status": status, "message": message})


def read(study: Any) -> dict[str, Any]:
    """What the search recorded (an empty dict for a study from an older jaxnb)."""
    info = study.user_attrs.get(KEY)
    return dict(info) if isinstance(info, dict) else {}


def _json_or_none(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if config is None:
        return None
    try:
        doc = json.loads(json.dumps(dict(config)))
    except (TypeError, ValueError):  # a value JSON cannot hold: the trials' own configs tell
        return None
    return doc if isinstance(doc, dict) else None
