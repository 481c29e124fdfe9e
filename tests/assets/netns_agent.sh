#!/bin/sh
# Remote-launch agent for tests/sessions/test_two_hosts.py: stands in for ssh, with "hosts" that are namespaces.
#
# Called by mpiexec (PRRTE's plm_ssh_agent) like ssh: netns_agent.sh [-options] HOST COMMAND...
# Runs COMMAND with /bin/sh inside HOST's namespaces, found in $THEANOMPI_NETNS_HOSTS/HOST/:
# net (network), uts (host name) and, if present, mnt (mounts: e.g. a private /tmp).
set -e
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;  # ssh options (PRRTE adds some for agents it recognises); none apply here
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "netns_agent.sh: usage: netns_agent.sh HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
dir=${THEANOMPI_NETNS_HOSTS:?netns_agent.sh: THEANOMPI_NETNS_HOSTS is not set}/$host
if [ ! -e "$dir/net" ]; then
    echo "netns_agent.sh: unknown host $host (no $dir/net)" >&2
    exit 255
fi
mnt=
if [ -e "$dir/mnt" ]; then
    mnt=--mount=$dir/mnt
fi
exec nsenter --net="$dir/net" --uts="$dir/uts" $mnt -- /bin/sh -c "$*"
