#!/usr/bin/env bash
# The program never ends by a signal or an abort: every hostile input gets a message and one of
# the exit statuses of docs/cli.md (0 ok, 1 self-check failed, 2 bad input, 3 stopped, 109 bad
# command line, 130 interrupted). Arguments: the zerosync binary, the fuzz seed corpus (for a
# valid config and batch).
set -u
bin="$1"
corpus="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
# Under AddressSanitizer (the openmp-debug preset) an allocation that cannot be served aborts
# unless told to fail like malloc does; the program must then report it like any other.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
config="$corpus/config/small.json"
batch="$corpus/batch/small.safetensors"
fails=0

# expect STATUS PATTERN COMMAND...: runs the command, checks its status and that stderr matches.
expect() {
  local want="$1" pattern="$2"
  shift 2
  "$@" > out.txt 2> err.txt
  local got=$?
  if [ "$got" -ne "$want" ] || { [ -n "$pattern" ] && ! grep -Eq -- "$pattern" err.txt; }; then
    echo "FAIL: $* -> status $got (expected $want), stderr:"; cat err.txt
    echo "  expected stderr to match: $pattern"
    fails=$((fails + 1))
  else
    echo "ok: $want: $*"
  fi
}

# Command-line errors: one status, whatever CLI11's kind of error.
expect 109 "Value abc not in range" "$bin" step --config "$config" --batch "$batch" --out o --steps abc
expect 109 "not in range" "$bin" step --config "$config" --batch "$batch" --out o --steps 0
expect 109 "--out is required" "$bin" step --config "$config" --batch "$batch"
expect 109 "not in" "$bin" train --env atari
expect 109 "" "$bin" step --bogus
expect 109 "" "$bin" frobnicate
expect 0 "" "$bin" --help

# Bad input: status 2 and a message naming the path and the problem, never an abort.
expect 2 "^zerosync: error: step --config: '$dir' is a directory" "$bin" step --config "$dir" --batch "$batch" --out o
expect 2 "^zerosync: error: step --batch: '$dir' is a directory" "$bin" step --config "$config" --batch "$dir" --out o
echo '{"lr": 1e400}' > huge.json
expect 2 "^zerosync: error: config 'huge.json' is not valid JSON: .*1e400" \
  "$bin" step --config huge.json --batch "$batch" --out o
echo '{"trunk": [65536, 65536, 65536, 65536], "state_dim": 4, "branches": [2, 3]}' > wide.json
expect 2 "^zerosync: error: step: building the network .*(allocate|out of memory)" \
  "$bin" step --config wide.json --batch "$batch" --out o
echo x > afile
expect 2 "^zerosync: error: step --out: the folder 'afile' of 'afile/o' is a regular file" \
  "$bin" step --config "$config" --batch "$batch" --out afile/o
expect 2 "^zerosync: error: train: cannot create the run directory 'afile/run'" "$bin" train --out afile/run --steps 8
expect 2 "^zerosync: error: train --config: '$dir' is a directory" "$bin" train --config "$dir" --out run --steps 8
expect 2 "^zerosync: error: Kokkos could not start" "$bin" --kokkos-threads=abc info
expect 2 "^zerosync: error: Kokkos could not start" "$bin" --kokkos-threads=-5 info

# Outputs that are not regular files are refused and left as they were.
mkfifo fifo
echo precious > target
ln -s target link
mkdir folder
expect 2 "'fifo' is a FIFO \(named pipe\); expected a regular file" "$bin" step --config "$config" --batch "$batch" --out fifo
expect 2 "'link' is a symbolic link" "$bin" step --config "$config" --batch "$batch" --out link
expect 2 "'folder' is a directory" "$bin" step --config "$config" --batch "$batch" --out folder
[ -p fifo ] && [ -L link ] && [ "$(cat target)" = precious ] && [ -d folder ] \
  || { echo "FAIL: a refused output was changed"; fails=$((fails + 1)); }

# A full disk (here a file-size limit, which would otherwise end the program by SIGXFSZ) and a
# closed pipe (SIGPIPE) are errors with status 2.
(ulimit -f 1; "$bin" step --config "$config" --batch "$batch" --out big.safetensors > /dev/null 2> err.txt; echo $? > status.txt)
if [ "$(cat status.txt)" != 2 ] || ! grep -q "^zerosync: error: .*'big.safetensors.tmp' failed" err.txt || [ -e big.safetensors.tmp ]; then
  echo "FAIL: step under a file-size limit: status $(cat status.txt)"; cat err.txt; fails=$((fails + 1))
else
  echo "ok: 2: step under a file-size limit"
fi
(ulimit -f 1; "$bin" train --config "$corpus/train_config/cartpole.json" --out run --steps 8 > /dev/null 2> err.txt; echo $? > status.txt)
if [ "$(cat status.txt)" != 2 ] || ! grep -q "^zerosync: error: " err.txt; then
  echo "FAIL: train under a file-size limit: status $(cat status.txt)"; cat err.txt; fails=$((fails + 1))
else
  echo "ok: 2: train under a file-size limit"
fi
{ sleep 0.5; "$bin" info 2> err.txt; echo $? > status.txt; } | true
if [ "$(cat status.txt)" != 2 ] || ! grep -q "writing to standard output failed" err.txt; then
  echo "FAIL: info into a closed pipe: status $(cat status.txt)"; cat err.txt; fails=$((fails + 1))
else
  echo "ok: 2: info into a closed pipe"
fi

[ "$fails" -eq 0 ] || { echo "FAIL: $fails case(s)"; exit 1; }
echo "PASS"
