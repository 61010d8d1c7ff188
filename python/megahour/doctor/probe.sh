#!/bin/sh
# megahour doctor's probe. Read-only: it only runs commands that print state, and writes nothing.
# POSIX sh on purpose: a host without Python must still answer (its missing Python is a finding).
# Each section is "@@megahour-doctor NAME rc=RC" followed by the command's output (stdout and stderr);
# megahour.doctor.facts parses them on the control node. A missing command answers rc=127.
# Arguments: paths whose existence the checks need (cache directories, the shared root).
LC_ALL=C
export LC_ALL
PATH="$PATH:/usr/sbin:/sbin:/usr/local/bin"

section() {
    name=$1
    shift
    out=$("$@" 2>&1)
    rc=$?
    printf '@@megahour-doctor %s rc=%d\n%s\n' "$name" "$rc" "$out"
}

section os_release cat /etc/os-release
section arch uname -m
section python python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'
section nvidia_smi nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,nounits
section ip_link ip -j link show
section lsblk lsblk -J -b -o NAME,PATH,TYPE,SIZE,FSTYPE,MOUNTPOINT
section findmnt findmnt -J -l -o TARGET,SOURCE,FSTYPE
section timesync timedatectl show -p NTP -p NTPSynchronized
section df df -P -k /
# Each RDMA port's sysfs files (python/megahour/health/rdma.py reads the same): "<device> <port> <file> <text>";
# a file that cannot be read (a port without a cable fails its rate) is left out.
rdma_ports() {
    for port in /sys/class/infiniband/*/ports/*; do
        [ -d "$port" ] || continue
        rest=${port#/sys/class/infiniband/}
        for file in state phys_state rate link_layer; do
            if text=$(cat "$port/$file" 2>/dev/null); then echo "${rest%%/*} ${port##*/} $file $text"; fi
        done
    done
}
section rdma rdma_ports
# The paths the inventory names (cache directories, the shared root), given as arguments.
paths() {
    for p in "$@"; do
        if [ -d "$p" ]; then echo "dir $p"; elif [ -e "$p" ]; then echo "other $p"; else echo "missing $p"; fi
    done
}
section paths paths "$@"
section version cat /etc/megahour/version
# Last, so it is as close as it can be to the control node's clock reading after the run.
section clock date +%s.%N
