"""Meshes, array shardings and pytrees described as JSON-able dicts for ``%jax_mesh``."""
