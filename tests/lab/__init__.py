"""A lab of test hosts: network namespaces on a bridge, each with its own sshd."""
