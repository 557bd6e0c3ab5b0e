# kt_luks2_set_iv_tweak IMAGE TWEAK (sourced, bash): set the iv_tweak of the
# only crypt segment of a LUKS2 header that cryptsetup made, in both header
# copies, and recompute each copy's SHA-256 checksum. cryptsetup luksFormat
# cannot make such a volume; the kernel (through cryptsetup open, which passes
# iv_tweak as dm-crypt's iv_offset) is the oracle for what it means.
# Layout (LUKS2 on-disk format, section 2): hdr_size be64 @8, csum[64] @448
# over hdr_size bytes with csum zeroed, JSON from 4096 to hdr_size, secondary
# copy at offset hdr_size. Needs coreutils only.
kt_luks2_set_iv_tweak() {
  local img=$1 tweak=$2 hdr_size copy json new sum tmp
  [ "$(head -c 6 "$img" | od -An -t x1 | tr -d ' ')" = 4c554b53babe ] || { echo "$img: no LUKS2 magic" >&2; return 1; }
  hdr_size=$((16#$(od -An -t x1 -j 8 -N 8 "$img" | tr -d ' \n')))
  tmp=$(mktemp)
  for copy in 0 "$hdr_size"; do
    json=$(dd if="$img" bs=4096 skip=$((copy / 4096 + 1)) count=$((hdr_size / 4096 - 1)) status=none | tr -d '\0')
    new=${json/\"iv_tweak\":\"0\"/\"iv_tweak\":\"$tweak\"}
    if [ "$new" = "$json" ] || [ "${new/\"iv_tweak\":\"0\"/}" != "$new" ]; then
      echo "$img: expected exactly one \"iv_tweak\":\"0\" in the JSON at $copy" >&2; rm -f "$tmp"; return 1
    fi
    { printf '%s' "$new"; head -c $((hdr_size - 4096 - ${#new})) /dev/zero; } \
      | dd of="$img" bs=4096 seek=$((copy / 4096 + 1)) conv=notrunc status=none
    head -c 64 /dev/zero | dd of="$img" bs=1 seek=$((copy + 448)) conv=notrunc status=none
    dd if="$img" of="$tmp" bs=4096 skip=$((copy / 4096)) count=$((hdr_size / 4096)) status=none
    sum=$(sha256sum "$tmp" | cut -c1-64)
    # shellcheck disable=SC2059 # the format string is the checksum's bytes
    printf "$(printf '%s' "$sum" | sed 's/../\\x&/g')" \
      | dd of="$img" bs=1 seek=$((copy + 448)) conv=notrunc status=none
  done
  rm -f "$tmp"
}
