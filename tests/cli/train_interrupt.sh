#!/usr/bin/env bash
# Ctrl-C during `zerosync train` saves a checkpoint and exits cleanly (status 130), and
# --resume continues from it. Argument: the zerosync binary.
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cat > "$dir/config.json" <<'JSON'
{"network": {"trunk": [32], "head_hidden": 16, "atoms": 11}, "envs": 4, "batch_size": 16,
 "learning_starts": 100, "replay": {"capacity": 2000}, "eval": {"every": 0, "stop_when_solved": false},
 "checkpoint_every": 0}
JSON
"$bin" train --config "$dir/config.json" --steps 100000000 --out "$dir/run" --quiet > "$dir/log" 2>&1 &
pid=$!
# Wait until training is under way (metrics rows appear), then interrupt.
for _ in $(seq 1 300); do
  [ "$(wc -l < "$dir/run/metrics.csv" 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"
status=$?
cat "$dir/log"
[ "$status" -eq 130 ] || { echo "FAIL: exit status $status after Ctrl-C; expected 130"; exit 1; }
grep -q "interrupted (Ctrl-C)" "$dir/log" || { echo "FAIL: no 'interrupted' message"; exit 1; }
[ -f "$dir/run/checkpoint.safetensors" ] || { echo "FAIL: no checkpoint after Ctrl-C"; exit 1; }
steps=$(sed -n 's/^  \([0-9]*\) environment steps.*/\1/p' "$dir/log")
[ -n "$steps" ] || { echo "FAIL: no step count in the summary"; exit 1; }
target=$((steps + 40))
"$bin" train --resume --out "$dir/run" --steps "$target" --quiet > "$dir/log2" 2>&1 || { cat "$dir/log2"; echo "FAIL: resume failed"; exit 1; }
cat "$dir/log2"
grep -q "resuming $dir/run at $steps environment steps" "$dir/log2" || { echo "FAIL: resume did not start at $steps"; exit 1; }
grep -q "^  $target environment steps" "$dir/log2" || { echo "FAIL: resume did not reach $target"; exit 1; }
echo "PASS: interrupted at $steps steps, resumed to $target"
