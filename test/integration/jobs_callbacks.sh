#!/usr/bin/env bash
# timeout: 90
# Two daemons: a 20-epoch job with EarlyStopping (restore_best_weights) and CSVLogger stops after
# epoch 3 on both, succeeds, logs the stop, and writes its CSV in the job's dir; a callback
# the daemon does not know is refused at submit naming its JSON path.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/base.json" 20 32
/usr/bin/python3 - "$DT_TEST_TMP/base.json" "$DT_TEST_TMP/es.json" "$DT_TEST_TMP/bad.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
# val_accuracy cannot gain 0.5 after epoch 1: patience 2 stops after epoch 3
s["fit"]["callbacks"] = [
    {"class_name": "EarlyStopping", "config": {"monitor": "val_accuracy", "patience": 2,
                                               "min_delta": 0.5, "restore_best_weights": True}},
    {"class_name": "CSVLogger", "config": {"filename": "history.csv"}}]
json.dump(s, open(sys.argv[2], "w"))
s["fit"]["callbacks"] = [{"class_name": "BackupAndRestore", "config": {"backup_dir": "b"}}]
json.dump(s, open(sys.argv[3], "w"))
PY
jobs_daemons 2 cb

out=$(jc submit "$DT_TEST_TMP/bad.json" 2>&1) && dt_fail "an unknown callback was accepted: $out"
dt_assert_contains "$out" '\$\.fit\.callbacks\[0\]\.class_name: "BackupAndRestore" is not supported' \
  "unknown callback refused"

jc submit "$DT_TEST_TMP/es.json" >/dev/null
jobs_wait_state 1 succeeded 60
jc status 1 --json >"$DT_TEST_TMP/status.json"
dt_assert_eq "$(dt_json_get epoch "$DT_TEST_TMP/status.json")" 3 "epochs run"
# status says why it ended before its 20 epochs, as the log does
dt_assert_contains "$(dt_json_get stopped "$DT_TEST_TMP/status.json")" "EarlyStopping: epoch 3: early stopping" \
  "status --json: stopped"
dt_assert_contains "$(jc status 1)" "stopped +early: EarlyStopping: epoch 3" "status: stopped"
jc jobs --json >"$DT_TEST_TMP/jobs.json"
dt_assert_eq "$(dt_json_get jobs.0.stopped "$DT_TEST_TMP/jobs.json" | head -c 13)" "EarlyStopping" "jobs --json: stopped"
for w in 0 1; do
  dt_assert_contains "$DT_TEST_TMP/cb-w$w.log" "EarlyStopping: epoch 3: early stopping" "stop logged on worker:$w"
  dt_assert_contains "$DT_TEST_TMP/cb-w$w.log" "Restoring model weights from the end of the best epoch: 1" \
    "best weights restored on worker:$w"
done
csv=$(find "$DT_TEST_TMP"/cb-w* -path '*jobs/1/history.csv' | head -1)
[[ -n $csv ]] || dt_fail "no history.csv in the job's dir"
dt_assert_eq "$(head -1 "$csv" | tr -d '\r')" "epoch,accuracy,loss,val_accuracy,val_loss" "CSV header"
dt_assert_eq "$(tail -n +2 "$csv" | cut -d, -f1 | tr -d '\r' | tr '\n' ' ')" "0 1 2 " "CSV epochs"
