"""TEE back-ends, one module each; every module here registers its back-end with
attestation/registry.py when imported, and the registry imports them all when first asked.

``software`` is the only one today. A hardware back-end (``tdx``, ``sev-snp``) is a new module
beside it: docs/attestation.md, "Adding a hardware back-end".
"""
