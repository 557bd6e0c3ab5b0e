#!/usr/bin/env bash
# The secGear report regenerated: an enclave runtime measured against the
# host, here cryptkeep's runtime keep (a separate, sandboxed process called
# over shared memory) against the same work in the calling process.
#
#   scripts/bench/secgear.sh --out DIR [--quick] [--reps N] [--backing DIR]
#
# Run by `cryptkeep bench secgear` (docs/design/bench.md is the contract);
# it also runs alone. Writes into DIR: data.csv, targets.csv, metrics.csv,
# skipped.txt, published.md and notes.md.
#   - The micro-benchmarks (create/destroy, call cost, SHA-256 of 1 GB,
#     AES-256-GCM and RSA-2048 of 23 bytes, sector throughput) are
#     `cryptkeep bench keep --csv`: target `host` is the work in the calling
#     process, `keep` the same work in a runtime keep.
#   - The example applications are crates/keep/examples/{hello,crypto}_{host,keep}
#     (the report's helloworld, secgear_helloworld, crypto, secgear_crypto),
#     each run N times (default 50, --quick 3), interleaved; per run the CPU
#     time (user + system, the keep's included), the wall time and the
#     largest resident set, from wait4(2) as time(1) reads them but at
#     microsecond resolution (time(1) prints hundredths, and the host-only
#     helloworld needs less than one), by a small C launcher built here.
#   - secGear itself (SGX, TrustZone) cannot run here: skipped.txt says why.
# --quick: small sizes (well under two minutes after the build). --backing
# is accepted and ignored (nothing here touches a disk). CK is the cryptkeep
# binary (default target/release/cryptkeep). Progress lines `@step I N
# LABEL` go to stdout, everything else to stderr (the driver's log.txt).
# In a checkout, builds the workspace's binaries and examples first (`cargo
# build --release --workspace --bins --examples`, as scripts/test.sh does,
# so it is a no-op after the tests); installed, it runs the example
# programs scripts/install.sh put in PREFIX/libexec/cryptkeep/examples.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
CK=${CK:-$root/target/release/cryptkeep}
target_dir=${CARGO_TARGET_DIR:-$root/target}

usage() {
  echo "usage: $0 --out DIR [--quick] [--reps N] [--backing DIR]" >&2
  exit 1
}

out='' quick=0 reps='' backing=''
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --reps) [ $# -ge 2 ] || usage; reps=$2; shift 2 ;;
    --backing) [ $# -ge 2 ] || usage; backing=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
    *) echo "secgear.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[ -n "$out" ] || usage
if [ -n "$reps" ]; then
  case $reps in ''|*[!0-9]*|0) echo "secgear.sh: --reps needs a positive whole number, not '$reps'" >&2; exit 1 ;; esac
elif [ $quick = 1 ]; then
  reps=3
else
  reps=50
fi
if [ $quick = 1 ]; then
  keep_args=(--lifecycles 3 --sha-mib 64 --seconds 0.2)
else
  # The report: 100 enclaves, 1 GB hashed.
  keep_args=(--lifecycles 100 --sha-mib 1024 --seconds 2)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Every long step runs in the background and is waited for, so a signal is
# handled at once; the handler stops that step and every process under it.
# Keeps also die with the process that started them (PR_SET_PDEATHSIG).
child=''
tmp=$(mktemp -d)
tree() {
  local c
  echo "$1"
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done
}
cleanup() {
  local rc=$?
  trap - INT TERM EXIT
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    # shellcheck disable=SC2046 # one process id per word
    kill -TERM $(tree "$child") 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
run() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=''
  return "$rc"
}

steps=4
step() { echo "@step $1 $steps $2"; }

# ------------------------------------------------------------------ 1 build
progs=(hello_host hello_keep crypto_host crypto_keep)
checkout=0
[ -f "$root/Cargo.toml" ] && checkout=1
if [ $checkout = 1 ]; then
  step 1 "build the binaries and the keep examples"
else
  step 1 "find the installed example programs"
fi
if [ $checkout = 1 ] && command -v cargo >/dev/null 2>&1; then
  run cargo build --manifest-path "$root/Cargo.toml" --release --workspace --bins --examples >&2 ||
    echo "secgear.sh: the build failed; using the binaries already built, if any" >&2
fi
[ -x "$CK" ] || { echo "secgear.sh: no cryptkeep binary at $CK (set CK, or cargo build --release)" >&2; exit 1; }
# The example programs: a checkout's build, else the copy scripts/install.sh
# puts beside an installed cryptkeep.
examples=''
for d in "$target_dir/release/examples" "$(dirname "$CK")/../libexec/cryptkeep/examples"; do
  found=1
  for p in "${progs[@]}"; do [ -x "$d/$p" ] || found=0; done
  if [ $found = 1 ]; then examples=$(cd "$d" && pwd); break; fi
done
if [ -z "$examples" ]; then
  if [ $checkout = 1 ]; then
    echo "secgear.sh: the example programs (${progs[*]}) are not in $target_dir/release/examples: run cargo build --release --workspace --bins --examples" >&2
    exit 1
  fi
  echo "secgear.sh: the example programs are not installed (scripts/install.sh puts them in PREFIX/libexec/cryptkeep/examples); the example applications are left out" >&2
fi

# ------------------------------------------------------------------ files that do not depend on the run
cat > "$out/targets.csv" <<'EOF'
target,role,label
host,baseline,host (no keep)
keep,ours,cryptkeep runtime keep
secgear-sgx,peer,secGear (Intel SGX)
secgear-trustzone,peer,secGear (Arm TrustZone)
EOF

peers='secgear-sgx secgear-trustzone'
cat > "$out/metrics.csv" <<EOF
metric,label,unit,better,table,targets
create_us,create (to the first call),µs,lower,create and destroy,keep $peers
destroy_us,destroy,µs,lower,create and destroy,keep $peers
null_call_spin_ns,null call (worker spinning),ns,lower,call cost,keep
null_call_futex_ns,null call (worker asleep: futex wake),ns,lower,call cost,keep
sha256_mbps,SHA-256 throughput,MB/s,higher,SHA-256 throughput,*
gcm_encrypt_us,AES-256-GCM encrypt (computation),µs,lower,AES-256-GCM of 23 bytes,*
gcm_decrypt_us,AES-256-GCM decrypt (computation),µs,lower,AES-256-GCM of 23 bytes,*
gcm_encrypt_call_us,AES-256-GCM encrypt (with the call),µs,lower,AES-256-GCM of 23 bytes,keep
gcm_decrypt_call_us,AES-256-GCM decrypt (with the call),µs,lower,AES-256-GCM of 23 bytes,keep
rsa_keygen_us,RSA-2048 key generation (computation),µs,lower,RSA-2048 key generation,*
rsa_keygen_call_us,RSA-2048 key generation (with the call),µs,lower,RSA-2048 key generation,keep
rsa_encrypt_us,RSA-2048 encrypt (computation),µs,lower,RSA-2048 encrypt and decrypt,*
rsa_decrypt_us,RSA-2048 decrypt (computation),µs,lower,RSA-2048 encrypt and decrypt,*
rsa_encrypt_call_us,RSA-2048 encrypt (with the call),µs,lower,RSA-2048 encrypt and decrypt,keep
rsa_decrypt_call_us,RSA-2048 decrypt (with the call),µs,lower,RSA-2048 encrypt and decrypt,keep
xts_mibps,aes-xts-plain64 sectors (keep: copied in and out),MiB/s,higher,sector throughput,host keep
xts_zero_copy_mibps,aes-xts-plain64 sectors (keep: zero-copy slot),MiB/s,higher,sector throughput,keep
gcm_seal_mibps,AES-256-GCM sector seal,MiB/s,higher,sector throughput,host keep
gcm_open_mibps,AES-256-GCM sector open,MiB/s,higher,sector throughput,host keep
EOF
if [ -n "$examples" ]; then
  cat >> "$out/metrics.csv" <<'EOF'
hello_cpu_s,helloworld CPU time,s,lower,example applications: CPU time,*
crypto_cpu_s,crypto CPU time,s,lower,example applications: CPU time,*
hello_max_rss_kib,helloworld memory (max RSS),KiB,lower,example applications: memory,*
crypto_max_rss_kib,crypto memory (max RSS),KiB,lower,example applications: memory,*
hello_wall_s,helloworld wall time,s,lower,example applications: wall time,host keep
crypto_wall_s,crypto wall time,s,lower,example applications: wall time,host keep
EOF
fi

# secGear needs what this machine may not have; say exactly what is missing.
sgx_missing=()
grep -qw sgx /proc/cpuinfo 2>/dev/null || sgx_missing+=("a CPU with SGX enabled (this CPU reports no sgx flag)")
[ -e /dev/sgx_enclave ] || [ -e /dev/isgx ] || sgx_missing+=("the SGX driver (no /dev/sgx_enclave)")
secgear_sdk=0
if ldconfig -p 2>/dev/null | grep -q libsecgear || [ -e /usr/lib64/libsecgear.so ] || [ -e /usr/lib/libsecgear.so ]; then
  secgear_sdk=1
else
  sgx_missing+=("the secGear SDK (no libsecgear: it is packaged for openEuler)")
fi
tz_missing=()
[ "$(uname -m)" = aarch64 ] || tz_missing+=("an Arm server (this machine is $(uname -m))")
[ -e /dev/tc_ns_client ] || tz_missing+=("the iTrustee TrustZone OS (no /dev/tc_ns_client)")
[ $secgear_sdk = 1 ] || tz_missing+=("the secGear SDK (no libsecgear)")
join() { local IFS=';'; local s="$*"; echo "${s//;/, }"; }
{
  if [ ${#sgx_missing[@]} -gt 0 ]; then
    echo "secgear-sgx: needs $(join "${sgx_missing[@]}"); install: on openEuler on an SGX machine: yum install -y cmake ocaml-dune linux-sgx-driver sgxsdk libsgx-launch libsgx-urts intel-sgx-ssl-devel secGear-devel"
  else
    echo "secgear-sgx: SGX and the secGear SDK are here, but this script does not build or run secGear's examples; install: build secGear's examples (https://gitee.com/openeuler/secGear) and compare by hand"
  fi
  if [ ${#tz_missing[@]} -gt 0 ]; then
    echo "secgear-trustzone: needs $(join "${tz_missing[@]}"); install: on openEuler on a Kunpeng 920 server with the TrustZone kit enabled: yum install -y cmake ocaml-dune secGear-devel"
  else
    echo "secgear-trustzone: TrustZone and the secGear SDK are here, but this script does not build or run secGear's examples; install: build secGear's examples (https://gitee.com/openeuler/secGear) and compare by hand"
  fi
} > "$out/skipped.txt"

cat > "$out/published.md" <<'EOF'
secGear's performance page (`docs/performence.md`). Machines: x86, Supermicro
SYS-1019S-MCOT with an Intel Xeon E3-1280 v6 @ 3.90 GHz (SGX); Arm, TaiShan
2280 V2 with a Kunpeng 920 (TrustZone, iTrustee). The crypto figures are
computation only, without the enclave call; OpenSSL in both places.

**Headline:** inside an SGX enclave, SHA-256 runs at 41.9 % of the host's
throughput (TrustZone: 41.3 %); the helloworld example costs 20× the CPU
time and 5.1× the memory of the same program on the host (crypto: 1.5× and
2.4×).

### Create and destroy an enclave (mean of 100, µs)

| | create | destroy |
|---|---:|---:|
| SGX | 19571.17 | 657.89 |
| TrustZone | 9465.71 | 526.67 |

### SHA-256 of 1 GB of random data, host against enclave

| SGX | host | enclave |
|---|---:|---:|
| time (s) | 5.884516 | 14.039993 |
| throughput (MB/s) | 174.016 | 72.935 |
| throughput / host's | 100 % | 41.9 % |

| TrustZone | host | enclave |
|---|---:|---:|
| time (s) | 10.620642 | 25.742336 |
| throughput (MB/s) | 96.416 | 39.779 |
| throughput / host's | 100 % | 41.3 % |

### AES-256-GCM of a 23-byte string (µs)

| SGX | encrypt | decrypt |
|---|---:|---:|
| host | 1.6 | 0.6 |
| enclave | 2.5 | 1.9 |
| enclave speed / host speed | 64 % | 32 % |

| TrustZone | encrypt | decrypt |
|---|---:|---:|
| host | 2.7 | 0.8 |
| enclave | 13.5 | 2.1 |
| enclave speed / host speed | 20 % | 38 % |

### RSA of a 23-byte string (µs)

| SGX | key generation | encrypt | decrypt |
|---|---:|---:|---:|
| host | 164945.4 | 2203.0 | 1533.1 |
| enclave | 326561.6 | 4934.9 | 3926.6 |
| enclave speed / host speed | 51 % | 44 % | 39 % |

| TrustZone | key generation | encrypt | decrypt |
|---|---:|---:|---:|
| host | 241200.0 | 4952.4 | 3812.3 |
| enclave | 428364.3 | 5545.5 | 4215.5 |
| enclave speed / host speed | 56 % | 89 % | 90 % |

### Example applications (50 runs each, time(1))

helloworld and crypto are secgear_helloworld and secgear_crypto rewritten
to run on the host only, built with the same options.

| SGX | helloworld | secgear_helloworld | crypto | secgear_crypto |
|---|---:|---:|---:|---:|
| CPU (s) | 0.001 | 0.02 | 0.207 | 0.307 |
| memory (KB) | 1256.96 | 6444.56 | 4165.76 | 10203.52 |

| TrustZone | helloworld | secgear_helloworld | crypto | secgear_crypto |
|---|---:|---:|---:|---:|
| CPU (s) | 0.001 | 0.028 | 0.319 | 0.414 |
| memory (KB) | 1543.68 | 3336.96 | 4807.68 | 5392.64 |

In both, the applications' time and memory go mostly to creating and
destroying the enclave and to the enclave calls.
EOF

# ------------------------------------------------------------------ 2 micro-benchmarks
step 2 "micro-benchmarks: cryptkeep bench keep ${keep_args[*]}"
run "$CK" bench keep "${keep_args[@]}" --csv "$tmp/keep.csv" >&2
cp "$tmp/keep.csv" "$out/data.csv"

# ------------------------------------------------------------------ 3 example applications
# One run of a program, measured as time(1) does (fork, exec, wait4) but
# printed at microsecond resolution: CPU seconds (user + system, of the
# program and of the children it waited for: its keep), wall seconds, and
# the largest resident set in KiB. A small C program, so that the resident
# set a child starts with (the launcher's own) is as small as time(1)'s.
cat > "$tmp/measure.c" <<'EOF'
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct timespec t0, t1;
  struct rusage ru;
  int status;
  if (argc < 2) return 2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 1; }
  if (pid == 0) {
    dup2(2, 1); /* the program's output goes to the log */
    execv(argv[1], argv + 1);
    perror(argv[1]);
    _exit(127);
  }
  if (wait4(pid, &status, 0, &ru) < 0) { perror("wait4"); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: failed (wait status %d)\n", argv[1], status);
    return 1;
  }
  printf("%.6f %.6f %ld\n",
         ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
         (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, ru.ru_maxrss);
  return 0;
}
EOF
# A data.csv row; a value that is not positive (a clock that did not move)
# is left out, with a word in the log.
row() {
  case $4 in
    *[1-9]*) echo "secgear,$1,$2,$3,$4,$5" ;;
    *) echo "secgear.sh: $2 of $1 run $3 read '$4'; left out" >&2 ;;
  esac
}
# Runs interleaved, so that a change in the machine's load falls on every
# program alike. Prints data.csv rows.
examples_runs() {
  local rep spec target prefix prog line cpu wall rss
  for rep in $(seq 1 "$reps"); do
    for spec in host:hello:hello_host keep:hello:hello_keep host:crypto:crypto_host keep:crypto:crypto_keep; do
      IFS=: read -r target prefix prog <<< "$spec"
      line=$("$tmp/measure" "$examples/$prog") || {
        echo "secgear.sh: $prog failed (run $rep)" >&2
        return 1
      }
      read -r cpu wall rss <<< "$line"
      row "$target" "${prefix}_cpu_s" "$rep" "$cpu" s
      row "$target" "${prefix}_max_rss_kib" "$rep" "$rss" KiB
      row "$target" "${prefix}_wall_s" "$rep" "$wall" s
    done
    echo "secgear.sh: example applications, run $rep of $reps done" >&2
  done
}
if [ -n "$examples" ]; then
  step 3 "example applications: 4 programs, $reps runs each"
  cc -O2 -o "$tmp/measure" "$tmp/measure.c" >&2 || {
    echo "secgear.sh: cannot compile the run timer (a C compiler is needed: scripts/install-deps.sh installs build-essential)" >&2
    exit 1
  }
  run examples_runs >> "$out/data.csv"
else
  step 3 "example applications: not installed, left out"
fi

# ------------------------------------------------------------------ 4 notes
step 4 "notes"
{
  echo "Conditions of this run:"
  echo
  if [ $quick = 1 ]; then echo "- **Quick run**: small sizes; the figures are a smoke test, not a measurement."; fi
  echo "- Micro-benchmarks: \`cryptkeep bench keep ${keep_args[*]}\` (keeps created and destroyed; MiB hashed on each side; seconds per throughput run). \`host\` is the same library code in the calling process; \`keep\` is a runtime keep (\`cryptkeep __keep runtime\`: a separate process with seccomp, Landlock and its heap in \`memfd_secret\` memory, called through shared-memory rings)."
  echo "- \"Computation only\" figures of the keep are timed inside the keep (a timed repeat), as the report timed inside the enclave; \"with the call\" adds the round trip from the caller. RSA key generation: one figure per key (it varies a lot from key to key), 10 keys each way."
  echo "- Sector throughput: 4 threads, 1024 KiB requests, 3 rounds; host is the cipher inline."
  if [ -z "$examples" ]; then
    echo "- **Example applications: not measured**: the example programs are not installed beside this cryptkeep (scripts/install.sh puts them in PREFIX/libexec/cryptkeep/examples; from a checkout this script builds them)."
  else
    echo "- Example applications: crates/keep/examples/hello_host, hello_keep, crypto_host, crypto_keep (the report's helloworld, secgear_helloworld, crypto, secgear_crypto; release build), $reps runs each, interleaved. CPU time is user + system of the program and of its keep (the keep is its child, waited for). Memory is the largest resident set of one process, the program or its keep, as time(1) reports it; the two processes' sum is not measured. Read from wait4(2) at microsecond resolution by a small C launcher (fork, exec, wait4; the resident set a child starts with is the launcher's, as with time(1))."
  fi
  echo "- CPUs: $(nproc); kernel $(uname -r); $("$CK" --version 2>/dev/null || echo cryptkeep)."
  if [ -n "$backing" ]; then echo "- \`--backing $backing\` was given and ignored: nothing here reads or writes a disk."; fi
  echo "- secGear itself: see Not measured; its figures are under As published."
} > "$out/notes.md"
echo "secgear.sh: done; $(($(wc -l < "$out/data.csv") - 1)) measurements in $out/data.csv" >&2
