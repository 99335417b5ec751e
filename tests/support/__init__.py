"""What tests and benchmarks share: the factories (a pytest plugin: clusters, labs of ssh hosts and
kernels of a given shape, stopped for the test), clusters and their checks, a real Jupyter kernel,
fault cells, a JupyterLab server and its pages. Tests import ``support.x``; benchmarks run from
the repository root (``python -m bench.NAME``) import ``tests.support.x``."""
