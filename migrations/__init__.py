"""Alembic environment and versions of the ledger schema (``ledger/models.py``).

Driven from code by :func:`ledger.db.upgrade` (``veritrain db upgrade``), which builds the
Alembic configuration from this package's location, so it works from an installed wheel.
``alembic -c migrations/alembic.ini <command>`` works too, for developers.
"""
