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
