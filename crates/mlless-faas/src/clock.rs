//! Wall-clock time as invocation reports, checkpoints and run records give it: milliseconds
//! since the Unix epoch. One definition, so that every timestamp of a run is on the same clock.
//! And the CPU time of the calling thread, for what a function computes with a core of its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// A time of day in UTC, by the proleptic Gregorian calendar: what a message or a signed request
/// shows of a Unix time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// The year.
    pub year: i64,
    /// The month, 1 to 12.
    pub month: i64,
    /// The day of the month, 1 to 31.
    pub day: i64,
    /// The hour, 0 to 23.
    pub hour: u64,
    /// The minute, 0 to 59.
    pub minute: u64,
    /// The second, 0 to 59.
    pub second: u64,
}

impl UtcTime {
    /// The UTC time `unix_s` seconds after the Unix epoch. Written by hand (Howard Hinnant's
    /// `civil_from_days`) rather than with a date crate: a dozen lines for the two places that
    /// print a date.
    pub fn of_unix_s(unix_s: u64) -> UtcTime {
        let (days, rem) = (unix_s / 86_400, unix_s % 86_400);
        let z = i64::try_from(days).unwrap_or(i64::MAX / 2) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        UtcTime {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`), or `None` where the
/// platform has no such clock. The difference of two readings around code that does not await
/// is the CPU time of that code, however many processes share the machine's cores.
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant every Unix
        // that libc supports defines.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| {
            Duration::new(
                u64::try_from(ts.tv_sec).unwrap_or(0),
                u32::try_from(ts.tv_nsec).unwrap_or(0),
            )
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_follow_the_calendar() {
        let t = |s| {
            let u = UtcTime::of_unix_s(s);
            (u.year, u.month, u.day, u.hour, u.minute, u.second)
        };
        assert_eq!(t(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(t(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(t(1_796_451_003), (2026, 12, 5, 6, 10, 3));
    }

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let Some(start) = thread_cpu_time() else {
            return;
        };
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu_time().unwrap_or(start) - start;
        let mut x = 0u64;
        let busy_start = thread_cpu_time().unwrap_or(start);
        let wall = std::time::Instant::now();
        while wall.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let busy = thread_cpu_time().unwrap_or(busy_start) - busy_start;
        assert!(
            slept < Duration::from_millis(15),
            "{slept:?} of CPU while asleep"
        );
        assert!(busy > slept, "busy {busy:?}, asleep {slept:?}");
    }

    #[test]
    fn both_clocks_agree_and_times_before_the_epoch_are_zero() {
        let whole = unix_ms(SystemTime::now()) as f64;
        let precise = now_unix_ms_f64();
        assert!((precise - whole).abs() < 1_000.0, "{precise} vs {whole}");
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_millis(1_234)), 1_234);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
