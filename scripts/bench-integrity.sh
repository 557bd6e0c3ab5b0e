#!/usr/bin/env bash
# Integrity benchmark: the table of the dm-integrity report ("performance of
# cryptographic integrity checkers for full-disk encryption") regenerated with
# cryptkeep on this machine. The report's fio job (bs=1M, iodepth=64, libaio,
# 4 jobs, direct, group_reporting; sequential read and sequential write, 10 s
# each, time-based) runs on the loop device of every mode cryptkeep serves:
#   //                          the raw tmpfs file itself (fio on the file)
#   cipher_null//               n/a: cryptkeep has no cipher_null
#   /ALG/no|yes                 standalone integrity devices (`integrity format/open`,
#                               crc32c, hmac-sha1, hmac-sha256; no = --integrity-no-journal)
#   aes-xts-plain64//           a plain LUKS2 volume
#   CIPHER/ALG/no|yes           LUKS2 authenticated volumes (`format --integrity`;
#                               yes = the journal, the default; no = --integrity-no-journal):
#                               aes-xts-plain64/hmac-sha1|hmac-sha256, aegis128-random/aead,
#                               and (not in the report) chacha20-random/poly1305, aes-gcm-random/aead
# One image at a time on a tmpfs the script mounts: each mode's image is made,
# measured (write, then read) and removed in turn; all modes in one round,
# REPS rounds interleaved; medians. Each mode's ratio to the raw tmpfs file of
# the same run is set against the kernel's ratio from the report.
# Writes into --out DIR: results.csv (the report's layout: cipher/integrity/journal,read,write
# in MiB/s), table.md (ours, our ratio to raw, the kernel's ratio, ours/kernel),
# chart.svg (gnuplot, if installed), runs.csv (every run), fio/*.json and run.log.
# CK=path overrides the cryptkeep binary (default target/release/cryptkeep).
# usage: scripts/bench-integrity.sh [--reps N] [--runtime S] [--size MiB] [--quick]
#                                   [--keep process|inline] [--only REGEX] [--out DIR]
#                                   [--profile REGEX]
#   --quick: 1 s runs on 128 MiB images, one round unless --reps (CI smoke)
#   --keep: where LUKS2 volumes do their crypto (`open --keep`); default process,
#     what users get. Standalone integrity devices have no key in the keep.
#   --only REGEX: only the rows whose name matches (the raw file is always measured)
#   --profile REGEX: after the measured rounds, one more write run of each matching
#     row under `perf record -g` on the serving processes (not counted in the
#     table); perf-<row>.txt in DIR holds `perf report --no-children`.
set -euo pipefail
reps=; runtime=; size_mib=; keep=process; only=; out=; quick=0; profile=
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --runtime) runtime=$2; shift 2;;
    --size) size_mib=$2; shift 2;;
    --quick) quick=1; shift;;
    --keep) keep=$2; shift 2;;
    --only) only=$2; shift 2;;
    --out) out=$2; shift 2;;
    --profile) profile=$2; shift 2;;
    *) echo "bench-integrity: unknown argument $1" >&2; exit 1;;
  esac
done
if [ $quick = 1 ]; then
  reps=${reps:-1}; runtime=${runtime:-1}; size_mib=${size_mib:-128}
else
  reps=${reps:-3}; runtime=${runtime:-10}; size_mib=${size_mib:-1024}
fi
case $keep in process|inline) ;; *) echo "bench-integrity: --keep process|inline" >&2; exit 1;; esac
[ "$size_mib" -ge 64 ] || { echo "bench-integrity: --size must be at least 64 (MiB)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench-integrity: needs root (tmpfs, loop devices)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
ck=${CK:-$root/target/release/cryptkeep}
[ -x "$ck" ] || { echo "bench-integrity: build first: cargo build --release -p cryptkeep-cli" >&2; exit 1; }
for t in fio losetup blockdev python3; do
  command -v $t >/dev/null || { echo "bench-integrity: $t missing: run scripts/install-deps.sh" >&2; exit 1; }
done
if [ -n "$profile" ]; then
  command -v perf >/dev/null || { echo "bench-integrity: --profile needs perf (apt-get install linux-perf)" >&2; exit 1; }
fi
# One image at a time, plus the raw file's: keep twice that free.
avail=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
[ "$avail" -gt $(( size_mib * 2 + 1024 )) ] || {
  echo "bench-integrity: ${avail} MiB available, too little for ${size_mib} MiB images: use --size" >&2; exit 1; }
out=${out:-$root/bench-results/integrity-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/fio"; out=$(cd "$out" && pwd)
: > "$out/run.log"
log() { echo "bench-integrity: $*" | tee -a "$out/run.log" >&2; }

# The report's kernel figures (dm-crypt + dm-integrity, fio on tmpfs; MiB/s read, write).
kernel_csv='//,12567.06,4934.57
cipher_null//,7236.37,2762.62
/crc32c/no,7156.80,3055.56
/crc32c/yes,7182.00,533.24
aegis128-random/aead/no,6206.72,906.96
aegis128-random/aead/yes,6213.68,906.91
aes-xts-plain64//,5296.00,2379.60
/hmac-sha1/no,3175.20,1971.55
/hmac-sha1/yes,3200.40,1140.30
aes-xts-plain64/hmac-sha1/no,1974.03,1903.11
aes-xts-plain64/hmac-sha1/yes,2030.40,1722.06
/hmac-sha256/no,1486.8,1190.62
/hmac-sha256/yes,1561.5,686.7
aes-xts-plain64/hmac-sha256/no,883.6,1527.36
aes-xts-plain64/hmac-sha256/yes,996.4,1451.72'
# The rows, in the report's order, then cryptkeep's extra AEAD modes.
all_rows=(
  //
  cipher_null//
  /crc32c/no /crc32c/yes
  aegis128-random/aead/no aegis128-random/aead/yes
  aes-xts-plain64//
  /hmac-sha1/no /hmac-sha1/yes
  aes-xts-plain64/hmac-sha1/no aes-xts-plain64/hmac-sha1/yes
  /hmac-sha256/no /hmac-sha256/yes
  aes-xts-plain64/hmac-sha256/no aes-xts-plain64/hmac-sha256/yes
  chacha20-random/poly1305/no chacha20-random/poly1305/yes
  aes-gcm-random/aead/no aes-gcm-random/aead/yes
)
declare -A na=(
  [cipher_null//]="cryptkeep has no cipher_null (dm-crypt's cipher that does not encrypt; cryptkeep formats and opens encrypting LUKS ciphers only)"
)
rows=()
for row in "${all_rows[@]}"; do
  if [ "$row" = // ] || [ -z "$only" ] || [[ $row =~ $only ]]; then rows+=("$row"); fi
done

w=$(mktemp -d "${TMPDIR:-/tmp}/ck-bench-int.XXXXXX")
t=$w/tmpfs
name=bench-int
export CRYPTKEEP_RUN_DIR=$w/run
cleanup() {
  set +e
  "$ck" close $name >/dev/null 2>&1
  losetup -n -O NAME,BACK-FILE | awk -v w="$w" 'index($2, w) == 1 {print $1}' | xargs -r -n1 losetup -d
  mountpoint -q "$t" && umount -l "$t"
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$t" "$w/run"
# One image at a time (integrity tags and the journal live inside it) and room to spare.
mount -t tmpfs -o size=$(( size_mib + 256 ))M tmpfs "$t"
head -c 32 /dev/urandom > "$w/hmac.key"
printf 'bench' > "$w/pass"

# The serving processes of this run: the daemon and its children (with --keep
# process, the keep: /proc/self/exe __keep, named "exe").
our_pids() {
  local p
  for p in $(pgrep -x cryptkeep || true); do
    { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null | grep -qx "CRYPTKEEP_RUN_DIR=$w/run" || continue
    echo "$p"; pgrep -P "$p" || true
  done
  return 0
}
# setup ROW: makes the row's image and opens it; sets dev (what fio runs on) and kind.
setup() {
  local row=$1 cipher integ journal
  IFS=/ read -r cipher integ journal <<< "$row"
  local img=$t/img
  if [ "$row" = // ]; then
    kind=raw; dev=$t/raw
    dd if=/dev/zero of="$dev" bs=1M count="$size_mib" status=none || return 1
  elif [ -z "$cipher" ]; then
    kind=int
    local alg=(--integrity "$integ")
    [[ $integ == hmac-* ]] && alg+=(--integrity-key-file "$w/hmac.key" --integrity-key-size 32)
    local jr=(); [ "$journal" = no ] && jr=(--integrity-no-journal)
    truncate -s "${size_mib}M" "$img" || return 1
    "$ck" integrity format -q "${alg[@]}" "$img" >/dev/null || return 1
    dev=$("$ck" integrity open "${alg[@]}" "${jr[@]}" "$img" $name) || return 1
  else
    kind=luks
    local fmt=(--cipher "$cipher")
    case $cipher in aegis128-random) fmt+=(--key-size 128);; esac
    [ -n "$integ" ] && fmt+=(--integrity "$integ")
    local jr=(); [ "$journal" = no ] && jr=(--integrity-no-journal)
    "$ck" format --type luks2 "${fmt[@]}" --sector-size 4096 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
      --key-file "$w/pass" -q --size "${size_mib}M" "$img" >/dev/null || return 1
    dev=$("$ck" open "$img" $name --key-file "$w/pass" --keep "$keep" "${jr[@]}") || return 1
  fi
}
teardown() {
  [ "$kind" = raw ] || "$ck" close $name
  rm -f "$t/img" "$t/raw"
}
# fio_run DEV RW TAG -> MiB/s (the report's job; each of the 4 jobs on its own quarter)
fio_run() {
  local bytes q
  if [ -b "$1" ]; then bytes=$(blockdev --getsize64 "$1"); else bytes=$(stat -c %s "$1"); fi
  q=$(( bytes / 4 / 1048576 ))
  fio --name=bench --filename="$1" --rw="$2" --bs=1M --iodepth=64 --ioengine=libaio --direct=1 \
    --numjobs=4 --size="${q}M" --offset_increment="${q}M" --runtime="$runtime" --time_based \
    --group_reporting --output-format=json --output="$out/fio/$3.json" >/dev/null 2>>"$out/run.log"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0][sys.argv[2]]; \
print(f\"{j['bw']/1024:.1f}\")" "$out/fio/$3.json" "$2"
}
slug() { local s=${1//\//_}; echo "${s:-raw}"; }

declare -A res failed
echo "rep,row,write,read" > "$out/runs.csv"
log "$(nproc) cores, $(uname -r); ${size_mib} MiB images on tmpfs; fio ${runtime} s per run; $reps rounds; LUKS2 crypto: --keep $keep"
step=0; steps=$(( reps * ${#rows[@]} ))
for ((r = 1; r <= reps; r++)); do
  for row in "${rows[@]}"; do
    step=$(( step + 1 ))
    # Progress for `cryptkeep bench integrity` (docs/design/bench.md).
    [ -n "${BENCH_STEPS:-}" ] && echo "@step $step $steps round $r: $row"
    [ -n "${na[$row]:-}" ] && continue
    [ -n "${failed[$row]:-}" ] && continue
    s=$(date +%s.%N)
    if ! setup "$row" 2> "$w/err"; then
      failed[$row]="setup failed: $(tail -1 "$w/err")"; log "$row: ${failed[$row]}"
      teardown >/dev/null 2>&1 || true; continue
    fi
    e=$(date +%s.%N)
    tag=$(slug "$row")-r$r
    wr=$(fio_run "$dev" write "$tag-write") || wr=
    rd=$(fio_run "$dev" read "$tag-read") || rd=
    teardown
    if [ -z "$wr" ] || [ -z "$rd" ]; then
      failed[$row]="fio failed (see run.log)"; log "$row: ${failed[$row]}"; continue
    fi
    res[$row,w]+="$wr "; res[$row,r]+="$rd "
    echo "$r,$row,$wr,$rd" >> "$out/runs.csv"
    log "round $r/$reps: ${row}: write $wr MiB/s, read $rd MiB/s (set up in $(python3 -c "print(f'{$e - $s:.1f}')") s)"
  done
done

# Rows not measured, with the reason.
: > "$w/missing"
for row in "${rows[@]}"; do
  reason=${na[$row]:-${failed[$row]:-}}
  [ -n "$reason" ] && printf '%s\t%s\n' "$row" "$reason" >> "$w/missing"
done
printf '%s\n' "$kernel_csv" > "$w/kernel.csv"
printf '%s\n' "${rows[@]}" > "$w/rows"
note="medians of $reps interleaved rounds; fio bs=1M iodepth=64 libaio numjobs=4 direct, ${runtime} s time-based per run; \
${size_mib} MiB images on tmpfs, one at a time; standalone integrity: 512-byte blocks; LUKS2: 4096-byte sectors, \
crypto --keep $keep; $(nproc) cores, $(uname -r), cryptkeep $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')"
python3 - "$out" "$w" "$note" <<'PY'
import csv, statistics, sys
out, w, note = sys.argv[1:4]
rows = open(f"{w}/rows").read().split()
kern = {r[0]: (float(r[1]), float(r[2])) for r in csv.reader(open(f"{w}/kernel.csv"))}
missing = dict(l.rstrip("\n").split("\t", 1) for l in open(f"{w}/missing") if l.strip())
runs = {}
for r in csv.DictReader(open(f"{out}/runs.csv")):
    runs.setdefault(r["row"], []).append((float(r["read"]), float(r["write"])))
med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs)) for k, vs in runs.items()}
raw = med.get("//")
kraw = kern["//"]
def f1(x): return "—" if x is None else f"{x:.1f}"
def f2(x): return "—" if x is None else f"{x:.2f}"
with open(f"{out}/results.csv", "w") as c:
    c.write("cipher/integrity/journal,read,write\n")
    for row in rows:
        if row in med: c.write(f"{row},{med[row][0]:.2f},{med[row][1]:.2f}\n")
        else: c.write(f"{row},n/a,n/a\n")
lines = ["| cipher/integrity/journal | read MiB/s | write MiB/s | read / raw | write / raw "
         "| kernel read / raw | kernel write / raw | ours / kernel, read | ours / kernel, write |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
chart = []
for row in rows:
    k = kern.get(row)
    kr = (k[0] / kraw[0], k[1] / kraw[1]) if k else (None, None)
    if row in med and raw:
        m = med[row]; our = (m[0] / raw[0], m[1] / raw[1])
        rel = tuple(o / x if x else None for o, x in zip(our, kr))
        lines.append(f"| `{row}` | {f1(m[0])} | {f1(m[1])} | {f2(our[0])} | {f2(our[1])} | {f2(kr[0])} | {f2(kr[1])} "
                     f"| {f2(rel[0])} | {f2(rel[1])} |")
        chart.append((row, our, kr))
    else:
        why = missing.get(row, "not measured")
        lines.append(f"| `{row}` | n/a: {why} | n/a | — | — | {f2(kr[0])} | {f2(kr[1])} | — | — |")
        chart.append((row, (None, None), kr))
lines.append("")
lines.append(f"Ratios are to the raw tmpfs file (`//`) of the same run; the kernel's are the dm-integrity "
             f"report's (dm-crypt + dm-integrity). ({note})")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
with open(f"{out}/chart.dat", "w") as d:
    d.write("row ours_read kernel_read ours_write kernel_write\n")
    q = lambda x: "NaN" if x is None else f"{x:.4f}"
    for row, our, kr in chart:
        if row == "//": continue
        d.write(f'"{row}" {q(our[0])} {q(kr[0])} {q(our[1])} {q(kr[1])}\n')
PY
if command -v gnuplot >/dev/null; then
  gnuplot <<GP 2>>"$out/run.log" || log "gnuplot failed (see run.log)"
set terminal svg size 1100,900 dynamic noenhanced font "sans,11" background "white"
set output "$out/chart.svg"
set multiplot layout 2,1 title "Throughput relative to the raw tmpfs file: cryptkeep (--keep $keep) vs the kernel (the dm-integrity report)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key top right
set datafile missing "NaN"
set xtics rotate by 35 right scale 0 font ",9"
set ylabel "read / raw tmpfs"
plot "$out/chart.dat" using 2:xtic(1) title "cryptkeep" lc rgb "#1f77b4", "" using 3 title "kernel" lc rgb "#aaaaaa"
set ylabel "write / raw tmpfs"
plot "$out/chart.dat" using 4:xtic(1) title "cryptkeep" lc rgb "#d62728", "" using 5 title "kernel" lc rgb "#aaaaaa"
unset multiplot
GP
else
  log "gnuplot not installed: no chart (scripts/install-deps.sh installs gnuplot-nox)"
fi

# --profile: one more write run per matching row, under perf, not counted.
if [ -n "$profile" ]; then
  for row in "${rows[@]}"; do
    [[ $row =~ $profile ]] || continue
    [ "$row" = // ] || [ -n "${na[$row]:-}" ] || [ -n "${failed[$row]:-}" ] && continue
    setup "$row" || { log "$row: cannot set up for perf"; continue; }
    pids=$(our_pids | paste -sd,)
    procs=$(for p in ${pids//,/ }; do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-50; echo; done | paste -sd';')
    tag=$(slug "$row")
    fio_run "$dev" write "$tag-perf-write" > "$w/perf-bw" &
    fpid=$!
    sleep 0.5
    perf record -q -g -o "$w/perf.data" -p "$pids" -- sleep "$(python3 -c "print(max($runtime - 1, 1))")" \
      >/dev/null 2>>"$out/run.log" || true
    wait $fpid || true
    teardown
    rep() { perf report -i "$w/perf.data" --no-children --stdio "$@" 2>/dev/null | grep -v '^$' || true; }
    { echo "# $row: write under perf: $(cat "$w/perf-bw") MiB/s; pids $pids ($procs)"
      echo "## by symbol, all threads together"; rep --sort sym -g none | grep -v '^#' | head -40
      echo "## by thread"; rep --sort comm -g none | grep -v '^#' | head -20
      echo "## by shared object"; rep --sort dso -g none | grep -v '^#' | head -10
      echo "## call graphs (perf report --no-children)"; rep | head -150
    } > "$out/perf-$tag.txt" || true  # (head closes the pipes early)
    rm -f "$w/perf.data"
    log "$row: profile in $out/perf-$tag.txt"
  done
fi

echo "## cipher/integrity/journal,read,write (MiB/s; cryptkeep, --keep $keep)"
cat "$out/results.csv"
echo
cat "$out/table.md"
echo
echo "results in $out"
