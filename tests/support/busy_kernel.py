"""A stand-in notebook kernel, for checking what happens when a kernel is SIGKILLed.

It starts a 2-process cluster and makes both processes busy (process 0 waits in
a collective that process 1 never joins; process 1 spins in Python). Then it
prints one JSON line, ``{"pids": [...], "files": [...]}`` (every process it
launched, the key files and the stacks folder), and waits to be killed.

    python tests/support/busy_kernel.py
"""

import json
import time

import psutil
from clusters import in_cell, wait_until  # this script's folder is first on sys.path

from jaxnb import JaxCluster
from jaxnb._core import ipp_internals

cluster = JaxCluster(n=2).start()
cluster.run("import jax, numpy as np")
cluster.view.execute(
    "from jax.experimental import multihost_utils\n"
    "if jax.process_index() == 0:\n"
    "    multihost_utils.process_allgather(np.ones(2))\n"
    "else:\n"
    "    while True:\n"
    "        sum(range(1000))\n",
    block=False,
)
wait_until(lambda: in_cell(cluster, [0, 1]), what="both processes running the cell")
family = [p.pid for p in psutil.Process().children(recursive=True)]
files = [*ipp_internals.key_files(cluster.group.ipp), cluster.group.stacks_dir]
print(json.dumps({"pids": family, "files": files}), flush=True)
time.sleep(600)
