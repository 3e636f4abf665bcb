"""Canonical JSON, Ed25519 keys, DSSE + in-toto/SLSA statements and a TEE-style attester.

Imports nothing else of veritrain (DESIGN.md §1).
"""
