#!/usr/bin/env bash
# timeout: 60
# scripts/netns-cluster.sh: 3 hosts shaped to 1gbit reach each other by address, the shaping is
# really on (a ~24 MB transfer runs at 0.5..1.3 Gbit/s), and `down` leaves no namespace behind.
# A second bring-up with DT_NETNS_DELAY checks the added latency, or, on kernels without netem,
# that the failed `up` removed what it had built.
source "$(dirname "$0")/lib.sh"
dt_require_root
dt_require_cmd ip tc
[[ -x /usr/bin/python3 ]] || dt_skip "/usr/bin/python3 not installed"
PY=/usr/bin/python3

count_ns() { ip netns list | awk '{print $1}' | grep -c -E "^${DT_NETNS_PREFIX}-(br|h[0-9]+)$" || true; }

dt_netns_up 3 1gbit
dt_assert_eq "$(count_ns)" 4 "namespaces after up 3 (bridge + 3 hosts)"
for i in 0 1 2; do
  dt_assert_eq "$(dt_netns_addr "$i")" "$DT_NETNS_SUBNET.$((i + 1))" "address of host $i"
done
"$DT_NETNS" status >"$DT_TEST_TMP/status.txt"
dt_assert_contains "$DT_TEST_TMP/status.txt" "host 2: netns ${DT_NETNS_PREFIX}-h2 .*tbf .*rate 1Gbit" "status shows the shaper"
if "$DT_NETNS" up 2 2>"$DT_TEST_TMP/again.err"; then dt_fail "a second 'up' with the same prefix succeeded"; fi
dt_assert_contains "$DT_TEST_TMP/again.err" "already up" "second up"
dt_assert_eq "$(count_ns)" 4 "a refused second up leaves the test bed alone"

# --- every host reaches every other one by address (a listener per host answers its name) ---
for j in 0 1 2; do
  dt_bg "listen$j" "$DT_NETNS" exec "$j" "$PY" -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000))
s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"h" + sys.argv[2].encode() + b"\n")
    c.close()
' "$(dt_netns_addr "$j")" "$j"
done
for j in 0 1 2; do
  dt_wait_for grep -q listening "$DT_TEST_TMP/listen$j.log" --timeout 10 || dt_fail "listener on host $j did not start"
done
for i in 0 1 2; do
  for j in 0 1 2; do
    ((i == j)) && continue
    addr=$DT_NETNS_SUBNET.$((j + 1))
    got=$(dt_netns_exec "$i" timeout 5 bash -c "exec 3<>/dev/tcp/$addr/7000 && head -n1 <&3") ||
      dt_fail "host $i cannot reach host $j at $addr:7000"
    dt_assert_eq "$got" "h$j" "host $i -> $addr:7000 answered"
  done
done
# Nothing of the test bed is in the caller's namespace: no address in its subnet, no link of ours.
if ip -4 -o addr show | grep -F " $DT_NETNS_SUBNET."; then dt_fail "the root namespace has a test-bed address"; fi
if ip -o link show | grep -E "(br0|: h[0-9]+@)"; then dt_fail "the root namespace has a test-bed link"; fi

# --- the shaper: push 24 MB from host 0 to host 1, time it at the receiver ---
dt_bg recv "$DT_NETNS" exec 1 "$PY" -c '
import socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], 7001))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
buf = bytearray(1 << 20)
n, t0 = 0, None
while True:
    k = c.recv_into(buf)
    if not k:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += k
dt = time.monotonic() - t0
print("RESULT %d %.6f %.3f" % (n, dt, n * 8 / dt / 1e9), flush=True)
' "$(dt_netns_addr 1)"
dt_wait_for grep -q listening "$DT_TEST_TMP/recv.log" --timeout 10 || dt_fail "receiver did not start"
dt_netns_exec 0 timeout 20 "$PY" -c '
import socket, sys
c = socket.create_connection((sys.argv[1], 7001), timeout=15)
chunk = b"x" * (1 << 20)
for _ in range(24):
    c.sendall(chunk)
c.close()
' "$(dt_netns_addr 1)" || dt_fail "sender failed"
dt_wait_for grep -q RESULT "$DT_TEST_TMP/recv.log" --timeout 10 || dt_fail "receiver gave no result"
read -r _ bytes secs gbps < <(grep RESULT "$DT_TEST_TMP/recv.log")
echo "shaped throughput: $bytes bytes in $secs s = $gbps Gbit/s (shaper: 1gbit)"
dt_assert_eq "$bytes" $((24 << 20)) "bytes received"
awk -v g="$gbps" 'BEGIN { exit !(g > 0.5 && g < 1.3) }' ||
  dt_fail "throughput $gbps Gbit/s is outside 0.5..1.3 with a 1gbit shaper"

# --- down removes everything (and the listeners still running inside), twice in a row ---
"$DT_NETNS" down || dt_fail "down failed"
dt_assert_eq "$(count_ns)" 0 "namespaces after down"
"$DT_NETNS" down || dt_fail "down when already down must succeed"
if "$DT_NETNS" status >/dev/null; then dt_fail "status says up after down"; fi
for j in 0 1 2; do
  dt_wait_for dt__gone "$(dt_daemon_pid "listen$j")" --timeout 5 || dt_fail "down left listener $j running"
done

# --- delay with netem; without netem, a failed up must clean up after itself ---
if DT_NETNS_DELAY=5ms "$DT_NETNS" up 2 >"$DT_TEST_TMP/delay.out" 2>&1; then
  # A connect to a closed port is refused after one round trip: 2 x 5 ms.
  rtt=$(dt_netns_exec 0 "$PY" -c '
import socket, sys, time
t = time.monotonic()
socket.socket().connect_ex((sys.argv[1], 9))
print("%.4f" % (time.monotonic() - t))
' "$DT_NETNS_SUBNET.2")
  echo "round trip with DT_NETNS_DELAY=5ms: $rtt s"
  awk -v r="$rtt" 'BEGIN { exit !(r >= 0.009 && r < 0.5) }' || dt_fail "round trip $rtt s with 5 ms delay each way"
  "$DT_NETNS" down
else
  dt_assert_contains "$DT_TEST_TMP/delay.out" "netem" "the failed delayed up names netem"
  echo "this kernel has no netem: checked that the failed 'up' cleaned up instead"
fi
dt_assert_eq "$(count_ns)" 0 "namespaces after the delay check"
echo "netns test bed OK"
