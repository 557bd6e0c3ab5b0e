# The benchmarks' statistics (sourced by lib-block.sh and lib-fs.sh).

# med: the median of the numbers on stdin (separated by spaces or newlines).
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# paired_ratio "A1 A2 .." "B1 B2 .." [time]: the median of the runs' own ratios A/B
# (B/A with `time`: for durations, >1 still means A is faster). A run measures every
# target within minutes, so a machine that slows down for a while moves both sides of a
# pair and leaves their ratio. "n/a" when the lists differ in length (a run that gave
# no figure: the runs cannot be paired).
paired_ratio() {
  python3 -c '
import statistics, sys
a, b = (list(map(float, x.split())) for x in sys.argv[1:3])
if len(a) != len(b):
    print("n/a"); sys.exit()
time = sys.argv[3] == "time"
r = [(y / x if time else x / y) for x, y in zip(a, b) if x and y]
print(f"{statistics.median(r):.2f}x" if r else "nan")' "$1" "$2" "${3:-rate}"
}

# rep_order R T1 T2 ..: the targets in the order run R measures them: as given in odd
# runs, reversed in even ones. Whatever a target's place in a run does to it (the state
# the one before it leaves, the machine's drift within the run) then falls on each
# target in half the runs, not always on the same one.
rep_order() {
  local r=$1 i; shift
  if (( r % 2 )); then printf '%s\n' "$@"; else for ((i = $#; i >= 1; i--)); do printf '%s\n' "${!i}"; done; fi
}
