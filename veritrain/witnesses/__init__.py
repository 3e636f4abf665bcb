"""Talking to C2SP tlog-witnesses: the configured endpoints (``VERITRAIN_WITNESSES``), pushing
a log's newest tree head to them (``push``), and asking one what it holds now (``views``)."""
