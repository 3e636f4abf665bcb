"""Research code: the simulations and sweeps behind the trainer's defaults.

Not part of the installed product (pyproject's package list leaves this folder out, and no
package imports it): it imports the trainer and runs the trainer's own code, so a measurement
is about what users run. Run it from the repository root, e.g.
``python -m research.outer --sweep confirm --out /tmp/outer-sweeps`` (docs/outer-algorithm.md §8).
"""
