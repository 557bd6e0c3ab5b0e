#!/usr/bin/env bash
# Runs a command with a time limit. A command still running at the limit is
# taken for hung: before it is stopped, what every task of it (and every
# task blocked in the kernel) waits on is printed, with the user-space
# stacks of the test processes when gdb is there; then the command's
# process group is killed, the FUSE connections of the mounts made while it
# ran are aborted (a FUSE server stuck on its own mount cannot exit
# otherwise), and those mounts and the loop devices attached meanwhile are
# undone.
# Exits with the command's status, or 124 when it was stopped.
# usage: scripts/watchdog.sh SECONDS COMMAND [ARGS...]
set -uo pipefail
limit=$1
shift

# What was there before: only mounts and loop devices made after this line
# are undone when the command is stopped.
mounts_before=$(awk '{ print $3, $5 }' /proc/self/mountinfo)
loops_before=$(losetup -a 2>/dev/null | cut -d: -f1)

# Its own session (one process group to kill), with SIGINT and SIGQUIT at
# their defaults: bash starts a background command with both ignored (and
# cannot undo that when it was itself started so), and tests send them.
( exec env --default-signal=INT,QUIT setsid "$@" ) &
pid=$!
# The timer holds none of the command's output streams open.
sleep "$limit" </dev/null >/dev/null 2>&1 &
timer=$!
ended=
wait -n -p ended "$pid" "$timer"
rc=$?
if [ "$ended" = "$pid" ]; then
  kill "$timer" 2>/dev/null
  wait "$timer" 2>/dev/null
  exit "$rc"
fi

say() { echo "watchdog: $*" >&2; }
say "'$*' still running after ${limit}s; what it waits on:"

# Every task of the process group, and every task blocked in the kernel.
pids=$(ps -eo pid=,pgid= | awk -v g="$pid" '$2 == g { print $1 }')
blocked=$(ps -eLo tid=,stat= | awk '$2 ~ /^D/ { print $1 }')
ps -o pid,ppid,stat,etimes,wchan:32,args -p "$(echo $pids $blocked | tr ' ' ',')" >&2 2>/dev/null
for t in $blocked; do
  echo "--- kernel stack of blocked task $t ($(cat /proc/"$t"/comm 2>/dev/null)):" >&2
  cat /proc/"$t"/stack >&2 2>/dev/null
done
for p in $pids; do
  exe=$(readlink /proc/"$p"/exe 2>/dev/null) || continue
  case "$exe" in
    */target/*)
      for task in /proc/"$p"/task/*; do
        echo "--- $p thread ${task##*/} ($(cat "$task"/comm 2>/dev/null)), kernel stack:" >&2
        cat "$task"/stack >&2 2>/dev/null
      done
      if command -v gdb >/dev/null; then
        echo "--- $p user stacks:" >&2
        timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 30' 2>&1 | grep -v '^\[New LWP' >&2
      fi
      ;;
  esac
done
echo "--- mounts and loop devices:" >&2
grep -E ' fuse|/ck-' /proc/self/mountinfo >&2
losetup -a >&2 2>/dev/null
dmesg 2>/dev/null | tail -40 >&2

kill -KILL -- "-$pid" 2>/dev/null
sleep 2
# The connections are reached through the fusectl file system.
if [ -d /sys/fs/fuse/connections ] && ! grep -q ' /sys/fs/fuse/connections ' /proc/self/mountinfo; then
  mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null
fi
# The tests' FUSE mounts (made while the command ran, of a file system type
# fuse*): abort the connection, then unmount.
while read -r majmin mnt fstype; do
  grep -qxF "$majmin $mnt" <<< "$mounts_before" && continue
  case "$fstype" in
    fuse | fuse.*) ;;
    *) continue ;;
  esac
  minor=${majmin#*:}
  [ -w /sys/fs/fuse/connections/"$minor"/abort ] && echo 1 > /sys/fs/fuse/connections/"$minor"/abort
  say "aborted and unmounted the FUSE mount $mnt"
  umount -l "$mnt" 2>/dev/null
done < <(awk '{ for (i = 7; $i != "-"; i++); print $3, $5, $(i + 1) }' /proc/self/mountinfo)
for dev in $(losetup -a 2>/dev/null | cut -d: -f1); do
  grep -qxF "$dev" <<< "$loops_before" && continue
  losetup -d "$dev" 2>/dev/null && say "detached $dev"
done
# A task stuck in the kernel may outlive all this; do not wait for it forever.
for _ in $(seq 30); do
  state=$(awk '{ print $3 }' /proc/"$pid"/stat 2>/dev/null) || break
  [ "$state" = Z ] && break
  sleep 1
done
if [ "${state:-Z}" = Z ]; then
  wait "$pid" 2>/dev/null
  say "stopped '$*' after ${limit}s"
else
  say "'$*' did not end after SIGKILL (state $state); left behind"
fi
exit 124
