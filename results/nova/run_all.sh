#!/usr/bin/env bash
# NOVA-BERT ablation on real data under a short CPU budget (see README.md for the budget).
# Runs one after another with one torch thread; finished runs are reused from the store.
# ml-1m evaluates 256 users at a time: T=200 attention over 1024 users did not fit in memory
# next to the other jobs on the shared machine.
# Usage: results/nova/run_all.sh [DATASET ...]   (default: ml-1m beauty)
set -euo pipefail
cd "$(dirname "$0")/../.."
SHORT=(--set d=64 --set layers=2 --set heads=2 --set lr=1e-3 --epochs 3)
COMMON=(--threads 1 --no-progress --runs-dir results/nova/runs)
datasets=("$@")
[ ${#datasets[@]} -gt 0 ] || datasets=(ml-1m beauty)
for dataset in "${datasets[@]}"; do
  extra=()
  if [ "$dataset" = ml-1m ]; then extra=(--set eval_batch_size=256); fi
  for mode in nova invasive; do
    for fusion in add concat gating; do
      seqbench run nova_bert -d "$dataset" "${SHORT[@]}" "${extra[@]}" "${COMMON[@]}" \
        --ablate mode=$mode --ablate fusion=$fusion --ablate side=all
    done
  done
  for side in none item behavior; do
    seqbench run nova_bert -d "$dataset" "${SHORT[@]}" "${extra[@]}" "${COMMON[@]}" \
      --ablate mode=nova --ablate fusion=gating --ablate side=$side
  done
  seqbench run popularity -d "$dataset" "${extra[@]}" "${COMMON[@]}"
done
