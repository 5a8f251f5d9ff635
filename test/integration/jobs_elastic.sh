#!/usr/bin/env bash
# timeout: 300
# Elastic jobs ($.fault_tolerance.min_workers below the cluster's size). Three tasks: a worker
# killed mid-job stays away past rejoin_timeout_s, so the job goes on on the two others from
# the latest checkpoint, re-sharded, with the same global batch; when the worker comes back the
# job grows to it at the next epoch's end, and every replica ends with the same weights. Then
# the Keras tutorial CNN on Fashion-MNIST (3 epochs, two tasks): a worker that never returns
# leaves the job to finish on one task, with a test accuracy within 0.5% of the full-size run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

world_of() { jc status "$1" --json | dt_json_get world_size; }

jobs_data
jobs_spec "$DT_TEST_TMP/el.json" 2500 96 ', "checkpoint": {"save_freq": 40, "keep": 2},
  "fault_tolerance": {"min_workers": 2, "rejoin_timeout_s": 2}'
sed -i 's/"shuffle": false/"shuffle": true/' "$DT_TEST_TMP/el.json"
jobs_daemons 3 el

jc submit "$DT_TEST_TMP/el.json" >/dev/null
jc watch 1 --json >"$DT_TEST_TMP/watch1.jsonl" 2>"$DT_TEST_TMP/watch1.err" &
watcher=$!
jobs_wait_state 1 running 20
jobs_wait_step_past 1 100
kill -KILL "$(dt_daemon_pid el-w2)"
t_kill=$(dt__now_ms)
wait "$(dt_daemon_pid el-w2)" 2>/dev/null || true
dt_wait_for grep -q "job 1 (tiny): preparing on 2 tasks of the cluster's" "$DT_TEST_TMP/el-w0.log" --timeout 20 ||
  dt_fail "job 1 did not shrink to two tasks"
jobs_wait_state 1 running 20
echo "shrank: running on 2 of 3 tasks $(ms_since "$t_kill") ms after kill -9 of worker:2 (rejoin_timeout_s 2)"
dt_assert_eq "$(world_of 1)" 2 "world size of the shrunk job"
step=$(jobs_step 1)
jobs_wait_step_past 1 $((step + 60))
jobs_start_one el 2
t_back=$(dt__now_ms)
dt_wait_for grep -q "job 1 (tiny): preparing on 3 tasks .*back on all 3 tasks" "$DT_TEST_TMP/el-w0.log" --timeout 30 ||
  dt_fail "job 1 did not grow back to three tasks"
echo "grew: preparing on 3 tasks $(ms_since "$t_back") ms after worker:2 was started again"
jobs_wait_state 1 succeeded 120
wait "$watcher" || dt_fail "the watcher of job 1 did not end with success"
jc status 1 --json >"$DT_TEST_TMP/s1.json"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/s1.json")" 3 "world size at the end"
dt_assert_eq "$(dt_json_get restarts "$DT_TEST_TMP/s1.json")" 1 "restarts (growing back is not one)"
h0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/s1.json")
[[ -n $h0 ]] || dt_fail "no weights hash"
for r in 1 2; do
  dt_assert_eq "$(dt_json_get weights_hashes.$r "$DT_TEST_TMP/s1.json")" "$h0" "rank $r's final weights"
done
/usr/bin/python3 - "$DT_TEST_TMP/watch1.jsonl" <<'PY' || dt_fail "the watcher's view of shrink and growth"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
st = [(e["state"], e.get("message", "")) for e in ev if e["kind"] == "state"]
names = [s for s, _ in st]
assert names.count("restarting") == 2 and names[-1] == "succeeded", names
shrink = [m for s, m in st if s == "preparing" and "goes on on 2 of 3 tasks" in m]
grow = [m for s, m in st if s == "restarting" and "tasks are back" in m]
assert shrink and grow, st
ends = [e["epoch"] for e in ev if e["kind"] == "epoch_end"]
assert ends[-1] == 2500, ends[-5:]
print("states:", names)
PY
echo "ok: shrink past a lost task, grow back when it returns"
for i in 0 1 2; do dt_stop_daemon "el-w$i" 10 || true; done

# The tutorial CNN on Fashion-MNIST: full size, then with a worker that never returns.
FM=/usr/share/datasets/fashion-mnist
[[ -r $FM/train-images-idx3-ubyte.gz ]] || dt_skip "Fashion-MNIST is missing (make deps installs dataset-fashion-mnist)"
JOBS_DATA=/usr/share/datasets
/usr/bin/python3 - "$DT_SRC_DIR/config/jobs/fmnist-cnn.json" "$DT_TEST_TMP" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.pop("tensorboard", None)
spec["checkpoint"] = {"save_freq": 150, "keep": 2}
json.dump(spec, open(sys.argv[2] + "/full.json", "w"))
spec["fault_tolerance"] = {"min_workers": 1, "rejoin_timeout_s": 2}
json.dump(spec, open(sys.argv[2] + "/elastic.json", "w"))
PY
jobs_daemons 2 fm
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/full.json" --watch >/dev/null || dt_fail "the full-size Fashion-MNIST job failed"
echo "full size (2 tasks): $(ms_since "$t0") ms"
jc submit "$DT_TEST_TMP/elastic.json" >/dev/null
jobs_wait_state 2 running 60
jobs_wait_step_past 2 400
kill -KILL "$(dt_daemon_pid fm-w1)"
jobs_wait_state 2 succeeded 240
dt_assert_eq "$(world_of 2)" 1 "world size after worker:1 never returned"
/usr/bin/python3 - <(jc status 1 --json) <(jc status 2 --json) <<'PY' || dt_fail "elastic accuracy"
import json, sys
full, el = (json.load(open(p)) for p in sys.argv[1:3])
a, b = full["metrics"]["val_accuracy"], el["metrics"]["val_accuracy"]
print("test accuracy after 3 epochs: full size %.4f, shrunk to 1 task in epoch 1 %.4f (diff %+.4f)" % (a, b, b - a))
assert abs(a - b) <= 0.005, (a, b)
PY
echo "ok: elastic accuracy within 0.5% of the full-size run"
