"""One router per area of the app; :mod:`web.app` includes them in a fixed order (the
Hugging Face ``/{run}/resolve/...`` catch-all last, so it never shadows another route)."""
