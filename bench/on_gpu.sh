#!/usr/bin/env bash
# The first thing to run on a machine with an NVIDIA GPU: what navarch reads there, beside
# nvidia-smi's own value, with a verdict per row (bench/gpu_compare.py makes the table).
#
#   bench/on_gpu.sh [OUT_DIR]       # OUT_DIR keeps every tool's output (default: a temp dir)
#
# Steps, all within 5 minutes (NAVARCH_ON_GPU_DEADLINE_S, default 280 s, each step capped
# by what is left): build the agent bundle; one agent check from the bundle against the
# real NVML and kernel log (journald or /dev/kmsg), printed, not stored; `nvidia-smi -q
# -x`; where installed, `dcgmi diag -r 1 -j`, `nvbandwidth -t host_to_device_memcpy_ce`
# and `all_reduce_perf -g 1`; then the table, through the parsers the agent ships.
#
# Read-only on the GPU: nothing here resets it, changes its mode, clocks, power limit,
# persistence or ECC, or starts a DCGM config (no `nvidia-smi -r/-pm/-e/-pl/-lgc`).
#
# Exit: 0 every row ok; 1 a row differs, names a fault, a reading navarch should have
# made is missing, or a step failed; 77 no NVIDIA GPU here (nothing was run).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NO_GPU=77
deadline_s=${NAVARCH_ON_GPU_DEADLINE_S:-280}
start_s=$SECONDS

# The smaller of $1 and the seconds left before the deadline (at least 5).
cap() {
  local left=$((deadline_s - (SECONDS - start_s)))
  [ "$left" -lt 5 ] && left=5
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "no NVIDIA GPU: nvidia-smi is not installed (no NVIDIA driver on this machine); nothing run" >&2
  exit "$NO_GPU"
fi
if ! listing=$(timeout 20 nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$listing"; then
  echo "no NVIDIA GPU: nvidia-smi lists none (${listing:-no output}); nothing run" >&2
  exit "$NO_GPU"
fi
gpus=$(grep -c '^GPU [0-9]' <<<"$listing")

out=${1:-$(mktemp -d)}
mkdir -p "$out"
echo "$listing"
echo "outputs in $out"

step() {  # step NAME FILE TIMEOUT_S CMD...: run CMD, stdout to FILE, stderr to FILE.err
  local name=$1 file=$2 limit
  limit=$(cap "$3")
  shift 3
  timeout "$limit" "$@" >"$file" 2>"$file.err"
  local rc=$?
  echo "  $name: exit $rc ($((SECONDS - start_s)) s)"
  return $rc
}

failed=0
step "agent bundle" "$out/bundle.txt" 60 "$PY" -m navarch agent bundle --out "$out/navarch-agent.pyz" || failed=1
cat >"$out/agent.yaml" <<EOF
fleet: bench
pool: bench
node: bench-0001
instance_id: bench-0001
store: file://$out/store
key: "$(printf '0%.0s' $(seq 64))"
gpus_per_node: $gpus
state_file: $out/agent-state.json
metadata: none
EOF
step "agent check (real NVML, kernel log)" "$out/report.json" 90 \
  "$PY" -I -S "$out/navarch-agent.pyz" run --once --stdout --config "$out/agent.yaml" || failed=1
step "nvidia-smi -q -x" "$out/smi.xml" 30 nvidia-smi -q -x || failed=1

args=(--report "$out/report.json" --smi "$out/smi.xml")
if command -v dcgmi >/dev/null 2>&1; then
  step "dcgmi diag -r 1" "$out/dcgmi.json" 150 dcgmi diag -r 1 -j
  args+=(--dcgmi "$out/dcgmi.json" --dcgmi-exit "$?")
fi
if command -v nvbandwidth >/dev/null 2>&1; then
  step "nvbandwidth" "$out/nvbandwidth.txt" 60 nvbandwidth -t host_to_device_memcpy_ce
  args+=(--nvbandwidth "$out/nvbandwidth.txt")
fi
if command -v all_reduce_perf >/dev/null 2>&1; then
  step "all_reduce_perf -g 1" "$out/nccl.txt" 60 all_reduce_perf -b 8M -e 128M -f 2 -g 1
  args+=(--nccl "$out/nccl.txt")
fi

echo
if [ "$failed" -ne 0 ] || [ ! -s "$out/report.json" ] || [ ! -s "$out/smi.xml" ]; then
  echo "a step failed: see $out/*.err" >&2
  exit 1
fi
"$PY" bench/gpu_compare.py "${args[@]}"
