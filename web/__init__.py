"""web: the public audit page, the JSON API and the download API (read-only).

The app reads the ledger (``ledger.service.Ledger``) and the object store (``storage``); it
never writes, never holds private keys, and never imports ``trainer/`` or ``veritrain/``
(DESIGN.md §1). Build it with :func:`web.app.create_app`; serve it with
:func:`web.server.serve`.
"""
