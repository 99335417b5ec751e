"""This process in the ``jax.distributed`` group: join, describe, reset, agree, gather."""
