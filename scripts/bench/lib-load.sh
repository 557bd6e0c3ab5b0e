# A CPU load for the benchmarks (sourced by lib-block.sh and lib-fs.sh): storage measured
# on a machine that is busy with other work.
#
# bench_load_start cpu: one busy process per CPU (stress-ng --cpu $(nproc), matrix
# products, at the default priority) for the rest of the run; any other argument, or none,
# starts nothing. bench_load_stop ends it (the clean-ups call it too).
bench_load_pids=()
bench_load_start() {
  [ "${1:-}" = cpu ] || return 0
  command -v stress-ng >/dev/null || {
    [ -z "${CI:-}" ] || { echo "bench: stress-ng is missing (not installing in CI)" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
  }
  stress-ng --cpu "$(nproc)" --cpu-method matrixprod --quiet 3>&- &
  bench_load_pids+=($!)
}
bench_load_stop() {
  local pid
  for pid in "${bench_load_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  bench_load_pids=()
}
