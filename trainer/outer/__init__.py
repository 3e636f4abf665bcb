"""Outer optimisation: pseudo-gradients, compression, the outer Nesterov step, one-step delay."""
