"""``%%jax_profile``: every process traces the cell together; one run folder, one merged
trace, a step table that names the straggler. Notebook side: never imports JAX."""
