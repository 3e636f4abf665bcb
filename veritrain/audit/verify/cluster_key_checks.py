"""Check 10, continued: whose keys the genesis enrols for each cluster.

Proofs of possession (check 10d) show that whoever enrolled a cluster's keys held them when
the run was created; they cannot show *who* that was. A coordinator that runs a "cluster"
itself, or enrols keys of its own in place of a real cluster's, produces proofs just as good.
So the report lists every cluster's enrolled keys with one fingerprint
(``attestation.enrolment.cluster_fingerprint``) that the cluster's operator can compare with
its own key folder (``veritrain cluster-keys``), and an auditor who learned a cluster's keys
out of band pins them: ``--cluster-key J=VKEY`` fails the check, naming the cluster, unless
the genesis enrols exactly that key for cluster J. What is not pinned is trusted as enrolled,
and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attestation.enrolment import cluster_fingerprint
from attestation.errors import AttestationError
from attestation.keys import PublicKey
from records import Genesis
from veritrain.audit.verify.report import Report

_ROLES = ("contribution", "attestation", "platform_root")
_NAME_SUFFIX = {
    "contribution": "contribution",
    "attestation": "attestation",
    "platform": "platform_root",
}
"""A cluster key's name ends with its role (veritrain/cluster_identity.py): a pinned key so
named is compared with that role's key only."""


def parse_cluster_key(item: str) -> tuple[int, str]:
    """``J=VKEY`` -> (J, the normalised vkey); ValueError with a message for a person."""
    cluster, sep, vkey = item.partition("=")
    if not sep or not cluster.strip().isdigit():
        raise ValueError(f"expected J=VKEY (a cluster index, '=', a verifier key), got {item!r}")
    try:
        key = PublicKey.from_vkey(vkey)
    except AttestationError as exc:
        raise ValueError(f"{item!r}: expected a C2SP verifier key after '=': {exc}") from None
    return int(cluster), key.vkey


def check_cluster_keys(
    report: Report, genesis: Genesis | None, pinned: Sequence[tuple[int, str]]
) -> list[dict[str, Any]]:
    """10f. List each cluster's enrolled keys; fail for a pinned key the genesis does not
    enrol for that cluster. Returns the list (for ``verify --json``)."""
    result = report.check(10)
    if genesis is None:
        if pinned:
            result.fail("--cluster-key was not checked: the genesis cannot be read", index=0)
        return []
    listed: list[dict[str, Any]] = []
    for keys in genesis.keys.clusters:
        enrolled = {
            "contribution": keys.contribution,
            "attestation": keys.attestation,
            "platform_root": keys.platform_root,
        }
        try:
            fingerprint = cluster_fingerprint(**enrolled)
        except AttestationError as exc:
            result.fail(f"keys.clusters[{keys.cluster}]: {exc}", index=0)
            continue
        listed.append(
            {
                "cluster": keys.cluster,
                **enrolled,
                "fingerprint": fingerprint,
                "pinned": _pinned_roles(
                    [vkey for j, vkey in pinned if j == keys.cluster], enrolled
                ),
            }
        )
    by_cluster = {entry["cluster"]: entry for entry in listed}
    for cluster, vkey in pinned:
        entry = by_cluster.get(cluster)
        if entry is None:
            result.fail(
                f"--cluster-key {cluster}=…: the genesis enrols no cluster {cluster} "
                f"(clusters 0..{len(genesis.keys.clusters) - 1})",
                index=0,
            )
            continue
        if _matches(vkey, entry) is None:
            roles = _roles_for(vkey)
            result.fail(
                f"cluster {cluster}: the genesis enrols "
                + ", ".join(f"{role} key {entry[role]}" for role in roles)
                + f", not the pinned {vkey}: keys not the cluster's own were enrolled for it",
                index=0,
            )
    for entry in listed:
        trust = (
            f"pinned ({', '.join(entry['pinned'])})"
            if entry["pinned"]
            else "not pinned: trusted as the genesis enrols them"
        )
        result.notes.append(
            f"cluster {entry['cluster']} keys, fingerprint {entry['fingerprint'][:32]}…: {trust}"
        )
    return listed


def _pinned_roles(vkeys: Sequence[str], enrolled: Mapping[str, Any]) -> list[str]:
    """The roles of the cluster's keys that a pinned key matched, sorted."""
    return sorted({role for role in (_matches(v, enrolled) for v in vkeys) if role is not None})


def _roles_for(vkey: str) -> tuple[str, ...]:
    role = _NAME_SUFFIX.get(vkey.split("+", 1)[0].rsplit("/", 1)[-1])
    return (role,) if role else _ROLES


def _matches(vkey: str, enrolled: Mapping[str, Any]) -> str | None:
    """The role under which ``vkey`` is enrolled, or None."""
    for role in _roles_for(vkey):
        try:
            if PublicKey.from_vkey(str(enrolled[role])).vkey == vkey:
                return role
        except AttestationError:
            continue
    return None
