"""The software back-end: :class:`attestation.software.SoftwareAttester` and
:class:`attestation.verifier.SoftwareQuoteVerifier` under ``tee_type: "software"``.

The protocol of a TEE with no hardware behind it: it proves which endorsed key signed which
measurements for which nonce and binding, and nothing about isolation (docs/attestation.md,
"What the software TEE proves, and what it does not").
"""

from __future__ import annotations

from attestation.attester import (
    SOFTWARE_TEE_TYPE,
    Attester,
    AttesterSetup,
    QuotePolicy,
    QuoteVerifier,
)
from attestation.measurement import launch_measurement
from attestation.registry import register
from attestation.software import SOFTWARE_SVN, SoftwareAttester
from attestation.verifier import SoftwarePolicy, SoftwareQuoteVerifier


class SoftwareBackend:
    """:class:`attestation.registry.TeeBackend` for ``"software"``."""

    tee_type = SOFTWARE_TEE_TYPE
    svn = SOFTWARE_SVN
    assurance = "binds steps to keys and measurements, not hardware isolation"

    def launch_measurement(
        self, *, code_digest: str, dependency_digest: str, config_digest: str
    ) -> bytes:
        # The process measures itself: the reference is computed from the same digests.
        return launch_measurement(
            code_digest=code_digest,
            dependency_digest=dependency_digest,
            config_digest=config_digest,
        )

    def attester(self, setup: AttesterSetup) -> Attester:
        return SoftwareAttester.create(
            platform_root=setup.platform_root,
            attestation_key=setup.attestation_key,
            launch_measurement=setup.launch_measurement,
            svn=SOFTWARE_SVN,
            now=setup.now,
        )

    def verifier(self, policy: QuotePolicy) -> QuoteVerifier:
        return SoftwareQuoteVerifier(
            SoftwarePolicy(
                platform_roots=(policy.platform_root,),
                attestation_key=policy.attestation_key,
                launch_measurement=policy.launch_measurement,
                minimum_svn=policy.minimum_svn,
            )
        )


SOFTWARE_BACKEND = register(SoftwareBackend())
