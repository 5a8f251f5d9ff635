#!/usr/bin/env bash
# timeout: 180
# scripts/bench/hier-netns.sh at its smallest, as root: 2 netns hosts at 1 Gbit/s x 2 CPU
# replicas, one 64 KB all-reduce size (and the tutorial CNN's gradient) and 5 training steps of
# each layout. The all-reduce table prints verified rows with a link share, the training lines
# and the ratio; --json parses and carries both runs; bad options exit 2 before anything starts;
# no namespace is left behind.
source "$(dirname "$0")/lib.sh"
dt_require_root
dt_require_cmd ip tc
[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  dt_skip "no Fashion-MNIST in /usr/share/datasets/fashion-mnist (the tutorial CNN trains on it)"
B=$DT_SRC_DIR/scripts/bench
export DT_NETNS_PREFIX=dth$$ DT_NETNS_SUBNET=10.76.$(($$ % 250)) DT_BIN_DIR
dt_on_exit "'$DT_NETNS' down >/dev/null 2>&1"

for bad in "--hosts 1" "--devices 0" "--batch 6" "--steps x" "--bogus"; do
  # shellcheck disable=SC2086  # $bad is several words
  if "$B/hier-netns.sh" $bad >"$DT_TEST_TMP/bad.out" 2>&1; then dt_fail "hier-netns.sh $bad succeeded"; else rc=$?; fi
  dt_assert_eq "$rc" 2 "exit status of hier-netns.sh $bad"
done
dt_assert_contains "$DT_TEST_TMP/bad.out" "unknown option --bogus" "the unknown option is named"

"$B/hier-netns.sh" --sizes 64K --iters 1 --steps 5 --batch 32 --settle 0 --out "$DT_TEST_TMP/out" \
  >"$DT_TEST_TMP/t.txt" 2>"$DT_TEST_TMP/t.err" || dt_fail "hier-netns.sh failed: $(tail -3 "$DT_TEST_TMP/t.err")"
cat "$DT_TEST_TMP/t.txt"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^2 netns hosts, egress 1gbit" "the header"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^ +64K( +[0-9]+\.[0-9]+){2} +[0-9]+% +[0-9]+\.[0-9]+ +[0-9]+% +True$" "the 64K row"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^ +1\.39MB\*( +[0-9]+\.[0-9]+){2} +[0-9]+% +[0-9]+\.[0-9]+ +[0-9]+% +True$" "the CNN gradient's row"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^  2 daemons x 2 replicas: [0-9]+ samples/s" "the hierarchical training line"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^  4 daemons \(2 a host\) x 1: [0-9]+ samples/s" "the 2-daemons-a-host line"
dt_assert_contains "$DT_TEST_TMP/t.txt" "^  ratio: [0-9.]+x$" "the ratio"
/usr/bin/python3 - "$DT_TEST_TMP/out" <<'PY' || dt_fail "the raw results"
import json, sys
d = sys.argv[1]
ar = json.load(open(f"{d}/allreduce.json"))
assert ar["replicas"] == 4 and len(ar["hier_rows"]) == 2, ar
assert all(r["verified"] for r in ar["hier_rows"]), ar
th, td = json.load(open(f"{d}/train-hier.json")), json.load(open(f"{d}/train-daemons.json"))
assert th["replicas"] == 4 and th["world_size"] == 2 and th["samples_per_s"] > 0, th
assert td["replicas"] == 4 and td["world_size"] == 4 and td["samples_per_s"] > 0, td
PY
"$DT_NETNS" status >/dev/null 2>&1 && dt_fail "the script left its namespaces up"
echo PASS
