#!/bin/sh
# tests/rxe/guest-init.sh: /init of the soft-RoCE test guest (busybox sh;
# tests/rxe/guest-build.sh puts it into the initramfs). Mounts the kernel
# file systems, loads the modules listed in /etc/tern-guest/modules (in that
# order), mounts the 9p shares of tests/rxe/guest-run.sh, runs the command
# under bash and powers off. It builds no rxe device: the command does that
# (tests/rxe/run.sh runs scripts/rxe-setup.sh).
#
# Kernel command line (set by guest-run.sh):
#   tern.work=1   mount the 9p share "work" at /mnt/work (the command's cwd)
# The 9p share "run" is mounted at /mnt/run. It holds:
#   cmd.sh        the command, run as `bash /mnt/run/cmd.sh`; without it the
#                 guest starts an interactive bash on the console instead
#   rc            written here: the command's exit status
#   dmesg.log     written here: the kernel log after the command
# Console protocol (ttyS0), read by guest-run.sh: lines starting with
# "tern-guest: " are this script's diagnostics; the command's stdout and
# stderr come between a line "<<<tern-guest begin>>>" and a line
# "<<<tern-guest end rc=N>>>", N its exit status.
# busybox sh runs its own applets before anything in PATH (its `ip` has no
# veth), which is why the command runs under bash, where PATH decides.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/root
LC_ALL=C
export PATH HOME LC_ALL

say() { echo "tern-guest: $*"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
cmdline_has() { case " $(cat /proc/cmdline) " in *" $1 "*) return 0 ;; esac; return 1; }
share() { # tag dir
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 "$1" "$2" ||
        say "mounting the 9p share $1 at $2 failed"
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo 4 >/proc/sys/kernel/printk

t_boot=$(uptime_s)
kver=$(cat /etc/tern-guest/kver)
while read -r ko; do
    out=$(insmod "/lib/modules/$kver/$ko" 2>&1) ||
        case $out in *"File exists"*) ;; *) say "insmod $ko: $out" ;; esac
done </etc/tern-guest/modules
t_mods=$(uptime_s)

share run /mnt/run
cmdline_has tern.work=1 && share work /mnt/work
ip link set dev lo up
hostname tern-guest
# shellcheck disable=SC3045 # busybox sh has ulimit -l
ulimit -l unlimited
say "kernel $kver up in ${t_boot} s, modules loaded in $(awk -v a="$t_boot" -v b="$t_mods" 'BEGIN { printf "%.2f", b - a }') s"

if [ -f /mnt/run/cmd.sh ]; then
    cd /mnt/run || exit 1
    if cmdline_has tern.work=1; then cd /mnt/work || say "no /mnt/work"; fi
    echo "<<<tern-guest begin>>>"
    bash /mnt/run/cmd.sh </dev/null 2>&1
    rc=$?
    echo "<<<tern-guest end rc=$rc>>>"
    echo "$rc" >/mnt/run/rc
    dmesg >/mnt/run/dmesg.log 2>/dev/null
    cd /
    sync
    umount /mnt/work 2>/dev/null
    umount /mnt/run 2>/dev/null
else
    say "no command: interactive bash (exit powers off)"
    setsid cttyhack bash -l
fi
poweroff -f
