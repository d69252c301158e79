#!/usr/bin/env bash
# CIFAR-10 (JPEG copy) on a real Flower deployment on 127.0.0.1 against `fedvote run` of the same config.
#
# Usage: FEDVOTE_DATA=../shared/datasets experiments/flower_cifar10.sh [AGENTS] [WORKDIR]
#
# Writes a config naming only what it changes (the rest: the defaults, so PATE-FL sees the
# records through the public patch features), splits it with `fedvote deploy split`, starts
# `fedvote deploy server` and one `fedvote deploy agent` per agent (seeded Gaussian shares,
# --no-secure-noise, so that the in-process run draws the same noise; all queries in one
# SecAgg+ round), then runs `fedvote run --config` on the same file. docs/deploy.md, "CIFAR-10
# on Flower", quotes its output. Every process it starts is stopped on exit.
set -euo pipefail

AGENTS=${1:-20}
WORK=${2:-$(mktemp -d)}
DATA=${FEDVOTE_DATA:?set FEDVOTE_DATA to the datasets directory}
HERE=$(cd "$(dirname "$0")/.." && pwd)
FEDVOTE=${FEDVOTE:-$HERE/.venv/bin/fedvote}
mkdir -p "$WORK" && cd "$WORK"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

cat > run.json <<EOF
{"method": "pate-fl",
 "federation": {"dataset": "cifar10", "agents": $AGENTS, "data_dir": "$DATA"},
 "privacy": {"epsilon": 4.0, "noise_seed": 0}}
EOF
echo "start $(date -u +%FT%TZ); $(uptime)"
"$FEDVOTE" deploy split --config run.json --out fed > split.log
echo "split done $(date -u +%T); $(uptime)"
started=$(date +%s)
setsid "$FEDVOTE" deploy server --config fed/run.json --data fed/server.npz --out flower --insecure \
  --no-secure-noise --query-batch-size 3000 --round-timeout 1800 --train-timeout 3600 > server.log 2>&1 &
server=$!
pids+=("$server")
for ((i = 0; i < AGENTS; i++)); do
  setsid "$FEDVOTE" deploy agent --id "$i" --data "fed/agent-$i.npz" --superlink 127.0.0.1:9093 --insecure \
    > "agent-$i.log" 2>&1 &
  pids+=("$!")
done
wait "$server"
echo "flower done in $(($(date +%s) - started)) s wall $(date -u +%T); $(uptime)"
cleanup
started=$(date +%s)
"$FEDVOTE" run --config run.json --out in-process > in-process.log
echo "fedvote run done in $(($(date +%s) - started)) s wall $(date -u +%T); $(uptime)"
"$HERE/.venv/bin/python" - <<'EOF'
import json
for name in ("flower", "in-process"):
    result = json.load(open(f"{name}/result.json"))
    privacy = result["privacy"]
    labels = result.get("label_accuracy")
    print(f"{name}: student accuracy {result['accuracy']:.4f}, pseudo-label accuracy "
          f"{'-' if labels is None else format(labels, '.4f')}, queries {result['queries']}, sigma {result['sigma']:.4g}, "
          f"teachers {result['teacher_model']}, student targets {result['student_targets']}, "
          f"agent epsilon {privacy['agent']['epsilon']:.4f}, delta {privacy['delta']:.3g}")
EOF
