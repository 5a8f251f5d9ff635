#!/usr/bin/env bash
# timeout: 90
# 1, 2 and 4 daemons on loopback form a cluster whatever the start order; a chief + workers
# cluster gets TensorFlow's ranks; `dtrain cluster --json` shows every task joined.
source "$(dirname "$0")/lib.sh"

# form N ORDER...: start workers in ORDER (indices), wait for every ready file, check the views.
form() {
  local n=$1 tag=$2
  shift 2
  local -a ports addrs
  mapfile -t ports < <(dt_free_ports "$n")
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  local t0 i
  t0=$(dt__now_ms)
  for i in "$@"; do
    dt_start_daemon "$tag-w$i" TF_CONFIG="$(dt_tfconfig_workers "$i" "${addrs[@]}")" -- \
      --ready-file "$DT_TEST_TMP/$tag-w$i.ready" --rendezvous-timeout 30
    sleep 0.2
  done
  for i in "$@"; do
    dt_wait_file "$DT_TEST_TMP/$tag-w$i.ready" --timeout 20 || dt_fail "$tag: worker:$i never saw the cluster formed"
  done
  echo "$tag: $n daemons formed in $(($(dt__now_ms) - t0)) ms (start order $*, 0.2 s apart)"
  local j
  for i in 0 $((n - 1)); do
    j=$("$DT_BIN_DIR/dtrain" cluster --addr "${addrs[$i]}" --json)
    dt_assert_eq "$(dt_json_get chief <<<"$j")" "worker:0" "$tag: chief seen by worker:$i"
    dt_assert_eq "$(dt_json_get tasks <<<"$j" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" "$n" "$tag: task count"
    for ((k = 0; k < n; k++)); do
      dt_assert_eq "$(dt_json_get "tasks.$k.state" <<<"$j")" joined "$tag: worker:$k state seen by worker:$i"
      dt_assert_eq "$(dt_json_get "tasks.$k.rank" <<<"$j")" "$k" "$tag: worker:$k rank"
      dt_assert_eq "$(dt_json_get "tasks.$k.address" <<<"$j")" "${addrs[$k]}" "$tag: worker:$k address"
    done
  done
  dt_assert_contains "$DT_TEST_TMP/$tag-w0.log" "cluster formed: $n task" "$tag chief log"
  for i in "$@"; do dt_stop_daemon "$tag-w$i" 5; done
}

form 1 one 0
form 2 two 1 0
form 4 four 3 1 0 2
form 4 fourb 0 1 2 3

# chief + 2 workers: chief is rank 0, worker i is rank i+1; the table and the text view agree.
mapfile -t ports < <(dt_free_ports 3)
c=127.0.0.1:${ports[0]} w0=127.0.0.1:${ports[1]} w1=127.0.0.1:${ports[2]}
for t in "worker 1" "chief 0" "worker 0"; do
  set -- $t
  dt_start_daemon "cw-$1$2" TF_CONFIG="$(dt_tfconfig_json "$1" "$2" "chief=$c" "worker=$w0,$w1")" -- \
    --ready-file "$DT_TEST_TMP/cw-$1$2.ready"
done
for n in worker1 chief0 worker0; do dt_wait_file "$DT_TEST_TMP/cw-$n.ready" --timeout 20 || dt_fail "cw: $n never formed"; done
j=$("$DT_BIN_DIR/dtrain" cluster --addr "$w1" --json)
dt_assert_eq "$(dt_json_get chief <<<"$j")" "chief:0" "chief with a chief job"
dt_assert_eq "$(dt_json_get tasks.0.task <<<"$j")" "chief:0" "rank 0"
dt_assert_eq "$(dt_json_get tasks.2.task <<<"$j")" "worker:1" "rank 2"
dt_assert_eq "$(dt_json_get rank "$DT_TEST_TMP/cw-worker1.ready")" 2 "worker:1's rank in its ready file"
out=$("$DT_BIN_DIR/dtrain" cluster --addr "$c")
dt_assert_contains "$out" "worker:1 .*127.0.0.1:${ports[2]} .* 2  joined" "text table"
echo PASS
