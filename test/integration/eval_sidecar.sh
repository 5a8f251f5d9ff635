#!/usr/bin/env bash
# timeout: 120
# The evaluator task: it stays out of the ring, fetches the chief's checkpoints over gRPC while a
# job runs and evaluates each new one on the job's validation split, evaluates the final weights
# of a job that succeeds (the same figures as `dtrain evaluate`), names the chief when it stops
# answering, and leaves on SIGTERM.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/long.json" 100000 32 ', "checkpoint": {"save_freq": 16, "keep": 2}'
jobs_spec "$DT_TEST_TMP/short.json" 3 32
jobs_daemons 1 ev
EV=$DT_TEST_TMP/ev-eval
mkdir -p "$EV"
dt_start_daemon ev-eval TF_CONFIG="$(dt_tfconfig_json evaluator 0 "worker=$JOBS_ADDR")" -- \
  --state-dir "$EV" --data-root "$JOBS_DATA" --eval-interval 0.2 --ready-file "$EV.ready"
dt_wait_file "$EV.ready" --timeout 10 || dt_fail "the evaluator did not start"
dt_assert_eq "$(dt_json_get task_type "$EV.ready")" evaluator "the evaluator's ready file"

# While job 1 runs, the evaluator follows its checkpoints.
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 1 running 20
lines() { wc -l <"$EV/eval/1/eval.jsonl" 2>/dev/null || echo 0; }
more_than() { (($(lines) > $1)); }
dt_wait_for more_than 1 --timeout 30 || dt_fail "the evaluator evaluated fewer than 2 checkpoints: $(tail -5 "$DT_TEST_TMP/ev-eval.log")"
first=$(sed -n 1p "$EV/eval/1/eval.jsonl")
second=$(sed -n 2p "$EV/eval/1/eval.jsonl")
echo "first: $first"
echo "second: $second"
s1=$(dt_json_get global_step <<<"$first")
s2=$(dt_json_get global_step <<<"$second")
((s1 > 0 && s2 > s1 && s1 % 16 == 0)) || dt_fail "checkpoint steps $s1 then $s2: want multiples of 16, growing"
dt_assert_eq "$(dt_json_get examples <<<"$first")" 128 "examples of the validation split"
dt_assert_eq "$(dt_json_get final <<<"$first")" false "a checkpoint is not final"
dt_json_get accuracy <<<"$first" >/dev/null || dt_fail "no accuracy in $first"
ls "$EV/eval/1/events/"events.out.tfevents.* >/dev/null || dt_fail "no TensorBoard events"
jc cancel 1 --timeout 15 >/dev/null || dt_fail "cancel of job 1"
jc cluster --json >"$DT_TEST_TMP/cluster.json"
dt_assert_eq "$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tasks"]))' "$DT_TEST_TMP/cluster.json")" 1 "tasks in the ring (the evaluator is not)"

# A job that succeeds: its final weights are evaluated once, with dtrain evaluate's figures.
jc submit "$DT_TEST_TMP/short.json" --watch --json >/dev/null || dt_fail "job 2 did not succeed"
final_line() { grep -q '"final":true' "$EV/eval/2/eval.jsonl" 2>/dev/null; }
dt_wait_for final_line --timeout 30 || dt_fail "the evaluator did not evaluate job 2's final weights"
got=$(grep '"final":true' "$EV/eval/2/eval.jsonl")
dt_assert_eq "$(grep -c '"final":true' "$EV/eval/2/eval.jsonl")" 1 "final evaluations of job 2"
jc evaluate 2 --data "$DT_TEST_TMP/short.json" --json >"$DT_TEST_TMP/ref.json" || dt_fail "dtrain evaluate"
/usr/bin/python3 - "$got" "$DT_TEST_TMP/ref.json" <<'PY' || dt_fail "evaluator and dtrain evaluate disagree"
import json, sys
a, b = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
print("evaluator", a["loss"], a["accuracy"], "| dtrain evaluate", b["loss"], b["accuracy"])
assert abs(a["loss"] - b["loss"]) <= 1e-6 * max(1.0, abs(b["loss"])), (a, b)
assert a["accuracy"] == b["accuracy"] and a["examples"] == b["examples"], (a, b)
PY

# The chief goes away: the evaluator says whom it misses, stays up, and leaves on SIGTERM.
dt_stop_daemon ev-w0 || true
dt_wait_for grep -q "chief worker:0 at $JOBS_ADDR does not answer" "$DT_TEST_TMP/ev-eval.log" --timeout 15 ||
  dt_fail "the evaluator did not report the missing chief"
dt_stop_daemon ev-eval 5 || dt_fail "the evaluator did not exit 0 on SIGTERM"
echo "ok: evaluator"
