"""``--workdir``: an engine starts in the folder it is given, which is first on ``sys.path``."""

from __future__ import annotations

import os
import sys

from jaxnb._core.contract import ENV_WORKDIR, ENV_WORKDIR_BY_HOST

#: ipyparallel's ssh launcher gives the profile folder relative to the home folder.
_PROFILE_VARIABLE = "IPP_PROFILE_DIR"
_PROFILE_FLAG = "--profile-dir"


def enter() -> None:
    """Change to ``$JAXNB_WORKDIR`` (if set) before ipyparallel reads the working folder; the
    profile folder it was given relative to the starting folder is made absolute first."""
    folder = os.environ.get(ENV_WORKDIR)
    if not folder:
        return
    if os.environ.get(ENV_WORKDIR_BY_HOST):  # this host's copy (mpiexec: one environment for all)
        import json
        import socket

        folder = json.loads(os.environ[ENV_WORKDIR_BY_HOST]).get(socket.gethostname(), folder)
        os.environ[ENV_WORKDIR] = folder
    profile = os.environ.get(_PROFILE_VARIABLE)
    if profile and not os.path.isabs(profile):
        os.environ[_PROFILE_VARIABLE] = os.path.abspath(profile)
    args = sys.argv
    for i, arg in enumerate(args):
        if arg.startswith(_PROFILE_FLAG + "="):
            args[i] = f"{_PROFILE_FLAG}={os.path.abspath(arg.split('=', 1)[1])}"
        elif arg == _PROFILE_FLAG and i + 1 < len(args):
            args[i + 1] = os.path.abspath(args[i + 1])
    os.chdir(folder)
    if folder not in sys.path:
        sys.path.insert(0, folder)
