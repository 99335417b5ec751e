"""``%%jax_profile`` on the engines: traces recorded together and each process's part of the merge."""
