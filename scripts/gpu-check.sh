#!/usr/bin/env bash
# The GPU check of issue 22, one prepared script for a single-GPU host (about 6-8 minutes):
#   (a) a tiny C2 S1 bf16 run on CUDA under the tolerance policy, `veritrain verify`,
#       `veritrain reproduce --step 1 --device cpu` (the CUDA-recorded step re-executed on a CPU)
#       and `--device cuda` (on the GPU that recorded it: is a GPU run bitwise repeatable?);
#   (a') a tiny CPU-recorded run (fp32, bitwise policy) whose step 1 is re-executed on the GPU;
#   (b) `veritrain bench throughput` at qwen2-1.5b and qwen2-0.5b (bf16, S1, 4 x 8 x 1024);
#   (c) a short `veritrain train` at qwen2-0.5b (C1 S1, same batch), its inner steps' tokens/s
#       against (b)'s for the same shape and batch: the cost of the audit (commitments) and of
#       the rest of a step (exchange, scores, checkpoint and recording) are reported apart.
# It writes OUT_DIR/gpu-check.json (one summary) and prints a table.
#
# Usage: scripts/gpu-check.sh OUT_DIR      (PYTHON=... picks the interpreter; default python3;
#        GPU_CHECK_PARTS=ab runs only parts (a) and (b), for a rerun on a short lease)
#
# It installs nothing: the interpreter must already have torch with CUDA and veritrain's
# dependencies (a GPU image's own torch is kept; ../shared/gpu/wheels.sh downloads the others as
# wheels). A missing package is named and the script stops; so does a host without CUDA. The
# source tree this script sits in is what runs (PYTHONPATH), not an installed copy.
set -uo pipefail

OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
PARTS=${GPU_CHECK_PARTS:-abc}

fail() {
  echo "gpu-check: $*" >&2
  exit 2
}

command -v "$PY" >/dev/null 2>&1 ||
  fail "no Python interpreter '$PY' (set PYTHON=/path/to/python3)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 RUST_LOG=warn

# 1. What must be there before anything runs: torch, a CUDA device, every module the steps import.
"$PY" -c "import torch" 2>/dev/null ||
  fail "missing Python package 'torch' for $PY: install a CUDA build of PyTorch (>= 2.7), run again"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
  fail "no CUDA device visible to $PY" \
    "(torch $("$PY" -c 'import torch; print(torch.__version__)')): run this on a GPU host"
missing=$("$PY" - <<'EOF'
import importlib
for module in ("veritrain.cli.main", "trainer.api", "veritrain.audit.reproduce",
               "veritrain.audit.verify",
               "veritrain.bench.step_throughput", "veritrain.record.training", "tokenizers"):
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        print(exc.name.split(".")[0])
        break
EOF
)
[ -z "$missing" ] || fail "missing Python package '$missing' for $PY: install it" \
  "(../shared/gpu/wheels.sh fetches the wheels) and run again"

mkdir -p "$OUT" || fail "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
export VERITRAIN_DATA_DIR="$OUT/veritrain-data"  # its own ledger, objects, keys and corpora
rm -rf "$VERITRAIN_DATA_DIR"
STEPS="$OUT/steps.tsv"
: >"$STEPS"

# One step: NAME LIMIT_SECONDS OUTPUT_FILE COMMAND...; its exit status and seconds go to steps.tsv.
step() {
  local name=$1 limit=$2 output=$3
  shift 3
  echo "gpu-check: $name ..." >&2
  local started=$SECONDS
  timeout "$limit" "$@" >"$OUT/$output" 2>"$OUT/$name.log"
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - started))" "$output" >>"$STEPS"
  [ "$rc" -eq 0 ] || echo "gpu-check: $name failed (exit $rc): see $OUT/$name.log" >&2
}

VT=("$PY" -m veritrain)
if [[ $PARTS == *a* ]]; then
# (a) record a CUDA run, verify it, re-execute its step 1 on the CPU
step train-tiny 240 train-tiny.out "${VT[@]}" train --preset tiny --clusters 2 --stages 1 \
  --outer-steps 2 --precision bf16 --verification tolerance --run-id gpu-check-tiny --quiet
step verify-tiny 120 verify-tiny.json "${VT[@]}" verify gpu-check-tiny --json
step reproduce-tiny-cpu 180 reproduce-tiny-cpu.json "${VT[@]}" reproduce gpu-check-tiny \
  --step 1 --device cpu --json
step reproduce-tiny-gpu 120 reproduce-tiny-gpu.json "${VT[@]}" reproduce gpu-check-tiny \
  --step 1 --device cuda --json
# (a') a CPU-recorded run (recorded here with CUDA hidden, fp32, bitwise policy, S1: one GPU
#      holds one stage) re-executed on the GPU
step train-cpu 240 train-cpu.out env CUDA_VISIBLE_DEVICES= "${VT[@]}" train --preset tiny \
  --clusters 2 --stages 1 --outer-steps 2 --run-id gpu-check-cpu --quiet
step reproduce-cpu-run-gpu 120 reproduce-cpu-run-gpu.json "${VT[@]}" reproduce gpu-check-cpu \
  --step 1 --device cuda --json
fi
if [[ $PARTS == *b* ]]; then
# (b) the model and its inner step alone, in one process
#     (at 0.5b the per-inner-step commitments, the audit's cost on the host, are timed apart)
for preset in qwen2-1.5b qwen2-0.5b; do
  extra=()
  [ "$preset" = qwen2-0.5b ] && extra=(--commitments)
  step "bench-$preset" 150 "bench-$preset.json" "${VT[@]}" bench throughput --preset "$preset" \
    --device cuda --precision bf16 --stages 1 --micro-batches 4 --micro-batch-size 8 --steps 3 \
    "${extra[@]}" --json
done
fi
if [[ $PARTS == *c* ]]; then
# (c) the real trainer at the bench's shape and batch
step train-qwen2-0.5b 300 train-qwen2-0.5b.out "${VT[@]}" train --preset qwen2-0.5b \
  --clusters 1 --stages 1 --outer-steps 2 --inner-steps 4 --verification tolerance \
  --run-id gpu-check-qwen2 --quiet
fi

# The summary and the table.
"$PY" - "$OUT" "$ROOT" <<'EOF'
import datetime, json, pathlib, re, sqlite3, sys

import torch

out, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])


def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None


steps = {}
for line in (out / "steps.tsv").read_text().splitlines():
    name, rc, seconds, output = line.split("\t")
    steps[name] = {"exit": int(rc), "seconds": int(seconds), "output": output}
# The source tree that ran: its code digest (what a genesis records) and git's view of it. A
# copy of a working tree may carry another checkout's .git: the digest is the one to quote.
from veritrain.record.provenance import code_identity

code = code_identity()
commit = code.git_commit or "unknown"
bench = {p: load(f"bench-{p}.json") for p in ("qwen2-1.5b", "qwen2-0.5b")}
verify = load("verify-tiny.json")


def reproduced(name):
    """A reproduce report in brief: its rule, verdict and the largest distance it measured."""
    report = load(name)
    if report is None:
        return None
    lines = report.get("matched", []) + report.get("mismatched", [])
    largest = [float(x) for line in lines for x in re.findall(r"largest ([0-9.eE+-]+)", line)]
    return {"mode": report.get("mode"), "ok": report.get("ok"),
            "largest_distance": max(largest, default=None),
            "mismatched": report.get("mismatched", []), "warnings": report.get("warnings", [])}


reproductions = {name: reproduced(f"{name}.json")
                 for name in ("reproduce-tiny-cpu", "reproduce-tiny-gpu", "reproduce-cpu-run-gpu")}

# (c): the ledger's metrics of each recorded step (ledger/models.py Metric)
trainer = {}
ledger = out / "veritrain-data" / "ledger.db"
if ledger.exists():
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT step, key, value FROM metrics WHERE run_id = ?",
                          ("gpu-check-qwen2",)).fetchall()
    per_step = {}
    for step, key, value in rows:
        per_step.setdefault(step, {})[key] = value
    # the first step pays the start (compilation of kernels, allocator): the last one is steady
    last = per_step.get(max(per_step)) if per_step else None
    if last and last.get("compute_seconds"):
        inner = last["step_tokens"] / last["compute_seconds"]
        bench_rate = (bench["qwen2-0.5b"] or {}).get("tokens_per_second")
        trainer = {
            "step": max(per_step),
            "metrics": last,
            "inner_tokens_per_second": inner,
            "step_tokens_per_second": last["step_tokens"] / last["wall_seconds"],
            "bench_tokens_per_second": bench_rate,
            "inner_over_bench": inner / bench_rate if bench_rate else None,
            "outside_inner_seconds": last["wall_seconds"] - last["compute_seconds"],
        }

summary = {
    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "commit": commit,
    "git_dirty": code.git_dirty,
    "source_sha256": code.source_sha256,
    "device": torch.cuda.get_device_name(0),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "python": sys.version.split()[0],
    "steps": steps,
    "verify_ok": (verify or {}).get("ok"),
    "reproductions": reproductions,
    "bench": {
        p: None if r is None else {k: r.get(k) for k in (
            "parameters", "tokens_per_second", "mfu", "peak_tflops", "peak_source",
            "peak_memory_bytes", "commitment_seconds_per_step",
            "tokens_per_second_with_commitments")}
        for p, r in bench.items()
    },
    "trainer_qwen2_0_5b": trainer,
    "passed": bool(steps) and all(s["exit"] == 0 for s in steps.values()),
}
(out / "gpu-check.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")

print(f"\ngpu-check on {summary['device']} (torch {summary['torch']}, CUDA {summary['cuda']}), "
      f"commit {commit[:12]}{' (dirty)' if code.git_dirty else ''}, source "
      f"{code.source_sha256[:12]}, {summary['date']}")
print(f"  {'step':<22} {'exit':>4} {'seconds':>8}")
for name, s in steps.items():
    print(f"  {name:<22} {s['exit']:>4} {s['seconds']:>8}")
for name, r in reproductions.items():
    if r:
        print(f"  {name}: {r['mode']}, ok={r['ok']}, largest relative distance "
              f"{r['largest_distance']}")
for p, r in summary["bench"].items():
    if r:
        print(f"  bench {p}: {r['tokens_per_second']:,.0f} tokens/s, MFU {r['mfu']:.1%} of "
              f"{r['peak_tflops']:.4g} TFLOP/s ({r['peak_source']}), "
              f"peak {r['peak_memory_bytes'] / 1e9:.1f} GB")
        if r.get("commitment_seconds_per_step"):
            print(f"    + commitments {r['commitment_seconds_per_step']:.3f} s per inner step: "
                  f"{r['tokens_per_second_with_commitments']:,.0f} tokens/s")
if trainer:
    ratio = trainer["inner_over_bench"]
    print(f"  train qwen2-0.5b step {trainer['step']}: inner steps "
          f"{trainer['inner_tokens_per_second']:,.0f} tokens/s"
          + (f" = {ratio:.2f} of the bench" if ratio else "")
          + f"; the whole step {trainer['step_tokens_per_second']:,.0f} tokens/s, "
          f"{trainer['outside_inner_seconds']:.1f} s outside the inner steps")
print(f"  summary: {out / 'gpu-check.json'}; {'PASSED' if summary['passed'] else 'FAILED'}")
sys.exit(0 if summary["passed"] else 1)
EOF
