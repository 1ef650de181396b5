#!/usr/bin/env bash
# A run killed at any instant resumes from its last complete checkpoint: `zerosync train` with a
# checkpoint every few hundred environment steps (so kills often land inside a save) is killed
# with SIGKILL at random moments, over and over, each time resumed; every resume must start, at a
# step count that never goes back. Then SIGTERM: handled like Ctrl-C (checkpoint saved, status
# 143). Argument: the zerosync binary.
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
kills="${ZS_KILLS:-16}"
cat > "$dir/config.json" <<'JSON'
{"network": {"trunk": [32], "head_hidden": 16, "atoms": 11}, "envs": 4, "batch_size": 16,
 "learning_starts": 40, "replay": {"capacity": 2000}, "eval": {"every": 0, "stop_when_solved": false},
 "checkpoint_every": 64}
JSON
fail() { echo "FAIL: $*"; cat "$dir"/log* 2>/dev/null | tail -20; exit 1; }
RANDOM=$$
# The first run, killed only once its first checkpoint exists (before that there is nothing to resume).
"$bin" train --config "$dir/config.json" --steps 100000000 --out "$dir/run" --quiet > "$dir/log0" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -f "$dir/run/checkpoint.safetensors" ] && break; sleep 0.05; done
[ -f "$dir/run/checkpoint.safetensors" ] || fail "no checkpoint appeared"
sleep "0.$((RANDOM % 10))"
kill -KILL "$pid"; wait "$pid" 2>/dev/null
last=0
for k in $(seq 1 "$kills"); do
  "$bin" train --resume --out "$dir/run" --steps 100000000 --quiet > "$dir/log$k" 2>&1 &
  pid=$!
  # Kill at a random moment: while loading, training or saving.
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  at=$(sed -n "s/^resuming .* at \([0-9]*\) environment steps.*/\1/p" "$dir/log$k")
  if [ -z "$at" ]; then
    # Killed before it printed where it resumes: the checkpoint must still load.
    grep -q "error" "$dir/log$k" && fail "resume $k failed: $(cat "$dir/log$k")"
    continue
  fi
  [ "$at" -ge "$last" ] || fail "resume $k started at $at environment steps, before the previous $last"
  last=$at
done
# The last checkpoint is whole: a resume runs to its end and exits 0.
"$bin" train --resume --out "$dir/run" --steps $((last + 400)) --quiet > "$dir/log_end" 2>&1 || fail "the final resume failed"
grep -q "^  [0-9]* environment steps" "$dir/log_end" || fail "the final resume did not finish"
# SIGTERM is a polite stop: checkpoint saved, status 143, and the run resumes from it.
"$bin" train --resume --out "$dir/run" --steps 100000000 --quiet > "$dir/log_term" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^resuming" "$dir/log_term" && break; sleep 0.05; done
sleep 0.5
kill -TERM "$pid"; wait "$pid"; status=$?
[ "$status" -eq 143 ] || fail "status $status after SIGTERM; expected 143"
grep -q "terminated (SIGTERM)" "$dir/log_term" || fail "no 'terminated (SIGTERM)' message"
steps=$(sed -n 's/^  \([0-9]*\) environment steps.*/\1/p' "$dir/log_term")
"$bin" train --resume --out "$dir/run" --steps $((steps + 40)) --quiet > "$dir/log_after" 2>&1 || fail "no resume after SIGTERM"
grep -q "resuming $dir/run at $steps environment steps" "$dir/log_after" || fail "the resume after SIGTERM did not start at $steps"
echo "PASS: $kills SIGKILLs, resumed each time (last at $last environment steps); SIGTERM saved at $steps"
