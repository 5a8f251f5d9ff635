#!/usr/bin/env bash
# netns-rsh.sh HOST CMD... - OpenMPI's launch agent (plm_rsh_agent) for scripts/netns-cluster.sh
# hosts: where mpirun would ssh to HOST, run CMD in HOST's network namespace instead.
# HOST is a test-bed address (SUBNET.(I+1) -> namespace PREFIX-hI, the layout netns-cluster.sh
# makes), with DT_NETNS_PREFIX / DT_NETNS_SUBNET as mpirun's environment passed them down.
# OpenMPI hands the remote command as one shell string, as ssh would, so it runs under sh -c.
# All "hosts" share one /tmp and one hostname, so OpenMPI's session directories
# (TMPDIR/ompi.HOST.UID/...) would collide and the daemons race to create them ("File exists"):
# each host gets its own TMPDIR, under DT_OMPI_TMP when the caller sets it.
set -euo pipefail
PREFIX=${DT_NETNS_PREFIX:-dt}
SUBNET=${DT_NETNS_SUBNET:-10.77.0}
# ssh-style options before the host (OpenMPI passes none by default; skip any it adds).
while [[ ${1:-} == -* ]]; do shift; done
host=${1:?usage: netns-rsh.sh HOST CMD...}
shift
[[ $host == "$SUBNET".* ]] || { echo "netns-rsh: host '$host' is not in $SUBNET.0/24" >&2; exit 255; }
i=$((${host##*.} - 1))
ns=$PREFIX-h$i
[[ -e /run/netns/$ns ]] || { echo "netns-rsh: no namespace $ns for host $host" >&2; exit 255; }
TMPDIR=${DT_OMPI_TMP:-${TMPDIR:-/tmp}/dt-ompi}/$ns
export TMPDIR
mkdir -p "$TMPDIR"
exec ip netns exec "$ns" sh -c "$*"
