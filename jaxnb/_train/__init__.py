"""Training runs driven from the notebook: ``%jax_train`` and ``JaxCluster.train``."""
