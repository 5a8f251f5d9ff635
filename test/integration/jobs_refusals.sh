#!/usr/bin/env bash
# timeout: 60
# Bad input is refused at submit with its JSON path and exit 2, and the daemon keeps serving:
# a bad value, garbage JSON, a data path escaping --data-root (.. and a symlink), unknown jobs,
# export of a job without weights, a write dir that another job uses, bad usage.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_daemons 1 ref --max-job-memory 256M

# expect_refused FILE PATTERN WHAT: submit FILE, want exit 2 and PATTERN on stderr.
expect_refused() {
  local rc=0
  jc submit "$1" >"$DT_TEST_TMP/out" 2>"$DT_TEST_TMP/err" || rc=$?
  dt_assert_eq "$rc" 2 "$3: exit status"
  dt_assert_contains "$DT_TEST_TMP/err" "$2" "$3: message"
}

jobs_spec "$DT_TEST_TMP/bad_batch.json" 1 -3
expect_refused "$DT_TEST_TMP/bad_batch.json" '\$\.fit\.batch_size' "negative batch size"

jobs_spec "$DT_TEST_TMP/bad_opt.json" 1 32
sed -i 's/"class_name": "Adam"/"class_name": "Adamax9"/' "$DT_TEST_TMP/bad_opt.json"
expect_refused "$DT_TEST_TMP/bad_opt.json" '\$\.compile\.optimizer' "unknown optimizer"

printf '{"name": "x", "model": {' >"$DT_TEST_TMP/truncated.json"
expect_refused "$DT_TEST_TMP/truncated.json" 'JSON|json' "truncated JSON"

jobs_spec "$DT_TEST_TMP/escape.json" 1 32
sed -i 's#"images": "train-images-idx3-ubyte"#"images": "../../../../etc/passwd"#' "$DT_TEST_TMP/escape.json"
expect_refused "$DT_TEST_TMP/escape.json" '\$\.data\.train' "a .. path out of --data-root"

ln -s /etc "$JOBS_DATA/etc-link"
jobs_spec "$DT_TEST_TMP/symlink.json" 1 32
sed -i 's#"images": "train-images-idx3-ubyte"#"images": "etc-link/passwd"#' "$DT_TEST_TMP/symlink.json"
expect_refused "$DT_TEST_TMP/symlink.json" '\$\.data\.train' "a symlink out of --data-root"

jobs_spec "$DT_TEST_TMP/ckpt.json" 1 32 ', "checkpoint": {"dir": "../../elsewhere"}'
expect_refused "$DT_TEST_TMP/ckpt.json" '\$\.checkpoint\.dir' "a checkpoint dir out of --state-dir"

# A FIFO in the data root (a blocking open would hang a pool thread for good; four such took
# them all) and a model file that is a device: refused at once, several at a time.
mkfifo "$JOBS_DATA/fifo-idx3-ubyte"
jobs_spec "$DT_TEST_TMP/fifo.json" 1 32
sed -i 's#"images": "train-images-idx3-ubyte"#"images": "fifo-idx3-ubyte"#' "$DT_TEST_TMP/fifo.json"
t0=$(dt__now_ms)
pids=()
for i in 1 2 3 4 5; do
  jc submit "$DT_TEST_TMP/fifo.json" >"$DT_TEST_TMP/fifo$i.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" || true
for i in 1 2 3 4 5; do
  dt_assert_contains "$DT_TEST_TMP/fifo$i.out" 'fifo-idx3-ubyte.*FIFO' "a FIFO as data ($i)"
done
echo "5 submits naming a FIFO refused within $(ms_since "$t0") ms"
expect_refused "$DT_TEST_TMP/fifo.json" 'FIFO; give a regular file' "a FIFO as data"

# Memory bombs: a Dense layer of 10^6 units (64M outputs a sample: ~47 GiB for a batch) and a
# Conv2D of 10^6 filters, against --max-job-memory 256M: refused at submit with the estimate,
# the daemon's peak memory far below the ~13 GiB either would take (under 1 GiB, ASan too).
jobs_spec "$DT_TEST_TMP/dense.json" 1 32
sed -i 's#"name": "hidden", "units": 16#"name": "hidden", "units": 1000000#; s#"Flatten", "config": {"name": "flat"}#"Reshape", "config": {"name": "flat", "target_shape": [6, 6, 4]}#' "$DT_TEST_TMP/dense.json"
expect_refused "$DT_TEST_TMP/dense.json" '\$\.fit\.batch_size: the job needs about [0-9.]+ GiB per replica .*--max-job-memory' \
  "a Dense layer of 10^6 units"
jobs_spec "$DT_TEST_TMP/conv.json" 1 32
sed -i 's#"name": "conv", "filters": 4#"name": "conv", "filters": 1000000#; s#"Flatten", "config": {"name": "flat"}#"GlobalAveragePooling2D", "config": {"name": "flat"}#' "$DT_TEST_TMP/conv.json"
expect_refused "$DT_TEST_TMP/conv.json" "layer 'conv' \(Conv2D\).*--max-job-memory|needs about" \
  "a Conv2D of 10^6 filters"
rss=$(awk '/VmHWM/ {print $2}' "/proc/$(dt_daemon_pid ref-w0)/status")
echo "after the memory bombs the daemon's peak RSS is $((rss / 1024)) MiB"
((rss < 1024 * 1024)) || dt_fail "the daemon's peak RSS reached $((rss / 1024)) MiB"

# Nothing was queued, and the daemon still answers.
dt_assert_contains "$(jc jobs)" "no jobs yet" "nothing queued after refusals"
"$DT_BIN_DIR/dtrain" cluster --addr "$JOBS_ADDR" --json >/dev/null || dt_fail "the daemon stopped answering"

# Unknown jobs are bad input (2); a job without final weights cannot be exported (1).
rc=0; jc status 42 2>"$DT_TEST_TMP/err" || rc=$?
dt_assert_eq "$rc" 2 "status of an unknown job"
dt_assert_contains "$DT_TEST_TMP/err" "no job '42'" "unknown job message"
rc=0; jc watch 42 2>/dev/null || rc=$?
dt_assert_eq "$rc" 2 "watch of an unknown job"
jobs_spec "$DT_TEST_TMP/long.json" 100000 32 ', "checkpoint": {"save_freq": 100000000}'
jc submit "$DT_TEST_TMP/long.json" >/dev/null
rc=0; jc export 1 -o "$DT_TEST_TMP/x.safetensors" 2>"$DT_TEST_TMP/err" || rc=$?
dt_assert_eq "$rc" 1 "export of an unfinished job"
dt_assert_contains "$DT_TEST_TMP/err" "has no final weights" "export message"
[[ ! -e $DT_TEST_TMP/x.safetensors ]] || dt_fail "export wrote a file for an unfinished job"
jc cancel 1 >/dev/null

# A job writes only under its own dir: not in the daemon's jobs/ tree (job 1's checkpoints),
# and not in a dir another job uses, until that job is removed.
jobs_spec "$DT_TEST_TMP/other.json" 1 32 ', "checkpoint": {"dir": "jobs/1/checkpoints"}'
expect_refused "$DT_TEST_TMP/other.json" '\$\.checkpoint\.dir: "jobs/1/checkpoints" lies in the daemon.s own jobs/ dir' \
  "a checkpoint dir in another job's dir"
jobs_spec "$DT_TEST_TMP/own.json" 100000 32 ', "checkpoint": {"dir": "runs/a", "save_freq": 100000000}'
jc submit "$DT_TEST_TMP/own.json" >/dev/null || dt_fail "a job with a checkpoint dir of its own was refused"
jobs_spec "$DT_TEST_TMP/inside.json" 1 32 ', "tensorboard": {"log_dir": "./runs/a/tb"}'
expect_refused "$DT_TEST_TMP/inside.json" \
  '\$\.tensorboard\.log_dir: "runs/a/tb" in the state dir is already used by job 2 .*its \$\.checkpoint\.dir "runs/a".*dtrain rm 2' \
  "a TensorBoard dir inside another job's checkpoint dir"
jc cancel 2 >/dev/null
jobs_wait_state 2 cancelled 30
jc rm 2 >/dev/null || dt_fail "rm of a cancelled job"
jc submit "$DT_TEST_TMP/inside.json" >/dev/null || dt_fail "the dir was still taken after rm of its job"
# Two jobs may share a TensorBoard dir (event files are never overwritten nor deleted).
jc submit "$DT_TEST_TMP/inside.json" >/dev/null || dt_fail "a shared TensorBoard dir was refused"

# Bad usage: exit 2.
for args in "submit" "submit a b" "export 1" "evaluate 1" "predict 1 --data {}" "cancel" \
  "status 1 --bogus" "jobs extra" "watch"; do
  rc=0
  # shellcheck disable=SC2086
  jc $args >/dev/null 2>&1 || rc=$?
  dt_assert_eq "$rc" 2 "dtrain $args"
done
for v in submit jobs status watch cancel export evaluate predict; do
  jc "$v" --help | grep -q "^usage: dtrain $v" || dt_fail "dtrain $v --help"
done
echo "ok: refusals"
