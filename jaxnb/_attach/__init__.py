"""Named clusters that outlive the kernel: a supervisor process per name (its own session), a
JSON record of what a kernel needs to attach, and the kernel's side (attach, detach, list).

Planes: the kernel is a client; the supervisor (:mod:`~jaxnb._attach.supervisor`) is what the
engines' and controller's watchdogs watch instead of the kernel, and it stops them when asked
or after ``--idle-timeout``; the engines keep their Python state across kernels.
"""
