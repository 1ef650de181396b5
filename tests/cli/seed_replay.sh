#!/usr/bin/env bash
# A failing randomized test prints its seeds and a command that replays it with the same ones;
# running that command draws the same seeds again. A bad ZS_TEST_SEED stops the run. Argument:
# the zerosync_tests binary.
set -u
bin="$1"
filter="--gtest_filter=Seeds.DemoFailureWhenAsked"
out=$(ZS_TEST_DEMO_FAILURE=1 "$bin" "$filter" 2>&1)
status=$?
echo "$out"
[ "$status" -ne 0 ] || { echo "FAIL: the demo test did not fail"; exit 1; }
drawn=$(echo "$out" | sed -n 's/^demo drew //p')
replay=$(echo "$out" | sed -n 's/^\[  REPLAY  \] //p')
[ -n "$drawn" ] || { echo "FAIL: the demo test printed no seeds"; exit 1; }
[ -n "$replay" ] || { echo "FAIL: no replay command was printed"; exit 1; }
echo "$out" | grep -q "^\[  SEEDS   \] Seeds.DemoFailureWhenAsked drew 2 seeds from base [0-9]*: $drawn$" \
  || { echo "FAIL: the seed report does not list the seeds drawn ($drawn)"; exit 1; }
out2=$(eval "ZS_TEST_DEMO_FAILURE=1 $replay" 2>&1)
echo "$out2"
[ "$(echo "$out2" | sed -n 's/^demo drew //p')" = "$drawn" ] || { echo "FAIL: the replay drew other seeds"; exit 1; }
echo "$out2" | grep -q "(ZS_TEST_SEED)" || { echo "FAIL: the replay does not say its base came from ZS_TEST_SEED"; exit 1; }
ZS_TEST_SEED=abc "$bin" "$filter" > /dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: ZS_TEST_SEED=abc was not refused with status 2"; exit 1; }
echo "PASS: seeds $drawn replayed"
