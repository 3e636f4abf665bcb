"""``veritrain reproduce``: re-execute one outer step and compare it with the ledger.

1. Verify the log before anything is re-executed: the signed tree head, every entry's place in
   the hash chain and the signed root, their typed records, and the genesis (config digest,
   policy bounds). A log that does not verify is not re-executed: there would be nothing
   trustworthy to compare with.
2. Choose the rule and say why (veritrain/audit/modes.py): ``bitwise`` on the recorded
   hardware class with the recorded settings, ``tolerance`` elsewhere, under a tolerance
   policy, or when the auditor re-executes at another precision or thread count.
3. Download only what the step needs, verified as it arrives (veritrain/audit/fetch.py): the
   state before step T (nothing for T = 0: the seed fixes it) -- for ``--cluster J`` only J's
   share -- and the token windows the assignment rule gives the re-run clusters, by ranges
   checked against each shard's chunk index.
4. Re-execute step T with the recorded configuration and the clusters of its recorded quorum
   (each from its own saved state, or its donor's when it joined at T), or only cluster J's H
   inner steps up to its contribution (``--cluster J``). Payloads of the round still in flight
   whose clusters saved no state (they left) are fetched by digest, verified.
5. Compare. Every re-run cluster's per-inner-step commitments are judged by the rule
   (veritrain/audit/inner_steps.py), and so is the payload it sent: under ``bitwise`` its
   digest, under ``tolerance`` the recorded payload object decoded tensor by tensor against
   the re-executed one (the commitments are the cluster's claims, the payload what the run
   applied); ``--bisect`` reports the first inner step that disagrees, or the contribution.
   For the whole step also: under ``bitwise`` every checkpoint file, metric and generation;
   under ``tolerance`` the policy's metric within its delta and every model tensor within
   the relative parameter distance. In every mode a metric recorded as non-finite must be
   non-finite again.

Timing-dependent decisions are reported but not compared bitwise: with adaptive H the H
chosen for the *next* step depends on measured compute and communication times; the H used
in step T is read from the recorded state, so step T itself is exact.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from records import DataManifest, OuterStep
from records.commitments import InnerCommitments
from records.generations import Generations
from records.genesis import VerificationPolicy
from storage.checkpoint_files import write_files, write_model_index
from storage.checkpoint_files.sharding import is_model_shard, tensor_nbytes
from trainer.api import Reexecution, assignment_rule, reexecute_outer_step
from trainer.checkpoint_layout import TRAINER_STATE, CheckpointFiles, outer_file
from trainer.config import TrainConfig
from trainer.data.assignment import AssignmentRule
from trainer.data.tokenizer import Tokenizer
from trainer.execution import Execution
from trainer.hf_repo import REPO_METADATA, as_format_1
from trainer.outer.contribution_score import RoundData, own_inner_steps
from trainer.outer.verdict import score_seed
from trainer.recorder import TIMING_METRICS
from veritrain.audit.comparison import Bisection, Comparison
from veritrain.audit.contributions import (
    PAYLOAD_LIMIT,
    compare_contribution_digests,
    compare_in_flight,
    compare_payloads,
)
from veritrain.audit.distance import global_distance, largest, tensor_distances
from veritrain.audit.fetch import (
    CountingSource,
    DownloadReport,
    checkpoint_bytes,
    corpus_bytes,
    download_model,
    download_state,
    download_windows,
    windows_read,
)
from veritrain.audit.inner_steps import Dispute, StageVerdict, first_dispute, judge_stage
from veritrain.audit.modes import ModeChoice, Requested, choose_mode
from veritrain.audit.recorded import recorded_commitments
from veritrain.audit.verify.commitment_checks import check_genesis
from veritrain.audit.verify.log_checks import check_chain, check_tree_head
from veritrain.audit.verify.report import Report
from veritrain.errors import ReproduceError
from veritrain.generations import check_continuations, generate, model_state
from veritrain.policy import GENERATION_LOGIT_MARGIN
from veritrain.sources import RunSource, read_verified
from veritrain.sources.downloads import read_checkpoint_manifest, read_data_manifest
from veritrain.sources.recorded_run import RecordedRun

__all__ = ["Comparison", "choose_mode", "reproduce_step", "verified_run"]

_TIMING_DEPENDENT = ("next_inner_steps",)
SIZED_CHECKPOINTS = 16
"""Checkpoints whose files ``reproduce`` sizes to report the run's total (one request per file
with ``--api``)."""


def verified_run(source: RunSource, run_id: str | None) -> tuple[RecordedRun, TrainConfig]:
    """The run, after its log verified (checks 1, 2 and 10 of ``veritrain verify``)."""
    run_id = run_id or source.latest_run_id()
    run = RecordedRun.load(source, run_id)
    report = Report(run_id=run_id, source=source.description)
    note = source.tree_head(run_id)
    head = check_tree_head(report, run, note, pinned_vkey=None, seen_heads=None, source=source)
    check_chain(report, run, note, head)
    config = check_genesis(report, run)
    if report.failures or config is None:
        shown = "; ".join(f"{f.where()}{f.message}" for f in report.failures[:5])
        raise ReproduceError(
            f"run {run_id!r}: the log does not verify, so there "
            "is nothing trustworthy to re-execute against "
            f"({len(report.failures)} problem(s): {shown}); run "
            f"`veritrain verify {run_id}` for the full report"
        )
    return run, config


def reproduce_step(
    source: RunSource,
    run_id: str | None,
    step: int,
    cluster: int | None = None,
    *,
    execution: Execution | None = None,
    mode: Requested = "auto",
    bisect: bool = False,
) -> Comparison:
    """Re-execute outer ``step`` (or cluster ``cluster``'s part of it) and compare it with the
    record; ``execution`` re-runs at another precision, thread count or device, ``mode``
    demands a rule, ``bisect`` reports the first inner step that disagrees and its cost."""
    counting = CountingSource(source)
    run, config = verified_run(counting, run_id)
    recorded = run.step(step)
    previous = run.step(step - 1) if step > 0 else None  # the state to start from must be recorded
    genesis = run.genesis
    if cluster is not None and cluster not in recorded.quorum.clusters:
        raise ReproduceError(
            f"cluster {cluster} did not take part in step {step} of run {run.run_id!r} "
            f"(its quorum: clusters {list(recorded.quorum.clusters)})"
        )
    choice = choose_mode(genesis, config, execution, mode)
    comparison = Comparison(
        run_id=run.run_id,
        step=step,
        cluster=cluster,
        mode=choice.mode,
        reason=choice.reason,
        warnings=[choice.warning] if choice.warning else [],
    )
    clusters = [cluster] if cluster is not None else list(recorded.quorum.clusters)

    with tempfile.TemporaryDirectory(prefix="veritrain-reproduce-") as folder:
        work = Path(folder)
        manifest = read_data_manifest(counting, run.data_manifest)
        rule = assignment_rule(config, manifest)
        first_inner_step = min(r.first_inner_step for r in recorded.data_ranges)
        # Who applies a round scores its contributions: the whole step, or cluster J alone under
        # the short overlap (below).
        applies = cluster is None or config.outer.delay_in_use is not None
        windows = windows_read(
            rule,
            clusters=clusters,
            first_inner_step=first_inner_step,
            inner_steps=recorded.inner_steps,
            eval_windows=_eval_batches(config) * rule.sequences_per_step if applies else 0,
        )
        if applies:
            _add_scored_windows(windows, rule, run, recorded, config)
        data = download_windows(
            counting, manifest, windows, window_tokens=rule.context + 1, directory=work / "data"
        )
        before = (
            download_state(
                counting,
                previous.checkpoint,
                work / "before",
                clusters=config.clusters,
                stages=config.stages,
                cluster=cluster,
            )
            if previous is not None
            else None
        )
        started = time.perf_counter()
        # Only the whole step applies the round still in flight (--cluster J stops at its
        # contribution), except under the short overlap, where cluster J applies it τ inner
        # steps into its round.
        payloads = (
            _payloads_in_flight(counting, previous, before)
            if previous is not None and before is not None and applies
            else {}
        )
        result = reexecute_outer_step(
            config,
            before,
            step,
            cluster,
            clusters=recorded.quorum.clusters,
            payloads=payloads,
            data=data,
            execution=execution,
        )
        seconds = time.perf_counter() - started

        verdicts = _compare_commitments(
            comparison, counting, run, recorded, result, clusters, choice
        )
        if choice.mode == "bitwise":
            disputed = compare_contribution_digests(comparison, recorded, result, cluster)
        else:
            disputed = compare_payloads(
                comparison,
                counting,
                config,
                recorded,
                result,
                before,
                choice,
                cluster,
                previous,
                payloads,
            )
        if bisect:
            comparison.bisection = _bisection(
                comparison,
                verdicts,
                disputed,
                clusters,
                recorded,
                first_inner_step,
                seconds,
                counting,
            )
        if cluster is None and previous is not None:
            compare_in_flight(comparison, previous, result)
        if cluster is None:
            if choice.mode == "bitwise":
                said = generate(config, data.tokenizer(), model_state(result.files.tensors))
                _compare_generations(comparison, counting, recorded, said)
                _compare_files(
                    comparison, counting, recorded, result.files, format_1=genesis.version == 1
                )
                _compare_metrics(comparison, recorded, result)
            else:
                policy = genesis.verification_policy
                _compare_metric(comparison, policy, recorded, result, judged=choice.judge_metric)
                _compare_finiteness(comparison, recorded, result)
                after = download_model(counting, recorded.checkpoint, work / "after")
                _compare_parameters(comparison, before, after, result.files, choice)
                _compare_files(
                    comparison,
                    counting,
                    recorded,
                    result.files,
                    format_1=genesis.version == 1,
                    documents_only=True,
                )
                _check_generations(comparison, counting, config, recorded, data.tokenizer(), after)
    comparison.download = _download_report(counting, run, previous, manifest)
    if execution is not None and execution.differences(config):
        comparison.notes.append(f"re-executed with {', '.join(execution.differences(config))}")
    return comparison


def _eval_batches(config: TrainConfig) -> int:
    """Held-out batches the step reads: its evaluation, and the verdicts' probe."""
    outer = config.outer
    probe = (
        outer.anomaly_probe_batches
        if config.method != "allreduce" and outer.contribution_scores
        else 0
    )
    return max(config.eval_batches, probe)


def _add_scored_windows(
    windows: dict[int, set[int]],
    rule: AssignmentRule,
    run: RecordedRun,
    recorded: OuterStep,
    config: TrainConfig,
) -> None:
    """The windows the verdicts score each contribution of every round the step applies on:
    for every cluster of the round's quorum, the ``anomaly_own_batches`` inner steps of its own
    data that the round's payload digests pick (trainer/outer/contribution_score.py,
    ``own_inner_steps``; the seed is ``score_seed`` of the digests the step's record names, so
    they are known before anything runs). A record that does not name every (cluster, stage)
    payload gets every window of the round (the re-execution then says what is wrong)."""
    outer = config.outer
    if not (outer.anomaly_checks and outer.contribution_scores):
        return
    for applied in recorded.applied:
        digests = applied.combined_digests()
        clusters = sorted({cluster for cluster, _ in digests})
        named = all((c, s) in digests for c in clusters for s in range(config.stages))
        seed = (
            score_seed(
                applied.round, [[digests[(c, s)] for s in range(config.stages)] for c in clusters]
            )
            if named
            else None
        )
        for data_range in run.step(applied.round).data_ranges:
            data = RoundData(
                first_inner_step=data_range.first_inner_step, inner_steps=data_range.inner_steps
            )
            picked = (
                own_inner_steps(seed, data_range.cluster, data, outer.anomaly_own_batches)
                if seed is not None
                else range(data.first_inner_step, data.first_inner_step + data.inner_steps)
            )
            for inner_step in picked:
                more = windows_read(
                    rule, clusters=[data_range.cluster], first_inner_step=inner_step, inner_steps=1
                )
                for shard, starts in more.items():
                    windows.setdefault(shard, set()).update(starts)


def _payloads_in_flight(
    source: RunSource, previous: OuterStep, before: CheckpointFiles
) -> dict[str, bytes]:
    """The payloads of the previous step's round (in flight under the one-step delay) whose
    clusters saved no outer state with them -- they left the run during that step -- read
    from the store by digest, verified. Every other payload is in the state before."""
    wanted = {
        digest
        for (cluster, stage), digest in previous.signed_contributions().items()
        if outer_file(cluster, stage) not in before.tensors
    }
    return {digest: read_verified(source, digest, PAYLOAD_LIMIT) for digest in sorted(wanted)}


def _compare_commitments(
    comparison: Comparison,
    source: RunSource,
    run: RecordedRun,
    recorded: OuterStep,
    result: Reexecution,
    clusters: list[int],
    choice: ModeChoice,
) -> list[StageVerdict]:
    """Every re-run (cluster, stage)'s recorded commitments against the re-execution's."""
    if run.genesis.method == "allreduce":
        comparison.notes.append(
            "AllReduce exchanges gradients every inner "
            "step and records no per-inner-step commitments"
        )
        return []
    signed, problems = recorded_commitments(source, run.genesis, recorded, clusters)
    comparison.mismatched.extend(problems)
    again: Mapping[tuple[int, int], InnerCommitments] = {
        (c.cluster, c.stage): c for c in result.record.commitments
    }
    verdicts = []
    for key in sorted(signed):
        if key not in again:
            comparison.mismatched.append(
                f"cluster {key[0]} stage {key[1]}: the re-execution made no commitments"
            )
            continue
        verdict = judge_stage(
            signed[key],
            again[key],
            mode=choice.mode,
            bound=choice.bound,
            granularity=choice.granularity,
        )
        verdicts.append(verdict)
        judged = comparison.matched if verdict.ok else comparison.mismatched
        judged.append(f"commitments of {verdict.describe()}")
    return verdicts


def _bisection(
    comparison: Comparison,
    verdicts: list[StageVerdict],
    disputed: set[tuple[int, int]],
    clusters: list[int],
    recorded: OuterStep,
    first_inner_step: int,
    seconds: float,
    counting: CountingSource,
) -> Bisection:
    """The first dispute of every re-run cluster: in its commitments, else in the payload it
    sent (``disputed``: the (cluster, stage)s whose recorded payload the re-execution does not
    reproduce)."""
    disputes = []
    for c in clusters:
        own = [v for v in verdicts if v.cluster == c]
        dispute = first_dispute(own, first_inner_step=first_inner_step)
        sent = tuple(sorted(s for d, s in disputed if d == c))
        if dispute is None and sent:
            dispute = Dispute(cluster=c, inner_step=None, where="contribution", stages=sent)
        if dispute is not None:
            disputes.append(dispute)
    if not verdicts:
        comparison.notes.append("nothing to bisect: no per-inner-step commitments were compared")
    return Bisection(
        disputes=tuple(disputes),
        clusters=len(clusters),
        inner_steps=recorded.inner_steps,
        commitments_compared=sum(len(v.inner_distances) + 2 for v in verdicts),
        seconds=seconds,
        downloaded=counting.object_bytes,
    )


def _download_report(
    counting: CountingSource, run: RecordedRun, previous: OuterStep | None, manifest: DataManifest
) -> DownloadReport:
    """What was fetched, against a full fetch and the whole run (sized after counting, through
    the uncounted source). Up to ``SIZED_CHECKPOINTS`` checkpoints are sized one by one; a
    longer run's total is estimated from the ones sized (checkpoints of a run are alike)."""
    downloaded, objects, ranges = counting.object_bytes, counting.objects, counting.ranges
    corpus = corpus_bytes(manifest)
    steps = [s for _, s in run.outer_steps]
    spread = (len(steps) - 1) / (SIZED_CHECKPOINTS - 1)  # evenly over the run, first and last
    chosen = {steps[round(k * spread)].step for k in range(SIZED_CHECKPOINTS)}
    if previous is not None:
        chosen.add(previous.step)
    sizes = {
        s.step: checkpoint_bytes(counting.inner, s.checkpoint) for s in steps if s.step in chosen
    }
    mean = sum(sizes.values()) / len(sizes) if sizes else 0.0
    return DownloadReport(
        downloaded=downloaded,
        objects=objects,
        ranges=ranges,
        full_fetch=corpus + (sizes[previous.step] if previous is not None else 0),
        run_total=corpus + round(mean * len(steps)),
        run_total_estimated=len(sizes) < len(steps),
    )


def _compare_files(
    comparison: Comparison,
    source: RunSource,
    recorded: OuterStep,
    files: CheckpointFiles,
    *,
    format_1: bool,
    documents_only: bool = False,
) -> None:
    """The re-executed step's files against the recorded manifest, digest by digest.
    ``format_1``: the run's genesis is v1, so its revisions may be model-repo format 1 (written
    before genesis v2 and format 2 came out together); a later run's may not.
    ``documents_only`` (under tolerance): the model-repo documents alone -- config, generation
    config, tokenizer files, into which no floating-point result enters -- and not the tensors
    or the trainer state (losses), which the tolerance judges instead."""
    if documents_only:
        files = CheckpointFiles({}, {n: d for n, d in files.json.items() if n != TRAINER_STATE})
    manifest = read_checkpoint_manifest(source, recorded.checkpoint)
    expected = manifest.digests
    saved = {c for n in expected if (c := _cluster_of(n)) is not None}
    left = sorted({c for n in files.tensors if (c := _cluster_of(n)) is not None} - saved)
    if left:
        # A cluster of the step that stopped before it saved: the step is recorded without its
        # files.
        comparison.notes.append(
            f"cluster(s) {left} took part in the step but saved no files (they left during it)"
        )
        files = CheckpointFiles(
            {n: t for n, t in files.tensors.items() if _cluster_of(n) not in left}, files.json
        )
    with tempfile.TemporaryDirectory(prefix="veritrain-reproduced-") as folder:
        digests = write_files(folder, tensor_files=files.tensors, json_files=files.json)
        shards = {n: tensor_nbytes(files.tensors[n]) for n in files.tensors if is_model_shard(n)}
        if shards:
            digests.update(write_model_index(folder, shards))
        # A step of a genesis-v1 run may hold model-repo format 1: judged by what it recorded.
        metadata = {n: d for n, d in files.json.items() if n in REPO_METADATA}
        older = (
            write_files(Path(folder) / "format-1", json_files=as_format_1(metadata))
            if format_1
            else {}
        )
        judged = set(digests) if documents_only else set(expected) | set(digests)
        for name in sorted(judged):
            if name == TRAINER_STATE and name in digests and digests[name] != expected.get(name):
                _compare_trainer_state(comparison, source, expected[name], Path(folder) / name)
            elif digests.get(name) == expected.get(name):
                comparison.matched.append(f"{name}: {expected[name][:16]}…")
            elif name in older and older[name] == expected.get(name):
                comparison.matched.append(
                    f"{name}: {expected[name][:16]}… (model-repo format 1, as recorded)"
                )
            else:
                comparison.mismatched.append(
                    f"{name}: recorded {str(expected.get(name))[:16]}…, "
                    f"re-executed {str(digests.get(name))[:16]}…"
                )


def _compare_generations(
    comparison: Comparison, source: RunSource, recorded: OuterStep, again: Generations
) -> None:
    """Under bitwise, what the re-executed model says against what the step recorded it
    saying: token for token, text for text."""
    said = Generations.from_payload(json.loads(read_verified(source, recorded.generations.object)))
    if (
        said.prompts != again.prompts
        or said.max_new_tokens != again.max_new_tokens
        or len(said.generations) != len(again.generations)
    ):
        comparison.mismatched.append(
            "generations: the recorded object was made for other prompts or lengths"
        )
        return
    differing = [
        g.prompt for g, h in zip(said.generations, again.generations, strict=True) if g != h
    ]
    if not differing:
        comparison.matched.append(
            f"generations: {len(said.generations)} greedy continuations equal token for token"
        )
    else:
        comparison.mismatched.append(f"generations differ for prompts {differing!r}")


def _check_generations(
    comparison: Comparison,
    source: RunSource,
    config: TrainConfig,
    recorded: OuterStep,
    tokenizer: Tokenizer,
    after: CheckpointFiles,
) -> None:
    """Under tolerance, where a near-tie of the argmax may flip on other hardware: every
    recorded token, teacher-forced through the recorded checkpoint (itself judged against the
    re-execution), is the greedy choice within ``GENERATION_LOGIT_MARGIN``
    (veritrain/generations.py)."""
    said = Generations.from_payload(json.loads(read_verified(source, recorded.generations.object)))
    settings = config.generation
    if said.prompts != settings.prompts or said.max_new_tokens != settings.max_new_tokens:
        comparison.mismatched.append(
            "generations: the recorded object was made for other prompts or lengths"
        )
        return
    checks = check_continuations(
        config, tokenizer, model_state(after.tensors), said, margin=GENERATION_LOGIT_MARGIN
    )
    wrong = [c for c in checks if c.problem is not None]
    for c in wrong:
        comparison.mismatched.append(
            f"generation for {c.prompt!r} is not the recorded checkpoint's greedy one: {c.problem}"
        )
    if not wrong:
        largest = max((c.largest_gap for c in checks), default=0.0)
        comparison.matched.append(
            f"generations: {sum(c.tokens for c in checks)} recorded tokens of "
            f"{len(checks)} continuations are the recorded checkpoint's greedy choices "
            f"(largest logit gap {largest:.3g} <= {GENERATION_LOGIT_MARGIN})"
        )


def _cluster_of(name: str) -> int | None:
    """The cluster a per-cluster state file belongs to (``inner-cluster00002-stage00001...``)."""
    for prefix in ("inner-cluster", "outer-cluster"):
        if name.startswith(prefix):
            return int(name[len(prefix) :][:5])
    return None


def _compare_metrics(comparison: Comparison, recorded: OuterStep, result: Reexecution) -> None:
    """Under bitwise, every metric computed from data and state equals the recorded one: the
    finite ones value for value, the ones the step lists as non-finite non-finite again."""
    again = {k: float(v) for k, v in result.record.metrics.items() if k not in TIMING_METRICS}
    signed = {k: v for k, v in recorded.metrics.items() if k not in TIMING_METRICS}
    nonfinite = set(recorded.nonfinite_metrics) - TIMING_METRICS
    mismatched = _nonfinite_mismatches(nonfinite, again)
    differing = sorted(
        k for k in set(again) | set(signed) if k not in nonfinite and again.get(k) != signed.get(k)
    )
    mismatched += [
        f"metric {k}: recorded {signed.get(k)!r}, re-executed {again.get(k)!r}" for k in differing
    ]
    if mismatched:
        comparison.mismatched.extend(mismatched)
    else:
        also = f" and {len(nonfinite)} non-finite again" if nonfinite else ""
        comparison.matched.append(
            f"{len(signed)} metrics equal{also} (all but the measured times "
            f"{sorted(TIMING_METRICS)})"
        )


def _nonfinite_mismatches(nonfinite: set[str], again: Mapping[str, float]) -> list[str]:
    """A metric the step lists as non-finite must be non-finite on re-execution (a finite one
    is one the record left out of its comparison)."""
    return [
        f"metric {k}: recorded as non-finite, re-executed {again.get(k)!r}"
        for k in sorted(nonfinite)
        if k not in again or math.isfinite(again[k])
    ]


def _compare_finiteness(comparison: Comparison, recorded: OuterStep, result: Reexecution) -> None:
    """Under tolerance, where values are not compared one by one: the metrics the step lists
    as non-finite are exactly the ones the re-execution finds non-finite."""
    again = {k: float(v) for k, v in result.record.metrics.items() if k not in TIMING_METRICS}
    nonfinite = set(recorded.nonfinite_metrics) - TIMING_METRICS
    problems = _nonfinite_mismatches(nonfinite, again)
    problems += [
        f"metric {k}: recorded {recorded.metrics.get(k)!r}, re-executed {v!r}"
        for k, v in sorted(again.items())
        if not math.isfinite(v) and k not in nonfinite
    ]
    if problems:
        comparison.mismatched.extend(problems)
    elif nonfinite:
        comparison.matched.append(f"metrics {sorted(nonfinite)}: non-finite again, as recorded")


def _compare_trainer_state(
    comparison: Comparison, source: RunSource, recorded_digest: str, reproduced: Path
) -> None:
    recorded = json.loads(read_verified(source, recorded_digest))
    again = json.loads(reproduced.read_text())
    if not isinstance(recorded, dict) or not isinstance(recorded.get("cursor"), dict):
        # A state file the run's writer never makes: a mismatch to name, not a KeyError.
        comparison.mismatched.append(f"{TRAINER_STATE}: the recorded file has no data cursor")
        return
    differing = [
        k
        for k in set(recorded["cursor"]) | set(again["cursor"])
        if recorded["cursor"].get(k) != again["cursor"].get(k)
    ]
    rest_equal = {k: v for k, v in recorded.items() if k != "cursor"} == {
        k: v for k, v in again.items() if k != "cursor"
    }
    if rest_equal and differing and all(k in _TIMING_DEPENDENT for k in differing):
        comparison.matched.append(f"{TRAINER_STATE}: equal except timing-dependent fields")
        for key in differing:
            comparison.notes.append(
                f"{key} (adaptive H, chosen from measured "
                f"timings) recorded {recorded['cursor'][key]}, "
                f"re-executed {again['cursor'][key]}"
            )
    else:
        comparison.mismatched.append(
            f"{TRAINER_STATE}: differs in {sorted(differing) or 'its header'}"
        )


def _compare_metric(
    comparison: Comparison,
    policy: VerificationPolicy,
    recorded: OuterStep,
    result: Reexecution,
    *,
    judged: bool,
) -> None:
    metric, delta = policy.fallback.metric, policy.fallback.delta
    want = recorded.metrics.get(metric)
    got = result.record.metrics.get(metric)
    if not judged:
        comparison.notes.append(
            f"{metric}: recorded {want}, re-executed {got} "
            "(evaluated at another precision: reported, not judged)"
        )
    elif want is None or got is None:
        comparison.mismatched.append(f"{metric}: not recorded or not re-computed")
    elif abs(float(got) - want) <= delta:
        comparison.matched.append(
            f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| ≤ {delta})"
        )
    else:
        comparison.mismatched.append(
            f"{metric}: recorded {want:.6f}, re-executed {got:.6f} (|Δ| > {delta})"
        )


def _compare_parameters(
    comparison: Comparison,
    before: CheckpointFiles | None,
    after: CheckpointFiles,
    again: CheckpointFiles,
    choice: ModeChoice,
) -> None:
    """Each recorded model tensor θ_t against its re-execution θ': ‖θ' − θ_t‖ / ‖θ_t − θ_{t−1}‖
    (against ‖θ_t‖ for step 0, whose starting point is not stored) within the bound; across
    precisions the whole model at once."""
    bound = choice.bound
    recorded, reexecuted = _model_tensors(after), _model_tensors(again)
    previous = _model_tensors(before) if before is not None else None
    if choice.granularity == "stage":
        distance = global_distance(recorded, reexecuted, previous)
        line = f"all {len(recorded)} model tensors at once: relative distance {distance:.3g}"
        if distance <= bound:
            comparison.matched.append(f"{line} <= {bound}")
        else:
            comparison.mismatched.append(f"{line} > {bound}")
        return
    distances, problems = tensor_distances(recorded, reexecuted, previous)
    problems += [
        f"{d.name}: relative distance {d.value:.3g} > {bound}" for d in distances if d.value > bound
    ]
    if problems:
        comparison.mismatched.extend(problems[:10])
        if len(problems) > 10:
            comparison.mismatched.append(f"... and {len(problems) - 10} more tensors")
        return
    worst = largest(distances)
    comparison.matched.append(
        f"{len(distances)} model tensors within a relative distance of {bound} of the recorded "
        "checkpoint "
        f"(largest {worst.value if worst else 0.0:.3g}, {worst.name if worst else 'none'})"
    )


def _model_tensors(files: CheckpointFiles) -> Mapping[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for name, file in files.tensors.items():
        if is_model_shard(name):
            tensors.update(file)
    return tensors
