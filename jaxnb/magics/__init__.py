"""The IPython magics (``%load_ext jaxnb``): the notebook's front over :class:`jaxnb.JaxCluster`.

One module per magic, named after it, each a thin wrapper: parse the line
(``jax_cluster``, ``jax_train``, ``jax_tune``, ``jax_profile``, ``jax_mesh``,
``jax_pull_push``), find and evaluate in the notebook what it names (``kit``, written once
for all of them), read flag texts (``accept``), and call the Python API, whose messages then
name the flags. ``extension`` registers them.
"""

from jaxnb.magics.extension import JaxnbMagics as JaxnbMagics
from jaxnb.magics.extension import current_cluster as current_cluster
from jaxnb.magics.extension import load_ipython_extension as load_ipython_extension
from jaxnb.magics.extension import unload_ipython_extension as unload_ipython_extension
from jaxnb.magics.extension import use_cluster as use_cluster
from jaxnb.magics.jax_cluster import SUBCOMMANDS as SUBCOMMANDS

__all__ = ["SUBCOMMANDS", "JaxnbMagics", "current_cluster", "load_ipython_extension",
           "unload_ipython_extension", "use_cluster"]
