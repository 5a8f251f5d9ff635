#!/usr/bin/env bash
# timeout: 120
# Three hosts in their own network namespaces (token required, as non-loopback addresses need)
# all-reduce with --verify: exact sums and the same bits on every host, f32 and bf16 wires, and
# the hierarchical all-reduce with 2 CPU replicas a host.
source "$(dirname "$0")/lib.sh"
dt_netns_up 3
addrs=()
for i in 0 1 2; do addrs+=("$(dt_netns_addr "$i"):7071"); done
head -c 24 /dev/urandom | base64 >"$DT_TEST_TMP/token"
chmod 600 "$DT_TEST_TMP/token"
for i in 0 1 2; do
  dt_bg "h$i" "$DT_NETNS" exec "$i" env TF_CONFIG="$(dt_tfconfig_workers "$i" "${addrs[@]}")" \
    "$DT_BIN_DIR/dtraind" --token-file "$DT_TEST_TMP/token" --ready-file "$DT_TEST_TMP/h$i.ready"
done
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/h$i.ready" --timeout 20 || dt_fail "host $i never formed"; done
bench() { "$DT_NETNS" exec 1 "$DT_BIN_DIR/dtrain" bench allreduce --addr "${addrs[0]}" --token-file "$DT_TEST_TMP/token" "$@"; }
bench --verify --sizes 4,4K,1M,8M --iters 2 --json >"$DT_TEST_TMP/f32.json" || dt_fail "f32 verify failed"
cat "$DT_TEST_TMP/f32.json"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/f32.json")" 3 "world_size"
for k in 0 1 2 3; do dt_assert_eq "$(dt_json_get "rows.$k.verified" "$DT_TEST_TMP/f32.json")" true "row $k verified"; done
bench --verify --wire bf16 --sizes 1M --iters 1 --no-stream || dt_fail "bf16 verify failed"
# The hierarchical all-reduce across the namespaces: 3 hosts x 2 CPU replicas, exact and one
# set of bits on all 6 (sizes 0, 1, G-1, G*k+1, 1 MB).
bench --verify --devices 2 --sizes 0,4,8,4004,1M --iters 1 --warmup-s 0 --no-stream --json >"$DT_TEST_TMP/hier.json" ||
  dt_fail "hierarchical verify failed: $(cat "$DT_TEST_TMP/hier.json")"
dt_assert_eq "$(dt_json_get replicas "$DT_TEST_TMP/hier.json")" 6 "replicas"
for k in 0 1 2 3 4; do dt_assert_eq "$(dt_json_get "hier_rows.$k.verified" "$DT_TEST_TMP/hier.json")" true "hierarchical row $k verified"; done
# Without the token the bench is refused.
if "$DT_NETNS" exec 2 "$DT_BIN_DIR/dtrain" bench allreduce --addr "${addrs[0]}" --sizes 4K >"$DT_TEST_TMP/nt" 2>&1; then
  dt_fail "a bench without the token was served"
fi
dt_assert_contains "$DT_TEST_TMP/nt" token "no-token refusal"
echo PASS
