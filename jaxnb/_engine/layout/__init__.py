"""Meshes, array shardings, pytrees and values described as JSON-able dicts (`%jax_mesh`, `%jax_who`)."""
