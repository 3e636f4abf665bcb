"""The TEE back-end registry, keyed by TEE type (DESIGN.md §1, §5).

A back-end is everything one kind of TEE needs: its attester (which extends registers and
quotes), its quote verifier, its reference launch measurement and its security version. The
recorder asks :func:`tee_backend` for the type it records under and writes that type into the
run's genesis; ``veritrain verify`` asks for the type the genesis names. Neither names a
back-end, so a new one (Intel TDX, AMD SEV-SNP, NVIDIA GPU evidence) is one module:

- in this package, a module in ``attestation/backends/`` that calls :func:`register` when it
  is imported; every module there is imported the first time the registry is asked;
- elsewhere (tests, a plug-in package), any module that calls :func:`register`, imported before
  the registry is asked.

One type has one back-end: a second registration for a type is refused, so a verifier is never
chosen by import order, and the software verifier (which accepts ``"software"`` only) can never
be asked to judge a hardware claim.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import Protocol

from attestation.attester import (
    SOFTWARE_TEE_TYPE,
    Attester,
    AttesterSetup,
    QuotePolicy,
    QuoteVerifier,
)
from attestation.endorsement import check_tee_type
from attestation.errors import UnknownTeeTypeError

DEFAULT_TEE_TYPE = SOFTWARE_TEE_TYPE
"""What a run records under unless told otherwise: the only back-end that runs anywhere."""


class TeeBackend(Protocol):
    """One kind of TEE, as the recorder and the verifier need it."""

    @property
    def tee_type(self) -> str:
        """The label in every quote and in the genesis: "software", "tdx", "sev-snp", ..."""
        ...

    @property
    def svn(self) -> int:
        """The security version of the evidence this back-end produces now; a new run's
        genesis records it and requires at least it."""
        ...

    @property
    def assurance(self) -> str:
        """One line for auditors: what a verified quote of this type proves, and what not."""
        ...

    def launch_measurement(
        self, *, code_digest: str, dependency_digest: str, config_digest: str
    ) -> bytes:
        """The 48-byte reference launch measurement of a launch of this code, these
        dependencies and this configuration (hex SHA-256 digests), recorded in the genesis."""
        ...

    def attester(self, setup: AttesterSetup) -> Attester:
        """The attester of one cluster: quotes signed with ``setup.attestation_key``, endorsed
        by ``setup.platform_root`` from ``setup.now``, reporting ``setup.launch_measurement`` (a
        hardware back-end reports what its hardware measured, and its vendor's chain replaces
        the root)."""
        ...

    def verifier(self, policy: QuotePolicy) -> QuoteVerifier:
        """The verifier of one attester's quotes under ``policy``; it accepts quotes of this
        back-end's TEE type only."""
        ...


_BACKENDS: dict[str, TeeBackend] = {}
_LOCK = threading.Lock()
_BUILT_IN_LOADED = False


def register(backend: TeeBackend) -> TeeBackend:
    """Make ``backend`` the one back-end of its TEE type; returns it. Registering the same
    back-end again is harmless; another back-end for a type already taken is refused."""
    check_tee_type(backend.tee_type)
    with _LOCK:
        taken = _BACKENDS.get(backend.tee_type)
        if taken is not None and _name(taken) != _name(backend):
            raise ValueError(
                f"tee_type {backend.tee_type!r}: expected one back-end, got {_name(backend)} "
                f"while {_name(taken)} is registered"
            )
        _BACKENDS[backend.tee_type] = backend
    return backend


def tee_backend(tee_type: str) -> TeeBackend:
    """The back-end registered for ``tee_type``; raise :class:`UnknownTeeTypeError` naming the
    registered types if there is none."""
    _load_built_in()
    with _LOCK:
        backend = _BACKENDS.get(tee_type)
    if backend is None:
        raise UnknownTeeTypeError(
            f"tee_type {tee_type!r}: no TEE back-end is registered for it (registered: "
            f"{', '.join(registered_tee_types())}); a back-end is one module in "
            "attestation/backends/ (docs/attestation.md)"
        )
    return backend


def registered_tee_types() -> tuple[str, ...]:
    """Every TEE type a back-end is registered for, sorted."""
    _load_built_in()
    with _LOCK:
        return tuple(sorted(_BACKENDS))


def _load_built_in() -> None:
    """Import every module of ``attestation/backends/`` once; each registers its back-end."""
    global _BUILT_IN_LOADED
    if _BUILT_IN_LOADED:
        return
    # Imported here, not at the top: the back-end modules import this one to register.
    import attestation.backends as package

    for module in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
        importlib.import_module(module.name)
    _BUILT_IN_LOADED = True


def _name(backend: TeeBackend) -> str:
    kind = type(backend)
    return f"{kind.__module__}.{kind.__qualname__}"
