#!/usr/bin/env bash
# timeout: 120
# Every daemon of a cluster stopped at once (systemctl stop on every host, a test bed's
# teardown) right after a job: while a daemon shuts its ring streams down, its peer's streams go
# too, and the stream events that arrive then must not start gRPC batches on the closing queue
# (that aborted 2 runs in 10). Each daemon exits 0, five times over.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/tiny.json" 1 32
for round in 1 2 3 4 5; do
  jobs_daemons 2 "r$round"
  jc submit "$DT_TEST_TMP/tiny.json" --watch --json >/dev/null || dt_fail "round $round: the job failed"
  # One SIGTERM each, as systemd sends (a second one during shutdown forces the exit).
  kill -TERM "$(dt_daemon_pid "r$round-w0")" "$(dt_daemon_pid "r$round-w1")"
  for i in 0 1; do
    pid=$(dt_daemon_pid "r$round-w$i")
    dt_wait_for dt__gone "$pid" --timeout 15 || dt_fail "round $round: worker:$i did not exit"
    rc=0
    wait "$pid" || rc=$?
    dt_assert_eq "$rc" 0 "round $round: worker:$i's exit status (log: $(grep -h 'assert' "$DT_TEST_TMP/r$round-w$i.log" | head -1))"
  done
done
echo "ok: daemons stopped together exit 0"
