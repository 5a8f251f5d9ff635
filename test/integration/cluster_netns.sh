#!/usr/bin/env bash
# timeout: 90
# Three hosts, each in its own network namespace with its own address, form a cluster (with a
# token, as non-loopback addresses require); `dtrain cluster --json` from one host shows all
# three joined; kill -9 of one host's daemon is reported by name on the others within 5 s.
source "$(dirname "$0")/lib.sh"
dt_netns_up 3
addrs=()
for i in 0 1 2; do addrs+=("$(dt_netns_addr "$i"):7070"); done
head -c 24 /dev/urandom | base64 >"$DT_TEST_TMP/token"
chmod 600 "$DT_TEST_TMP/token"
t0=$(dt__now_ms)
for i in 2 1 0; do
  dt_bg "h$i" "$DT_NETNS" exec "$i" env TF_CONFIG="$(dt_tfconfig_workers "$i" "${addrs[@]}")" \
    "$DT_BIN_DIR/dtraind" --token-file "$DT_TEST_TMP/token" --ready-file "$DT_TEST_TMP/h$i.ready"
done
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/h$i.ready" --timeout 20 || dt_fail "host $i never formed"; done
echo "3 hosts formed in $(($(dt__now_ms) - t0)) ms"
j=$("$DT_NETNS" exec 2 "$DT_BIN_DIR/dtrain" cluster --addr "${addrs[0]}" --token-file "$DT_TEST_TMP/token" --json)
echo "$j"
for k in 0 1 2; do
  dt_assert_eq "$(dt_json_get "tasks.$k.address" <<<"$j")" "${addrs[$k]}" "host $k address"
  dt_assert_eq "$(dt_json_get "tasks.$k.state" <<<"$j")" joined "host $k state"
done
# Without the token, another host is refused.
if "$DT_NETNS" exec 1 "$DT_BIN_DIR/dtrain" cluster --addr "${addrs[0]}" >"$DT_TEST_TMP/nt" 2>&1; then
  dt_fail "a client without the token was served"
fi
dt_assert_contains "$DT_TEST_TMP/nt" token "no-token refusal across hosts"
# kill -9 host 1's daemon (the process inside the namespace, not the `ip netns exec` wrapper).
victim=$(pgrep -f -- "--ready-file $DT_TEST_TMP/h1.ready" | while read -r p; do [[ $(cat /proc/$p/comm) == dtraind ]] && echo "$p"; done)
[[ -n $victim ]] || dt_fail "cannot find host 1's daemon"
t0=$(dt__now_ms)
kill -9 "$victim"
for i in 0 2; do
  dt_wait_for grep -q "worker:1 (${addrs[1]}) is dead" "$DT_TEST_TMP/h$i.log" --timeout 5 ||
    dt_fail "host $i did not report worker:1 dead within 5 s"
  echo "host $i reported worker:1 dead after $(($(dt__now_ms) - t0)) ms"
done
echo PASS
