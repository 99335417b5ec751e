"""The smoke that ``bash dev test oldest`` runs on the oldest versions pyproject.toml allows
(``.ci/oldest.txt``), and the main suite on the newest: two real processes start, run a jitted
cell, train with checkpoints, and recover from a SIGKILL; status lists no feature off."""

from __future__ import annotations

import pytest
from test_recovery import _kills, _steps, checkpointed_loop

from jaxnb import JaxCluster
from jaxnb._widgets.devices import features_off

pytestmark = pytest.mark.engines


@pytest.mark.timeout(240)
def test_start_cell_train_checkpoint_and_recovery(tmp_path):
    with JaxCluster(n=2, spares=0, compile_cache=str(tmp_path / "xla")) as cluster:
        cluster.run("import jax, jax.numpy as jnp\n"
                    "total = float(jax.jit(lambda x: x.sum())(jnp.ones(4)) * jax.process_count())")
        assert cluster.pull("total") == 8.0
        result = cluster.train(checkpointed_loop, {"steps": 12, "every": 5,
                                                   "kills": _kills(tmp_path, (1, 7))},
                               name="smoke", storage=tmp_path, max_failures=1)
        assert result.error is None, result.error
        assert [f.resumed_from for f in result.failures] == [5]
        assert "SIGKILL" in result.failures[0].cause
        assert _steps(result) == list(range(1, 13)) and result.checkpoint is not None
        assert features_off(cluster.status()) == []
