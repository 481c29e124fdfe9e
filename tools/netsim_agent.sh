#!/bin/sh
# Remote-launch agent of tools/netsim.py: stands in for ssh, with "hosts" that are namespaces on this machine.
#
# Called by mpiexec (PRRTE's plm_ssh_agent) as ssh would be: netsim_agent.sh [-options] HOST COMMAND...
# Runs COMMAND with /bin/sh inside HOST's network, UTS and mount namespaces: those of the process whose id is in
# $NETSIM_HOSTS_DIR/HOST/pid (the host's holder, see tools/netsim_cluster.py).
set -e
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;  # ssh options (PRRTE adds some for agents it recognises); none apply here
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "netsim_agent.sh: usage: netsim_agent.sh HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
file=${NETSIM_HOSTS_DIR:?netsim_agent.sh: NETSIM_HOSTS_DIR is not set}/$host/pid
if [ ! -r "$file" ]; then
    echo "netsim_agent.sh: unknown host $host (no $file)" >&2
    exit 255
fi
exec nsenter --target="$(cat "$file")" --net --uts --mount -- /bin/sh -c "$*"
