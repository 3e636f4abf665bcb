"""The verification report: one line per check group, failures naming the entry and step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHECKS: dict[int, str] = {
    1: "signed tree head",
    2: "entries, hash chain and tree root",
    3: "inclusion proofs",
    4: "provenance statements (DSSE, in-toto/SLSA)",
    5: "attestation quotes",
    6: "cluster contributions",
    7: "checkpoints and generations",
    8: "data",
    9: "metrics",
    10: "configuration and verification policy (genesis)",
    11: "run.final",
    12: "verdicts and contribution scores",
}


@dataclass(frozen=True)
class Failure:
    check: int
    message: str
    index: int | None = None
    step: int | None = None

    def where(self) -> str:
        if self.index is None:
            return ""
        if self.step is None:
            return f"entry {self.index}: "
        return f"entry {self.index} (outer step {self.step}): "

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "index": self.index,
            "step": self.step,
            "message": self.message,
        }


@dataclass
class CheckResult:
    number: int
    checked: int = 0
    """How many items (entries, quotes, files...) the check examined."""
    notes: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    @property
    def name(self) -> str:
        return CHECKS[self.number]

    @property
    def passed(self) -> bool:
        return not self.failures

    def fail(self, message: str, *, index: int | None = None, step: int | None = None) -> None:
        self.failures.append(Failure(self.number, message, index, step))


@dataclass
class Report:
    run_id: str
    source: str
    results: dict[int, CheckResult] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    cluster_keys: list[dict[str, Any]] = field(default_factory=list)
    """Each cluster's enrolled keys and fingerprint, and which were pinned (check 10)."""
    warnings: list[str] = field(default_factory=list)
    """What an auditor must know although no check failed (e.g. that no re-execution on this
    machine can be bitwise): printed as ``WARNING`` lines and listed in ``--json``."""

    def check(self, number: int) -> CheckResult:
        return self.results.setdefault(number, CheckResult(number))

    @property
    def ok(self) -> bool:
        return all(r.passed for r in self.results.values()) and len(self.results) == len(CHECKS)

    @property
    def failures(self) -> list[Failure]:
        return [f for n in sorted(self.results) for f in self.results[n].failures]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "source": self.source,
            "ok": self.ok,
            "summary": self.summary,
            "cluster_keys": self.cluster_keys,
            "warnings": self.warnings,
            "checks": [
                {
                    "number": r.number,
                    "name": r.name,
                    "passed": r.passed,
                    "checked": r.checked,
                    "notes": r.notes,
                    "failures": [f.to_json() for f in r.failures],
                }
                for r in (self.results[n] for n in sorted(self.results))
            ],
        }

    def render(self) -> str:
        lines = [f"verifying run {self.run_id!r} from {self.source}"]
        for number in sorted(self.results):
            result = self.results[number]
            mark = "ok  " if result.passed else "FAIL"
            detail = "; ".join(result.notes)
            lines.append(
                f"  {mark} {number}. {result.name} ({result.checked} "
                f"checked){': ' + detail if detail else ''}"
            )
            for failure in result.failures[:20]:
                lines.append(f"         {failure.where()}{failure.message}")
            if len(result.failures) > 20:
                lines.append(f"         ... and {len(result.failures) - 20} more")
        lines += [f"WARNING: {warning}" for warning in self.warnings]
        failures = len(self.failures)
        verdict = (
            "VERIFIED" if self.ok else f"FAILED ({failures} problem{'s' if failures != 1 else ''})"
        )
        facts = ", ".join(f"{k} {v}" for k, v in self.summary.items())
        lines.append(f"{verdict}: run {self.run_id!r}{' — ' + facts if facts else ''}")
        return "\n".join(lines)
