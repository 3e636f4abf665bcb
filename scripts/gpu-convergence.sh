#!/usr/bin/env bash
# The convergence study of issue #24 at the qwen2-12m preset, on one GPU (about 4-6 minutes on
# an H100/H200): `veritrain bench convergence --device cuda` for AllReduce, DiLoCo, the preset's
# DiLoCoX and the levers named in ARMS, at seeds 0-2, first at `bench comm --quick`'s schedule
# (T = 8 x H = 25), then at the full one (T = 40 x H = 25). On 2 CPU cores a qwen2-12m inner step
# takes ~2-4 s, so the full study would take ~10 h there; on a GPU each run takes a minute.
#
# Usage: scripts/gpu-convergence.sh OUT_DIR
#   PYTHON=...         the interpreter (default python3; torch with CUDA and veritrain's deps)
#   XDG_CACHE_HOME=... where the preset's corpus is (built on the first run otherwise: carry
#                      the one built on the CPU machine, so both read the same tokens)
#   ARMS="..."         arms beyond the three methods (lever names of convergence_study.py);
#                      by default the preset before its short overlap (lr0.7-m0.5-warm-up:
#                      the one-step delay and one warm-up round) and blocking-lr1-m0
#   JOBS=N             runs at once on the GPU (default 8)
# Writes OUT_DIR/convergence-qwen2-12m-{quick,full}.{json,png,log}.
set -uo pipefail

OUT=${1:?usage: scripts/gpu-convergence.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
ARMS=${ARMS:-"lr0.7-m0.5-warm-up blocking-lr1-m0"}
JOBS=${JOBS:-8}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "gpu-convergence: no CUDA device visible to $PY" >&2
  exit 2
}
mkdir -p "$OUT"
arm_options=(--arm diloco --arm dilocox)
for arm in $ARMS; do arm_options+=(--arm "$arm"); done

status=0
for mode in quick full; do
  schedule=()
  [ "$mode" = quick ] && schedule=(--quick)
  echo "== $mode: $(date -u +%H:%M:%S)"
  "$PY" -m veritrain bench convergence "${schedule[@]}" --preset qwen2-12m --device cuda \
    --jobs "$JOBS" --json --plot "$OUT/convergence-qwen2-12m-$mode.png" "${arm_options[@]}" \
    >"$OUT/convergence-qwen2-12m-$mode.json" 2>"$OUT/convergence-qwen2-12m-$mode.log" || status=$?
  tail -n 3 "$OUT/convergence-qwen2-12m-$mode.log"
  [ $status -eq 0 ] || break
done
echo "== done $(date -u +%H:%M:%S), status $status"
exit $status
