"""What ``veritrain reproduce`` reports: the rule applied and why, every comparison made, the
dispute ``--bisect`` narrowed down and what it cost, and the bytes downloaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from veritrain.audit.fetch import DownloadReport
from veritrain.audit.inner_steps import Dispute


@dataclass(frozen=True)
class Bisection:
    """Where each disagreeing cluster first parted from its record, and the cost of finding it."""

    disputes: tuple[Dispute, ...]
    clusters: int
    """Clusters whose inner steps were re-executed."""
    inner_steps: int
    """Inner steps re-executed per cluster (all of the outer step's: a re-executor holds only
    the state before the step, so reaching inner step i costs i + 1 of them, and the
    contribution at the end is judged too)."""
    commitments_compared: int
    seconds: float
    """Wall time of the re-execution."""
    downloaded: int
    """Object bytes fetched."""

    def lines(self) -> list[str]:
        cost = (
            f"cost: {self.clusters} cluster(s) x {self.inner_steps} inner steps re-executed in "
            f"{self.seconds:.1f} s, {self.commitments_compared} commitments compared, "
            f"{self.downloaded / 1e6:.2f} MB downloaded"
        )
        if not self.disputes:
            return [f"bisect    every commitment agrees; {cost}"]
        lines = []
        for d in self.disputes:
            stages = ", ".join(str(s) for s in d.stages)
            who = f"bisect    cluster {d.cluster}:"
            if d.where == "inner step":
                lines.append(
                    f"{who} first disagreeing inner step {d.inner_step} (inner step {d.offset} of "
                    f"{self.inner_steps} in this outer step), stage(s) {stages}"
                )
            elif d.where == "start":
                lines.append(f"{who} stage(s) {stages} did not start from the recorded state")
            else:
                lines.append(
                    f"{who} every inner step agrees; its contribution (stage(s) {stages}) does not"
                )
        return [*lines, f"bisect    {cost}"]

    def to_json(self) -> dict[str, Any]:
        return {
            "disputes": [
                {
                    "cluster": d.cluster,
                    "where": d.where,
                    "inner_step": d.inner_step,
                    "offset": d.offset,
                    "stages": list(d.stages),
                }
                for d in self.disputes
            ],
            "clusters": self.clusters,
            "inner_steps": self.inner_steps,
            "commitments_compared": self.commitments_compared,
            "seconds": self.seconds,
            "downloaded": self.downloaded,
        }


@dataclass
class Comparison:
    run_id: str
    step: int
    cluster: int | None
    mode: str
    """``bitwise`` or ``tolerance``."""
    reason: str = ""
    """Why this mode: the policy, and whether this machine is in its hardware class."""
    matched: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What the auditor must know whatever the outcome (e.g. this machine is outside the run's
    hardware class): ``WARNING`` lines, and ``warnings`` in ``--json``."""
    bisection: Bisection | None = None
    download: DownloadReport | None = None

    @property
    def ok(self) -> bool:
        return bool(self.matched) and not self.mismatched

    def render(self) -> str:
        what = (
            f"cluster {self.cluster}'s contribution to outer step {self.step}"
            if self.cluster is not None
            else f"outer step {self.step}"
        )
        lines = [
            f"reproduced {what} of run {self.run_id!r} ({self.mode} comparison)",
            f"  policy    {self.reason}",
        ]
        lines += [f"WARNING: {w}" for w in self.warnings]
        lines += [f"  match     {m}" for m in self.matched]
        lines += [f"  MISMATCH  {m}" for m in self.mismatched]
        lines += [f"  {line}" for line in (self.bisection.lines() if self.bisection else [])]
        if self.download is not None:
            lines.append(f"  download  {self.download.describe()}")
        lines += [f"  note      {n}" for n in self.notes]
        lines.append("MATCH" if self.ok else "NO MATCH")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "step": self.step,
            "cluster": self.cluster,
            "mode": self.mode,
            "reason": self.reason,
            "ok": self.ok,
            "matched": self.matched,
            "mismatched": self.mismatched,
            "notes": self.notes,
            "warnings": self.warnings,
            "bisection": self.bisection.to_json() if self.bisection else None,
            "download": self.download.to_json() if self.download else None,
        }
