"""Checkpoints that every process saves together with Orbax, and gives back."""
