"""Encrypted traffic between the notebook and engines on other hosts (ipyparallel's CurveZMQ).

ipyparallel signs every message (HMAC with the session key) but sends it in clear unless its
controller runs with ``enable_curve``: then every ZMQ connection to the controller (engines,
their nannies, the notebook's client) is encrypted with CurveZMQ, the controller's public key
travelling in the connection files and ``IPP_CONNECTION_INFO``. jaxnb turns it on for every
cluster whose engines are on other hosts (``--hosts``, Slurm, MPI, a TPU slice, any other
launcher); a local cluster talks over loopback and stays as it is. ``JAXNB_CURVE=1`` forces it
on for a local cluster too (``bench/cluster.py`` measures its cost there), ``JAXNB_CURVE=0``
turns it off. JAX's coordinator and gloo are not ipyparallel's: ``docs/howto/security.md``
says what they carry and what to put in front of them.
"""

from __future__ import annotations

import os
from typing import Any

from jaxnb._core.options import ClusterOptions

#: Force (1) or forbid (0) encryption, whatever the launcher.
ENV = "JAXNB_CURVE"
#: The controller's flag for it (ipyparallel's ``IPController.enable_curve``).
FLAG = "--IPController.enable_curve=True"

ON = ("traffic to the engines: encrypted (CurveZMQ) and signed; JAX's coordinator and gloo "
      "between hosts are not (see the security page)")
LOCAL = "traffic to the engines: on this machine's loopback, signed, not encrypted"
OFF = ("traffic to the engines: signed, NOT encrypted (JAXNB_CURVE=0, or an ipyparallel "
       "without CurveZMQ); keep the hosts on a private network")


def wanted(where: Any, options: ClusterOptions) -> bool:
    """Whether the controller encrypts: engines on other hosts, unless ``JAXNB_CURVE`` says."""
    forced = os.environ.get(ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return bool(getattr(where, "remote_engines", True))


def controller_args(where: Any, options: ClusterOptions) -> list[str]:
    """The controller's flags for encryption (none when it is not wanted)."""
    return [FLAG] if wanted(where, options) else []


VIA = "traffic to the engines: through ssh to {host} (encrypted), then on its loopback, signed"


def status_line(client: Any, local: bool, via: str | None = None) -> str:
    """What ``%jax_cluster status`` says of the traffic, from the client's own connection
    (``curve_serverkey`` is set when its connections are encrypted; ``via``: the host a
    cluster attached through ``--via`` runs on)."""
    if via is not None:
        return VIA.format(host=via)
    if getattr(client, "curve_serverkey", None):
        return ON
    return LOCAL if local else OFF
