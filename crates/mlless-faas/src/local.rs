//! The local backend: each invocation is a fresh OS process, limited like a FaaS function.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::unix_ms;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::output::{self, SharedTail, Stream};
use crate::procfs;
use crate::{
    FunctionRequest, Invocation, InvocationReport, InvokeError, Invoker, KillSwitch, Limits,
    Outcome,
};

/// How often [`LocalInvoker`] samples the resident memory of a function by default.
pub const DEFAULT_MEMORY_SAMPLE_INTERVAL: Duration = Duration::from_millis(20);

/// How long, after the process ended, its output pipes may take to reach their end.
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Runs each invocation as a fresh local OS process of one program, limited like a function.
///
/// `invoke` spawns `program args…` in a process group of its own, writes the payload to its
/// stdin and closes it, forwards each line of its stdout and stderr to `tracing` at debug level
/// (field `function` = the invocation's name) while keeping the last 8 KiB of stderr for the
/// failure message, and watches it:
///
/// - **memory cap**: every [`DEFAULT_MEMORY_SAMPLE_INTERVAL`] (20 ms) it reads the resident set
///   (`VmRSS`) of the process and of all its descendants from `/proc`, and the high-water mark
///   (`VmHWM`) of the process; once either exceeds `limits.memory_mb`, the process group is
///   killed (SIGKILL) and the outcome is [`Outcome::MemoryExceeded`] with the peak. The cap is on
///   *resident* memory, not an `RLIMIT_AS` on address space: a multi-threaded process (a tokio
///   runtime, an allocator's per-thread arenas) reserves far more virtual address space than it
///   uses, so `RLIMIT_AS` would kill honest functions; FaaS platforms, too, limit what is
///   resident. The price of sampling: a spike of a descendant shorter than the sampling period
///   can slip through, and a spike of the process itself is caught (through `VmHWM`) up to one
///   period late. Without `/proc` (not Linux) the cap is not enforced (a warning says so).
/// - **lifetime cap**: the process group is killed once `limits.timeout` has passed since the
///   spawn → [`Outcome::TimedOut`].
/// - **kill switch** → SIGKILL → [`Outcome::Killed`].
/// - exit code 0 → [`Outcome::Succeeded`]; otherwise [`Outcome::Failed`] with the exit code (or
///   the signal) and the last non-empty lines of stderr.
///
/// When the process ends, whatever it left running in its process group is killed too (a FaaS
/// sandbox does not outlive its invocation). On Linux, a function also dies with the process of
/// the invoker, even if that is killed with SIGKILL (`PR_SET_PDEATHSIG`; for that the processes
/// are forked from one long-lived thread, since the signal follows the *thread* that forked).
/// Grandchildren are not covered by that last guarantee.
///
/// The report's duration runs from just before the spawn to the exit, so it includes the
/// start-up of the process, as a cold start is billed on a FaaS platform.
#[derive(Debug, Clone)]
pub struct LocalInvoker {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    sample_interval: Duration,
}

impl LocalInvoker {
    /// An invoker that runs `program` with `args` (the payload goes to its stdin).
    ///
    /// The processes inherit the environment of the invoker, plus [`with_env`](Self::with_env).
    pub fn new(program: PathBuf, args: Vec<String>) -> Self {
        Self {
            program,
            args,
            env: Vec::new(),
            sample_interval: DEFAULT_MEMORY_SAMPLE_INTERVAL,
        }
    }

    /// Sets an environment variable for every process this invoker starts.
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Samples resident memory every `every` instead of [`DEFAULT_MEMORY_SAMPLE_INTERVAL`]
    /// (at least 1 ms): shorter catches shorter spikes, at more CPU per running function.
    pub fn with_memory_sample_interval(mut self, every: Duration) -> Self {
        self.sample_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The program every invocation runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The arguments given to the program.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        // glibc's malloc gives freed memory back to the system at once (trimming the top of the
        // heap, unmapping blocks above its threshold) and faults it in again at the next step: a
        // worker's step allocates and frees the same few buffers over and over (ML-100k-shaped
        // PMF at P = 4 on two cores: a fifth of the CPU went to those page faults, and the step
        // took 3.6–4.7 ms against 2.7–3.1 ms with these). They are kept instead; a variable the
        // user set wins, and other allocators ignore them.
        for (variable, value) in MALLOC_KEEPS_MEMORY {
            if std::env::var_os(variable).is_none() {
                cmd.env(variable, value);
            }
        }
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own group, so that a kill takes its children along, and so that a Ctrl-C
            // meant for the driver does not reach it behind the invoker's back.
            .process_group(0);
        cmd
    }
}

/// The glibc tunables every local function runs with (see [`LocalInvoker`]'s `command`):
/// memory is trimmed from the top of the heap only once 256 MB are free there, and only blocks of
/// 64 MB or more get their own mapping.
const MALLOC_KEEPS_MEMORY: [(&str, &str); 2] = [
    ("MALLOC_TRIM_THRESHOLD_", "268435456"),
    ("MALLOC_MMAP_THRESHOLD_", "67108864"),
];

#[async_trait::async_trait]
impl Invoker for LocalInvoker {
    async fn invoke(&self, request: FunctionRequest) -> Result<Invocation, InvokeError> {
        let FunctionRequest {
            name,
            payload,
            limits,
        } = request;
        validate(&name, &limits)?;

        let started_at_unix_ms = unix_ms(SystemTime::now());
        let t0 = Instant::now();
        let mut child =
            spawner::spawn(self.command())
                .await
                .map_err(|source| InvokeError::Spawn {
                    function: name.clone(),
                    program: self.program.clone(),
                    source,
                })?;
        let io_error = |context: &str| InvokeError::Io {
            function: name.clone(),
            context: context.to_owned(),
            source: io::Error::other("not available right after spawn"),
        };
        // Dropping `child` on these error paths kills it (kill_on_drop).
        let pid = child
            .id()
            .ok_or_else(|| io_error("reading the process id"))?;
        let group = GroupGuard { pgid: pid };
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| io_error("opening stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io_error("opening stdout"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| io_error("opening stderr"))?;
        tracing::debug!(function = %name, pid, program = %self.program.display(), "function started");

        let function: Arc<str> = Arc::from(name.as_str());
        let stdin_task = {
            let function = function.clone();
            tokio::spawn(async move {
                // A function may exit without reading its input: a broken pipe is not an error.
                if let Err(e) = stdin.write_all(&payload).await {
                    tracing::debug!(function = %function, error = %e, "payload not fully written");
                }
                // Dropping `stdin` closes it: the function sees the end of its input.
            })
        };
        let tail = SharedTail::default();
        let stdout_task = tokio::spawn(output::forward(
            stdout,
            function.clone(),
            Stream::Stdout,
            None,
        ));
        let stderr_task = tokio::spawn(output::forward(
            stderr,
            function.clone(),
            Stream::Stderr,
            Some(tail.clone()),
        ));

        let kill_switch = KillSwitch::new();
        let watch = Watch {
            name: name.clone(),
            child,
            group,
            limits,
            started_at_unix_ms,
            t0,
            kill_switch: kill_switch.clone(),
            sample_interval: self.sample_interval,
            tasks: [stdin_task, stdout_task, stderr_task],
            tail,
        };
        Ok(Invocation::new(
            name,
            Some(pid),
            kill_switch,
            tokio::spawn(watch.run()),
        ))
    }

    fn platform(&self) -> &str {
        "local"
    }

    /// [`local_max_concurrent`]: the bound of the CPUs and of the process limit.
    fn max_concurrent(&self) -> Option<u32> {
        Some(local_max_concurrent())
    }
}

/// How many local functions may run at once per CPU. Each one is a process with a runtime of
/// its own; beyond a few dozen per core a step is scheduling, not training, and a fleet that
/// size is a typo (`--workers 100000` spawned 243 processes on a 2-core machine before the
/// 244th failed with `EAGAIN`, after the run had started).
pub const LOCAL_FUNCTIONS_PER_CPU: u32 = 32;

/// The threads a local function counts against `RLIMIT_NPROC` (which Linux counts in
/// threads): 15 to 23 were measured per `mlless function` process of a training job (its
/// runtime's 2 workers, the blocking pool of the object store and the reader), so 24.
pub const LOCAL_THREADS_PER_FUNCTION: u64 = 24;

/// The most local functions that run at once on this machine: [`LOCAL_FUNCTIONS_PER_CPU`] per
/// CPU available to this process, and no more than the soft `RLIMIT_NPROC` leaves room for at
/// [`LOCAL_THREADS_PER_FUNCTION`] threads each (unlimited: no bound from it). At least 1.
pub fn local_max_concurrent() -> u32 {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let by_cpus = u32::try_from(cpus)
        .unwrap_or(u32::MAX)
        .saturating_mul(LOCAL_FUNCTIONS_PER_CPU);
    let by_processes = process_limit()
        .map(|n| u32::try_from(n / LOCAL_THREADS_PER_FUNCTION).unwrap_or(u32::MAX))
        .unwrap_or(u32::MAX);
    by_cpus.min(by_processes).max(1)
}

/// The soft `RLIMIT_NPROC` of this process, `None` if unlimited or unknown.
fn process_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer to it.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) };
    (r == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Rejects requests no platform would run.
fn validate(name: &str, limits: &Limits) -> Result<(), InvokeError> {
    let reason = if name.trim().is_empty() {
        "a function needs a name"
    } else if limits.memory_mb == 0 {
        "the memory limit must be at least 1 MB"
    } else if limits.timeout.is_zero() {
        "the timeout must be longer than zero"
    } else {
        return Ok(());
    };
    Err(InvokeError::InvalidRequest {
        function: name.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Everything the watcher of one invocation owns.
struct Watch {
    name: String,
    child: Child,
    group: GroupGuard,
    limits: Limits,
    started_at_unix_ms: u64,
    t0: Instant,
    kill_switch: KillSwitch,
    sample_interval: Duration,
    /// Writer of stdin, readers of stdout and stderr.
    tasks: [JoinHandle<()>; 3],
    tail: SharedTail,
}

impl Watch {
    /// Watches the process to its end, enforcing the limits, and reports.
    async fn run(self) -> Result<InvocationReport, InvokeError> {
        let Watch {
            name,
            mut child,
            group,
            limits,
            started_at_unix_ms,
            t0,
            kill_switch,
            sample_interval,
            mut tasks,
            tail,
        } = self;
        let pid = group.pgid;
        let limit_kib = u64::from(limits.memory_mb) * 1024;
        let watch_memory = procfs::supported();
        if !watch_memory {
            warn_memory_unwatched();
        }
        let deadline = t0
            .checked_add(limits.timeout)
            .unwrap_or_else(|| t0 + Duration::from_secs(100 * 365 * 86_400));
        let timeout = tokio::time::sleep_until(deadline);
        tokio::pin!(timeout);
        let mut ticker = tokio::time::interval(sample_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);

        let mut peak_kib = 0u64;
        let mut verdict: Option<Outcome> = None;
        // Futures made once, not per turn of the loop: the watcher wakes up 50 times a second.
        let exited = child.wait();
        tokio::pin!(exited);
        let killed = kill_switch.killed();
        tokio::pin!(killed);
        let status = loop {
            tokio::select! {
                biased;
                status = &mut exited => break status,
                () = &mut killed, if verdict.is_none() => {
                    group.kill();
                    verdict = Some(Outcome::Killed);
                }
                () = &mut timeout, if verdict.is_none() => {
                    group.kill();
                    verdict = Some(Outcome::TimedOut { limit_s: limits.timeout.as_secs_f64() });
                }
                _ = ticker.tick(), if verdict.is_none() && watch_memory => {
                    if let Some(reading) = procfs::read_tree(pid) {
                        peak_kib = peak_kib.max(reading.total_rss_kib).max(reading.root_hwm_kib);
                        if reading.total_rss_kib > limit_kib || reading.root_hwm_kib > limit_kib {
                            group.kill();
                            verdict = Some(Outcome::MemoryExceeded {
                                limit_mb: limits.memory_mb,
                                peak_mb: kib_to_mb(peak_kib),
                            });
                        }
                    }
                }
            }
        };
        let duration = t0.elapsed();
        // Whatever the function left running goes with it; that also closes the pipes it held.
        group.kill_leftovers();

        let status = status.map_err(|source| InvokeError::Io {
            function: name.clone(),
            context: format!("waiting for process {pid} failed"),
            source,
        })?;
        let drained = tokio::time::timeout(OUTPUT_GRACE, async {
            for task in &mut tasks[1..] {
                let _ = task.await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::debug!(function = %name, pid, "output still open after the exit; dropped");
        }
        for task in &tasks {
            task.abort();
        }

        let outcome = match verdict {
            Some(outcome) => outcome,
            None if status.success() => Outcome::Succeeded,
            None => {
                let stderr = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .message();
                Outcome::Failed {
                    exit_code: status.code(),
                    message: failure_message(status, stderr),
                }
            }
        };
        let duration_ms = u64::try_from(duration.as_micros().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1);
        tracing::debug!(function = %name, pid, duration_ms, peak_kib, %outcome, "function ended");
        Ok(InvocationReport {
            name,
            pid: Some(pid),
            started_at_unix_ms,
            duration_ms,
            memory_mb: limits.memory_mb,
            peak_rss_mb: kib_to_mb(peak_kib),
            outcome,
        })
    }
}

/// The message of a process that failed on its own: its stderr, and the signal if one ended it.
fn failure_message(status: ExitStatus, stderr: Option<String>) -> String {
    let Some(signal) = status.signal() else {
        return stderr.unwrap_or_else(|| "(nothing on stderr)".to_owned());
    };
    let mut message = format!("terminated by signal {signal}");
    if let Some(name) = signal_name(signal) {
        message.push_str(" (");
        message.push_str(name);
        message.push(')');
    }
    if signal == libc::SIGKILL {
        message.push_str(", perhaps by the kernel's out-of-memory killer");
    }
    if let Some(stderr) = stderr {
        message.push_str(": ");
        message.push_str(&stderr);
    }
    message
}

/// Name of a common signal.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// KiB to MB (2^20 bytes).
fn kib_to_mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
/// Warns, once per process, that memory caps are not enforced on this platform.
fn warn_memory_unwatched() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "no /proc on this platform: memory limits of local functions are not enforced"
        );
    });
}

/// The process group of one function; kills it when dropped, so that a function does not outlive
/// its watcher (e.g. when the runtime shuts down mid-invocation).
struct GroupGuard {
    pgid: u32,
}

impl GroupGuard {
    /// Kills the whole group now (SIGKILL); falls back to the leader alone if that fails.
    ///
    /// Only called before the leader is reaped, so its pid cannot have been reused.
    fn kill(&self) {
        if let Err(e) = kill_group(self.pgid) {
            tracing::warn!(pgid = self.pgid, error = %e, "killing the process group failed; killing its leader");
            if let Err(e) = kill_process(self.pgid) {
                tracing::warn!(pid = self.pgid, error = %e, "killing the process failed");
            }
        }
    }

    /// Kills what is left of the group after its leader ended, and disarms the guard.
    fn kill_leftovers(self) {
        // `drop` does the work.
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Err(e) = kill_group(self.pgid) {
            tracing::debug!(pgid = self.pgid, error = %e, "cleaning up the process group failed");
        }
    }
}

/// Sends SIGKILL to process group `pgid`; a group that no longer exists is not an error.
fn kill_group(pgid: u32) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid).map_err(io::Error::other)?;
    if pgid <= 1 {
        return Err(io::Error::other("refusing to signal process group <= 1"));
    }
    send_sigkill(-pgid)
}

/// Sends SIGKILL to process `pid`; a process that no longer exists is not an error.
fn kill_process(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    if pid <= 1 {
        return Err(io::Error::other("refusing to signal process <= 1"));
    }
    send_sigkill(pid)
}

/// `kill(target, SIGKILL)`, with ESRCH (nothing to kill) as success.
fn send_sigkill(target: libc::pid_t) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions; a negative target addresses a group.
    if unsafe { libc::kill(target, libc::SIGKILL) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Spawning from one long-lived thread, so that `PR_SET_PDEATHSIG` ties the functions to the
/// life of the invoker's process rather than to whichever thread happened to fork them (tokio
/// retires idle blocking threads; a child would then die for no reason).
#[cfg(target_os = "linux")]
mod spawner {
    use std::io;
    use std::sync::OnceLock;
    use std::sync::mpsc;

    use tokio::process::{Child, Command};
    use tokio::runtime::Handle;
    use tokio::sync::oneshot;

    struct Job {
        cmd: Command,
        runtime: Handle,
        reply: oneshot::Sender<io::Result<Child>>,
    }

    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

    /// Starts the spawner thread, or `None` if the OS refuses a thread.
    fn start() -> Option<mpsc::Sender<Job>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("mlless-faas-spawner".into())
            .spawn(move || {
                // Runs as long as the process: `SPAWNER` holds the sender forever.
                while let Ok(Job {
                    mut cmd,
                    runtime,
                    reply,
                }) = rx.recv()
                {
                    let _entered = runtime.enter();
                    set_parent_death_signal(&mut cmd);
                    // If the caller is gone, the child is dropped here and killed (kill_on_drop).
                    let _ = reply.send(cmd.spawn());
                }
            });
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the spawner thread; functions will not die with the invoker");
                None
            }
        }
    }

    /// Spawns `cmd` on the spawner thread (or here, if there is none).
    pub(super) async fn spawn(mut cmd: Command) -> io::Result<Child> {
        let runtime = Handle::try_current().map_err(io::Error::other)?;
        let Some(spawner) = SPAWNER.get_or_init(start) else {
            return cmd.spawn();
        };
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::SendError(mut job)) = spawner.send(Job {
            cmd,
            runtime,
            reply,
        }) {
            return job.cmd.spawn();
        }
        answer
            .await
            .map_err(|_| io::Error::other("the spawner thread is gone"))?
    }

    /// Makes the child die (SIGKILL) when the thread that forked it — the spawner — dies, i.e.
    /// with the invoker's process.
    fn set_parent_death_signal(cmd: &mut Command) {
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec; it only makes async-signal-safe system
        // calls (prctl, getppid) and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The invoker died between fork and prctl: nobody is left to watch us.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

/// Without `PR_SET_PDEATHSIG`, spawning where we are is as good as anywhere.
#[cfg(not(target_os = "linux"))]
mod spawner {
    use tokio::process::{Child, Command};

    /// Spawns `cmd` on the calling thread.
    pub(super) async fn spawn(mut cmd: Command) -> std::io::Result<Child> {
        cmd.spawn()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_validated() {
        let ok = Limits::new(128, Duration::from_secs(1));
        assert!(validate("worker-0", &ok).is_ok());
        assert!(matches!(
            validate("", &ok),
            Err(InvokeError::InvalidRequest { .. })
        ));
        assert!(validate("w", &Limits::new(0, Duration::from_secs(1))).is_err());
        assert!(validate("w", &Limits::new(128, Duration::ZERO)).is_err());
    }

    #[test]
    fn signal_failures_say_which_signal() {
        let segv = ExitStatus::from_raw(libc::SIGSEGV);
        assert_eq!(
            failure_message(segv, Some("last words".into())),
            "terminated by signal 11 (SIGSEGV): last words"
        );
        let code = ExitStatus::from_raw(3 << 8);
        assert_eq!(failure_message(code, None), "(nothing on stderr)");
    }

    #[test]
    fn kill_group_ignores_missing_groups_and_refuses_init() {
        assert!(kill_group(2_000_000_000).is_ok()); // beyond any pid_max: no such group
        assert!(kill_group(1).is_err());
        assert!(kill_group(0).is_err());
    }
}
