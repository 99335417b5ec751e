"""``%jax_tune``: an Optuna study in the notebook kernel; each trial one training run on the cluster."""
