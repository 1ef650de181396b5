#!/usr/bin/env bash
# `zerosync train` as 2 ranks under the MPI launcher. Arguments: MODE, the zerosync binary, the
# launcher (mpiexec). Open MPI's settings (root, oversubscription) come from the environment.
#   solve   2 ranks solve cart-pole; the checkpoint resumes with 2 ranks and is refused by 1
#   kill    rank 1 killed (SIGKILL) mid-run: the run ends within seconds, naming rank 1, and the
#           last checkpoint resumes
#   hang    rank 1 stopped (SIGSTOP) mid-run: rank 0 names it within --peer-timeout plus the roll
#           call, exits 4, and the last checkpoint resumes
#   interrupt  SIGINT to rank 1 alone: every rank stops at the next control point, a checkpoint
#           is saved, status 130, and it resumes
set -u
mode="$1" bin="$2" launcher="$3"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

resume_check() {  # RUN_DIR STEPS: resumes with 2 ranks and checks it continued from the checkpoint
  "$launcher" -n 2 "$bin" train --resume --out "$1" --steps "$2" --quiet > "$dir/resume.log" 2>&1
  local status=$?
  cat "$dir/resume.log"
  [ "$status" -eq 0 ] || fail "resuming $1 with 2 ranks exited $status"
  grep -q "^resuming $1 at [0-9]* environment steps" "$dir/resume.log" || fail "no 'resuming' line"
  grep -q "^  $2 environment steps" "$dir/resume.log" || fail "the resumed run did not reach $2 steps"
}

if [ "$mode" = solve ]; then
  t0=$(now)
  "$launcher" -n 2 "$bin" train --env cartpole --seed 0 --out "$dir/run" --quiet > "$dir/log" 2>&1
  status=$?
  cat "$dir/log"
  [ "$status" -eq 0 ] || fail "exit status $status; expected 0"
  grep -q "2 ranks, each with its own 8 envs" "$dir/log" || fail "no line about the 2 ranks"
  grep -q "^zerosync train: solved: evaluation mean return" "$dir/log" || fail "cart-pole was not solved"
  [ "$(grep -c '^zerosync train: ' "$dir/log")" -eq 2 ] || fail "the start and summary lines must be printed once (rank 0)"
  steps=$(sed -n 's/^  \([0-9]*\) environment steps.*/\1/p' "$dir/log")
  echo "solved in $(seconds "$t0" "$(now)") s at $steps environment steps per rank"
  "$bin" train --resume --out "$dir/run" --steps $((steps + 100)) --quiet > "$dir/alone.log" 2>&1
  status=$?
  cat "$dir/alone.log"
  [ "$status" -eq 2 ] || fail "one process resuming a checkpoint of 2 ranks exited $status; expected 2"
  grep -q "was written by a run of 2 rank(s); this run has 1" "$dir/alone.log" || fail "no message about the rank count"
  resume_check "$dir/run" $((steps + 400))
  echo "PASS: 2 ranks solved cart-pole; the checkpoint resumes with 2 ranks and is refused by 1"
  exit 0
fi

[ "$mode" = kill ] || [ "$mode" = hang ] || [ "$mode" = interrupt ] || fail "unknown mode '$mode'"
cat > "$dir/config.json" <<'JSON'
{"network": {"trunk": [32], "head_hidden": 16, "atoms": 11}, "envs": 4, "batch_size": 16,
 "learning_starts": 100, "replay": {"capacity": 2000}, "eval": {"every": 0, "stop_when_solved": false},
 "checkpoint_every": 2000}
JSON
"$launcher" -n 2 "$bin" train --config "$dir/config.json" --steps 100000000 --out "$dir/run" --quiet \
  --peer-timeout 3 > "$dir/log" 2>&1 &
launched=$!
for _ in $(seq 1 600); do [ -f "$dir/run/checkpoint.safetensors" ] && break; sleep 0.1; done
[ -f "$dir/run/checkpoint.safetensors" ] || fail "no checkpoint after 60 s"
rank1=""
for p in $(pgrep -P "$launched"); do
  tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$p
done
[ -n "$rank1" ] || fail "rank 1's process not found among the launcher's children (this test needs Open MPI)"
t0=$(now)
case "$mode" in
  kill) kill -KILL "$rank1"; done_to="killed" ;;
  hang) kill -STOP "$rank1"; done_to="stopped" ;;
  interrupt) before=$(stat -c %Y.%y "$dir/run/checkpoint.safetensors"); kill -INT "$rank1"; done_to="interrupted" ;;
esac
for _ in $(seq 1 300); do kill -0 "$launched" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launched" 2>/dev/null; then
  kill -CONT "$rank1" 2>/dev/null
  kill -KILL "$launched" "$rank1" 2>/dev/null
  fail "the run was still going 30 s after rank 1 was $done_to"
fi
wait "$launched"
status=$?
took=$(seconds "$t0" "$(now)")
kill -KILL "$rank1" 2>/dev/null  # a stopped process the launcher failed to end would linger
cat "$dir/log"
[ "$status" -ne 0 ] || fail "exit status 0 after losing rank 1"
case "$mode" in
  kill)  # Open MPI 5 wraps its message over two lines
    tr '\n' ' ' < "$dir/log" | grep -q "process rank 1 .*exited on *signal 9" || fail "no message naming rank 1" ;;
  hang)
    [ "$status" -eq 4 ] || fail "exit status $status; expected 4"
    grep -q "rank 1 did not answer a roll call" "$dir/log" || fail "no message naming rank 1" ;;
  interrupt)
    [ "$status" -eq 130 ] || fail "exit status $status; expected 130"
    grep -q "^zerosync train: interrupted (Ctrl-C on rank 1)" "$dir/log" || fail "no 'interrupted' summary"
    [ "$(stat -c %Y.%y "$dir/run/checkpoint.safetensors")" != "$before" ] || fail "no checkpoint saved on the way out" ;;
esac
echo "the run ended $took s after rank 1 was $done_to (status $status)"
saved=$(head -c 65536 "$dir/run/checkpoint.safetensors" | grep -ao '"loop.env_steps":"[0-9]*"' | grep -o '[0-9]*')
[ -n "$saved" ] || fail "the checkpoint's metadata names no step count"
resume_check "$dir/run" $((saved + 1000))
echo "PASS: rank 1 $done_to: the run ended in $took s with a message naming it; the last checkpoint resumes"
