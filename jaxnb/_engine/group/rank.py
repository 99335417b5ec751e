"""The rank a batch launcher gave this engine (``mpiexec``, ``srun``), if any."""

from __future__ import annotations

import os

#: OpenMPI, MPICH/Hydra (PMI), Slurm: the first one set is the rank.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def launcher_rank() -> int | None:
    """This engine's rank in its launcher's job (``None`` when no launcher numbered it)."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None
