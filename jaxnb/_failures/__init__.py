"""What jaxnb does when processes fail, in the order it does it.

1. :mod:`.detect` — is every process alive? (the one liveness check, used by
   cells, training runs, ``status``, repair and stop alike)
2. :mod:`.explain` — who died and how, their last log lines; :mod:`.stacks` —
   where each still-running process is, mapped to cell lines
3. :mod:`.free` — interrupt the processes left running; cut collectives they
   are blocked in; stop survivors of a death
4. :mod:`.repair` — before the next cell, check that the processes agree,
   else re-join the group in place (``%jax_cluster reset``)

:mod:`.watch` ties them together for a running cell or training run.
"""
