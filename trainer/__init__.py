"""The DiLoCoX trainer: model, data, distributed runtime, outer algorithm, Recorder protocol.

Entry points live in ``trainer.api`` (``train``, ``reexecute_outer_step``); this package
imports nothing heavy on its own so that ``trainer.errors`` stays cheap to import.
"""
