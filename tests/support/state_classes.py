"""Classes a training state holds, for the checkpoint tests: imported by the fast tests and run
as a cell on the engines (as a notebook's ``%%jax_cluster`` cell defines them), where
``restore()`` finds them by name."""

import dataclasses
import typing


class Moments(typing.NamedTuple):
    mu: object
    count: object


@dataclasses.dataclass
class Loader:
    position: int
    seed: object
