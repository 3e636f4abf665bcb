"""What ``veritrain reproduce`` needs beyond re-execution: which comparison rule applies
(``modes``), how far a re-execution may drift (``distance``), how per-inner-step commitments
are judged and a dispute narrowed to one inner step (``inner_steps``, ``recorded``), and how
only the needed bytes are fetched (``fetch``). docs/auditing.md describes all of it."""
