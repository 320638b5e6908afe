//! The conformance suite every [`Invoker`] must pass (like `object_store`'s `integration`).
//!
//! Each function takes the invoker under test, runs one or a few invocations, and panics with a
//! readable message when the backend misbehaves. A backend is done when its tests call all of
//! them (or [`run_all`]). They are safe to run in parallel with each other and with other tests:
//! they share no files, and their time bounds are generous (a 1 s timeout may take up to ~4 s to
//! be reported), because tests run on loaded machines.
//!
//! # The test function's protocol
//!
//! The invoker's program is arbitrary, so the suite asks it for a behaviour through the payload.
//! The function under test must implement this protocol (see [`Behaviour::payload`]): the payload
//! is one command line, ended by `\n`, possibly followed by data; the command's words are
//! separated by single spaces:
//!
//! | command | the function must |
//! | --- | --- |
//! | `succeed` | exit successfully |
//! | `fail <code> <message…>` | write a line of its choice, then `<message…>` as the last line of stderr, and exit with code `<code>` |
//! | `check <length> <adler32>` | read the data after the command line to its end; exit successfully if it is `<length>` bytes long and its Adler-32 checksum (RFC 1950, decimal) is `<adler32>`; otherwise say so on stderr and fail |
//! | `sleep <seconds>` | sleep that long (a decimal number), then exit successfully |
//! | `alloc <mb> <seconds>` | hold `<mb>` MB (2^20 bytes) of resident memory for `<seconds>`, then exit successfully |
//!
//! [`SH_PROTOCOL_SCRIPT`] implements it for `/bin/sh` (with `od`, `awk`, `sleep` and `python3`),
//! and [`local_sh_invoker`] is a [`LocalInvoker`] that runs it. A cloud backend deploys a
//! function that implements the same protocol.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use crate::clock::unix_ms;

use crate::{
    FunctionRequest, Invocation, InvocationReport, Invoker, Limits, LocalInvoker, Outcome,
};

/// A `/bin/sh` script implementing the protocol of this module (the payload comes on stdin).
///
/// Run it as `sh -c SH_PROTOCOL_SCRIPT name`; it needs `od`, `awk`, `sleep` and (for `alloc`)
/// `python3` on the `PATH`. `alloc` runs python as a child of the shell, so it also checks that
/// an invoker counts the memory of a function's child processes.
pub const SH_PROTOCOL_SCRIPT: &str = r#"
set -f
IFS= read -r line || [ -n "$line" ] || { echo "mlless-conformance: empty payload" >&2; exit 64; }
set -- $line
case "$1" in
succeed)
  exit 0 ;;
fail)
  code=$2; shift 2
  echo "mlless-conformance: failing on purpose with exit code $code" >&2
  printf '%s\n' "$*" >&2
  exit "$code" ;;
check)
  got=$(od -An -v -tu1 | awk 'BEGIN { a = 1; b = 0; n = 0 }
    { for (i = 1; i <= NF; i++) { a = (a + $i) % 65521; b = (b + a) % 65521; n++ } }
    END { printf "%.0f %.0f", n, b * 65536 + a }')
  if [ "$got" = "$2 $3" ]; then exit 0; fi
  echo "payload mismatch: expected $2 bytes with Adler-32 $3, got (bytes, Adler-32) $got" >&2
  exit 1 ;;
sleep)
  sleep "$2"
  exit 0 ;;
alloc)
  python3 -c 'import sys, time; b = b"x" * (int(sys.argv[1]) << 20); time.sleep(float(sys.argv[2]))' "$2" "$3"
  exit $? ;;
*)
  echo "mlless-conformance: unknown command: $1" >&2
  exit 64 ;;
esac
"#;

/// A [`LocalInvoker`] running [`SH_PROTOCOL_SCRIPT`] with `/bin/sh`.
pub fn local_sh_invoker() -> LocalInvoker {
    LocalInvoker::new(
        "/bin/sh".into(),
        vec![
            "-c".into(),
            SH_PROTOCOL_SCRIPT.into(),
            "mlless-conformance".into(),
        ],
    )
}

/// A behaviour asked of the function under test (one command of the protocol).
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// `succeed`.
    Succeed,
    /// `fail <exit_code> <message>` (newlines in `message` become spaces).
    Fail {
        /// The exit code to end with.
        exit_code: u8,
        /// The last line to write on stderr.
        message: String,
    },
    /// `check <length> <adler32>` followed by `data`.
    Check {
        /// The data to send and have checked.
        data: Vec<u8>,
    },
    /// `sleep <seconds>`.
    Sleep {
        /// How long to sleep.
        seconds: f64,
    },
    /// `alloc <mb> <seconds>`.
    Alloc {
        /// How much resident memory to hold, in MB.
        mb: u32,
        /// For how long.
        seconds: f64,
    },
}

impl Behaviour {
    /// The payload that asks for this behaviour.
    pub fn payload(&self) -> Vec<u8> {
        match self {
            Behaviour::Succeed => b"succeed\n".to_vec(),
            Behaviour::Fail { exit_code, message } => {
                let message = message.replace(['\n', '\r'], " ");
                format!("fail {exit_code} {message}\n").into_bytes()
            }
            Behaviour::Check { data } => {
                let mut payload = format!("check {} {}\n", data.len(), adler32(data)).into_bytes();
                payload.extend_from_slice(data);
                payload
            }
            Behaviour::Sleep { seconds } => format!("sleep {seconds}\n").into_bytes(),
            Behaviour::Alloc { mb, seconds } => format!("alloc {mb} {seconds}\n").into_bytes(),
        }
    }
}

/// Adler-32 checksum of `data` (RFC 1950), as the `check` command expects it.
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before a u32 could overflow.
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// Memory given to functions whose test is not about memory (Lambda's minimum is 128 MB).
const MEMORY_MB: u32 = 256;
/// Lifetime given to functions whose test is not about timeouts.
const LONG: Duration = Duration::from_secs(120);
/// How much longer than its own timeout an invocation may take before the suite gives up on it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// Invokes `behaviour` as `name`, panicking if the invoker cannot.
async fn start(
    invoker: &dyn Invoker,
    name: &str,
    behaviour: &Behaviour,
    limits: Limits,
) -> Invocation {
    let request = FunctionRequest::new(name, behaviour.payload(), limits);
    match invoker.invoke(request).await {
        Ok(invocation) => {
            assert_eq!(invocation.name(), name, "Invocation::name");
            invocation
        }
        Err(e) => panic!(
            "{} invoker could not start {name} ({behaviour:?}): {e} ({e:?})",
            invoker.platform()
        ),
    }
}

/// Waits for `invocation`, panicking on an invoker error or if it never ends.
async fn finish(invocation: Invocation, limits: Limits) -> InvocationReport {
    let name = invocation.name().to_owned();
    match tokio::time::timeout(limits.timeout + GIVE_UP_AFTER, invocation.wait()).await {
        Ok(Ok(report)) => {
            assert_eq!(report.name, name, "report names its invocation");
            assert_eq!(
                report.memory_mb, limits.memory_mb,
                "report carries the configured memory"
            );
            assert!(
                report.peak_rss_mb.is_finite() && report.peak_rss_mb >= 0.0,
                "peak_rss_mb of {name} is {}",
                report.peak_rss_mb
            );
            report
        }
        Ok(Err(e)) => panic!("waiting for {name} failed: {e} ({e:?})"),
        Err(_) => panic!(
            "{name} did not end within its timeout ({:?}) + {GIVE_UP_AFTER:?}",
            limits.timeout
        ),
    }
}

/// Runs `behaviour` to its end.
async fn run(
    invoker: &dyn Invoker,
    name: &str,
    behaviour: Behaviour,
    limits: Limits,
) -> InvocationReport {
    let invocation = start(invoker, name, &behaviour, limits).await;
    finish(invocation, limits).await
}

/// A function that succeeds is reported as such, with a plausible start, a duration, its pid
/// (where the platform has pids) and no failure description.
pub async fn succeeds_and_reports(invoker: &dyn Invoker) {
    let limits = Limits::new(MEMORY_MB, LONG);
    let before = unix_ms(SystemTime::now());
    let invocation = start(invoker, "conformance-succeeds", &Behaviour::Succeed, limits).await;
    let pid = invocation.pid();
    let report = finish(invocation, limits).await;
    let after = unix_ms(SystemTime::now());

    assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    assert!(report.outcome.is_success());
    assert_eq!(report.describe_failure(), None, "{report:?}");
    assert!(
        report.duration_ms > 0,
        "duration must be positive: {report:?}"
    );
    if pid.is_some() {
        assert_eq!(report.pid, pid, "report and invocation agree on the pid");
    }
    // Clocks of a remote platform may be a little off: allow a second either way.
    assert!(
        report.started_at_unix_ms + 1_000 >= before && report.started_at_unix_ms <= after + 1_000,
        "started_at_unix_ms {} not within [{before}, {after}]",
        report.started_at_unix_ms
    );
    assert!(
        report.started_at_unix_ms + report.duration_ms <= after + 1_000,
        "the invocation cannot end after wait() returned: {report:?} (now {after})"
    );
    assert!(
        report.duration_ms <= after.saturating_sub(before) + 1_000,
        "duration longer than the whole call: {report:?}"
    );
}

/// The payload reaches the function byte for byte: binary data with every byte value and many
/// newlines, larger than a pipe's buffer, and an empty one.
pub async fn payload_reaches_function(invoker: &dyn Invoker) {
    let limits = Limits::new(MEMORY_MB, LONG);
    let mut data: Vec<u8> = (0..=255u8).collect();
    let mut x = 0x2545_f491_u32;
    data.extend((0..256 * 1024).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x.to_le_bytes()[0]
    }));
    for (name, data) in [
        ("conformance-payload-256k", data),
        ("conformance-payload-empty", Vec::new()),
    ] {
        let len = data.len();
        let report = run(invoker, name, Behaviour::Check { data }, limits).await;
        assert_eq!(
            report.outcome,
            Outcome::Succeeded,
            "a payload of {len} bytes did not arrive intact: {:?}",
            report.describe_failure()
        );
    }
}

/// A function that fails carries its exit code (where the platform has them) and its last line of
/// stderr into the outcome and into [`InvocationReport::describe_failure`].
pub async fn failure_carries_message(invoker: &dyn Invoker) {
    let limits = Limits::new(MEMORY_MB, LONG);
    let message = "conformance: the minibatch store is on fire";
    let name = "conformance-fails";
    let report = run(
        invoker,
        name,
        Behaviour::Fail {
            exit_code: 3,
            message: message.into(),
        },
        limits,
    )
    .await;
    match &report.outcome {
        Outcome::Failed {
            exit_code,
            message: got,
        } => {
            assert!(
                exit_code.is_none_or(|code| code == 3),
                "exit code 3 expected, got {exit_code:?}"
            );
            assert!(got.contains(message), "message {got:?} lacks {message:?}");
        }
        other => panic!("{name} should have failed, got {other:?}"),
    }
    assert!(!report.outcome.is_success());
    let described = report.describe_failure().expect("a failure is described");
    assert!(
        described.starts_with(name) && described.contains(message),
        "describe_failure() = {described:?}"
    );
}

/// A function that runs past its timeout is stopped soon after it and reported as timed out.
pub async fn timeout_is_enforced(invoker: &dyn Invoker) {
    let limits = Limits::new(MEMORY_MB, Duration::from_secs(1));
    let started = tokio::time::Instant::now();
    let report = run(
        invoker,
        "conformance-times-out",
        Behaviour::Sleep { seconds: 60.0 },
        limits,
    )
    .await;
    let wall = started.elapsed();
    assert_eq!(
        report.outcome,
        Outcome::TimedOut { limit_s: 1.0 },
        "{report:?}"
    );
    assert!(
        wall < limits.timeout + Duration::from_millis(3_500),
        "a 1 s timeout took {wall:?} to be reported"
    );
    assert!(
        report.duration_ms >= 900,
        "stopped before its timeout: {report:?}"
    );
    let described = report.describe_failure().expect("a timeout is a failure");
    assert!(
        described.contains("conformance-times-out") && described.contains("timed out after 1 s"),
        "describe_failure() = {described:?}"
    );
}

/// A function that holds more memory than its cap is stopped and reported with its peak.
pub async fn memory_cap_is_enforced(invoker: &dyn Invoker) {
    let limits = Limits::new(128, LONG);
    let started = tokio::time::Instant::now();
    let report = run(
        invoker,
        "conformance-memory-hog",
        Behaviour::Alloc {
            mb: 512,
            seconds: 60.0,
        },
        limits,
    )
    .await;
    let wall = started.elapsed();
    match report.outcome {
        Outcome::MemoryExceeded { limit_mb, peak_mb } => {
            assert_eq!(limit_mb, 128);
            assert!(peak_mb > 128.0, "peak {peak_mb} MB is within the cap");
        }
        ref other => panic!("memory hog should have been stopped, got {other:?}"),
    }
    assert!(report.peak_rss_mb > 128.0, "{report:?}");
    assert!(
        wall < Duration::from_secs(30),
        "took {wall:?}: the hog was not stopped early"
    );
    let described = report
        .describe_failure()
        .expect("a memory excess is a failure");
    assert!(
        described.contains("conformance-memory-hog")
            && described.contains("memory limit of 128 MB"),
        "describe_failure() = {described:?}"
    );
}

/// The kill switch, pulled from another task, stops a running function quickly.
pub async fn kill_switch_stops(invoker: &dyn Invoker) {
    let limits = Limits::new(MEMORY_MB, LONG);
    let invocation = start(
        invoker,
        "conformance-killed",
        &Behaviour::Sleep { seconds: 60.0 },
        limits,
    )
    .await;
    let switch = invocation.kill_switch();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        switch.kill();
        switch.kill(); // twice is harmless
        tokio::time::Instant::now()
    });
    let report = finish(invocation, limits).await;
    let ended = tokio::time::Instant::now();
    let killed_at = killer.await.expect("killer task");
    assert_eq!(report.outcome, Outcome::Killed, "{report:?}");
    assert!(
        ended.duration_since(killed_at) < Duration::from_secs(3),
        "took {:?} to stop after the kill",
        ended.duration_since(killed_at)
    );
    assert!(report.describe_failure().is_some());
}

/// Four invocations started together are four separate processes (distinct pids, where the
/// platform has pids) that run at the same time: their lifetimes overlap, and together they take
/// less than they would one after another.
pub async fn invocations_are_separate_processes(invoker: &dyn Invoker) {
    const N: usize = 4;
    let seconds = 1.5;
    let limits = Limits::new(MEMORY_MB, LONG);
    let started = tokio::time::Instant::now();
    let mut invocations = Vec::new();
    for i in 0..N {
        let name = format!("conformance-concurrent-{i}");
        invocations.push(start(invoker, &name, &Behaviour::Sleep { seconds }, limits).await);
    }
    let mut reports = Vec::new();
    for invocation in invocations {
        reports.push(finish(invocation, limits).await);
    }
    let wall = started.elapsed();

    for report in &reports {
        assert_eq!(report.outcome, Outcome::Succeeded, "{report:?}");
    }
    let pids: Vec<u32> = reports.iter().filter_map(|r| r.pid).collect();
    let distinct: HashSet<u32> = pids.iter().copied().collect();
    assert_eq!(distinct.len(), pids.len(), "pids repeat: {pids:?}");
    let last_start = reports.iter().map(|r| r.started_at_unix_ms).max();
    let first_end = reports
        .iter()
        .map(|r| r.started_at_unix_ms + r.duration_ms)
        .min();
    assert!(
        last_start < first_end,
        "the invocations did not all run at the same time: {reports:?}"
    );
    let sequential = Duration::from_secs_f64(seconds * N as f64);
    assert!(
        wall < sequential,
        "{N} concurrent invocations of {seconds} s took {wall:?}, as long as one after another"
    );
}

/// Runs the whole suite, one test after another.
pub async fn run_all(invoker: &dyn Invoker) {
    succeeds_and_reports(invoker).await;
    payload_reaches_function(invoker).await;
    failure_carries_message(invoker).await;
    timeout_is_enforced(invoker).await;
    memory_cap_is_enforced(invoker).await;
    kill_switch_stops(invoker).await;
    invocations_are_separate_processes(invoker).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_matches_rfc1950() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        let big = vec![0xffu8; 100_000];
        // Reference: the naive definition, mod 65521 at every step.
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &big {
            a = (a + u64::from(x)) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(u64::from(adler32(&big)), (b << 16) | a);
    }

    #[test]
    fn payloads_follow_the_protocol() {
        assert_eq!(Behaviour::Succeed.payload(), b"succeed\n");
        assert_eq!(
            Behaviour::Fail {
                exit_code: 3,
                message: "a\nb".into()
            }
            .payload(),
            b"fail 3 a b\n"
        );
        assert_eq!(
            Behaviour::Check {
                data: b"xy".to_vec()
            }
            .payload(),
            format!("check 2 {}\nxy", adler32(b"xy")).into_bytes()
        );
        assert_eq!(Behaviour::Sleep { seconds: 1.5 }.payload(), b"sleep 1.5\n");
        assert_eq!(
            Behaviour::Alloc {
                mb: 512,
                seconds: 60.0
            }
            .payload(),
            b"alloc 512 60\n"
        );
    }
}
