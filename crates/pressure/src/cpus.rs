//! How many CPUs the kernel counts as possible (`num_possible_cpus()`,
//! from `/sys/devices/system/cpu/possible`): the per-CPU structures the
//! kernel makes, such as FUSE-over-io_uring queues, number this many.

use std::io;

/// The number of possible CPUs: one more than the highest CPU number in
/// `/sys/devices/system/cpu/possible` (a list like `0-3,8-11`).
pub fn possible_cpus() -> io::Result<usize> {
    parse_cpu_list(&std::fs::read_to_string(
        "/sys/devices/system/cpu/possible",
    )?)
}

/// One more than the highest CPU number in a kernel CPU list.
fn parse_cpu_list(s: &str) -> io::Result<usize> {
    let mut n = 0;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |x: &str| {
            x.parse::<usize>()
                .map_err(|_| io::Error::other(format!("cannot parse possible CPUs {s:?}")))
        };
        n = n.max(parse(b)? + 1);
        parse(a)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_to_the_highest_cpu() {
        assert_eq!(parse_cpu_list("0\n").unwrap(), 1);
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), 2);
        assert_eq!(parse_cpu_list("0-3,8-11").unwrap(), 12);
        assert!(parse_cpu_list("zero").is_err());
        assert!(possible_cpus().unwrap() >= 1);
    }
}
