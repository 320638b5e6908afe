//! Wall-clock time as invocation reports, checkpoints and run records give it: milliseconds
//! since the Unix epoch. One definition, so that every timestamp of a run is on the same clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch at `t`, whole (0 for a time before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch now, with the sub-millisecond part (0 before the epoch):
/// for the step times of a run, which are often shorter than a millisecond.
pub fn now_unix_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn both_clocks_agree_and_times_before_the_epoch_are_zero() {
        let whole = unix_ms(SystemTime::now()) as f64;
        let precise = now_unix_ms_f64();
        assert!((precise - whole).abs() < 1_000.0, "{precise} vs {whole}");
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_millis(1_234)), 1_234);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
