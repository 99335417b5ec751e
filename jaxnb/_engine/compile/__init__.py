"""Compilation on the engines: JAX's persistent compilation cache, shared by every process."""
