"""The write side: the Recorder that wires the trainer to the ledger, the object store and
attestation, the genesis of a new run, the coordinator's keys and code provenance, and the
training launch (a recorded run, or a folder run)."""
