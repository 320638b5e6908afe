//! Function invokers of mlless: how workers, the supervisor and map tasks are started as
//! functions, limited the way a FaaS platform limits them, and metered.
//!
//! One trait, several backends, one conformance suite (the `object_store` way):
//!
//! - [`Invoker`] starts one invocation of a function from a [`FunctionRequest`] (a name, an
//!   opaque payload and the platform's [`Limits`]) and hands back a running [`Invocation`];
//! - [`Invocation::wait`] ends in an [`InvocationReport`]: when it started, how long it ran, the
//!   memory it was given and the peak it used, and its [`Outcome`] — succeeded, failed, or stopped
//!   by a limit ([`Outcome::MemoryExceeded`], [`Outcome::TimedOut`]) or by its [`KillSwitch`];
//! - [`LocalInvoker`] (the default backend) runs each invocation as a fresh OS process of a given
//!   program, writes the payload to its stdin, and enforces the memory and lifetime caps itself,
//!   so that the limits of DESIGN §7 are exercised on a laptop too;
//! - [`LambdaInvoker`] invokes a function deployed on AWS Lambda through the Invoke API, and
//!   [`lambda::serve`] is the loop that serves invocations inside such a function (feature
//!   `lambda`, on by default);
//! - [`conformance`] holds the suite every backend must pass.
//!
//! A function that fails is not an error of the invoker: it is a report whose outcome is not a
//! success, and [`InvocationReport::describe_failure`] says what happened in one line.
//! [`InvokeError`] is kept for the invoker's own failures (cannot spawn, lost track of the
//! process, …).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use mlless_faas::{FunctionRequest, Invoker, Limits, LocalInvoker};
//!
//! # async fn demo() -> Result<(), mlless_faas::InvokeError> {
//! // `mlless function` reads its JSON payload from stdin.
//! let invoker = LocalInvoker::new("/usr/local/bin/mlless".into(), vec!["function".into()])
//!     .with_env("RUST_LOG", "info");
//! let limits = Limits::new(1024, Duration::from_secs(900));
//! let invocation = invoker
//!     .invoke(FunctionRequest::new("worker-0", br#"{"role":"worker"}"#.to_vec(), limits))
//!     .await?;
//! let stop = invocation.kill_switch(); // e.g. hand to whoever notices another worker failed
//! let report = invocation.wait().await?;
//! match report.describe_failure() {
//!     None => println!("{} took {} ms, peak {:.0} MB", report.name, report.duration_ms, report.peak_rss_mb),
//!     Some(why) => eprintln!("{why}"), // "worker-0 exceeded its memory limit of 1024 MB (peak 1100 MB)"
//! }
//! # drop(stop);
//! # Ok(())
//! # }
//! ```
//!
//! Memory sizes are in MB of 2^20 bytes, as FaaS platforms count them.
//!
//! # Features
//!
//! The remote backend is a cargo feature, on by default; a crate that only needs the trait and
//! the plain types (to hold an `Arc<dyn Invoker>`, read an [`InvocationReport`], test against
//! the [`LocalInvoker`]) can depend on this one with `default-features = false` and build none
//! of its HTTP stack.
//!
//! - `lambda` (default): the AWS Lambda backend, [`LambdaInvoker`] and [`LambdaConfig`], and the
//!   [`lambda`] module with [`serve`](lambda::serve), the loop that serves invocations inside a
//!   deployed function. Brings in `aws-sigv4`, `aws-credential-types`, `reqwest`,
//!   `lambda_runtime`, `http`, `base64` and `serde_json`.
//!
//! Always built: [`Invoker`], [`FunctionRequest`], [`Limits`], [`Invocation`], [`KillSwitch`],
//! [`InvocationReport`], [`Outcome`], [`InvokeError`], [`LocalInvoker`] and [`conformance`].

// The links to the Lambda backend lead nowhere in a build without it.
#![cfg_attr(not(feature = "lambda"), allow(rustdoc::broken_intra_doc_links))]

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub mod clock;
pub mod conformance;
#[cfg(feature = "lambda")]
pub mod lambda;
mod local;
mod output;
mod procfs;

#[cfg(feature = "lambda")]
pub use lambda::{LambdaConfig, LambdaInvoker};
pub use local::{
    DEFAULT_MEMORY_SAMPLE_INTERVAL, LOCAL_FUNCTIONS_PER_CPU, LOCAL_THREADS_PER_FUNCTION,
    LocalInvoker, local_max_concurrent,
};
pub use mlless_io_types::{InvocationReport, Limits, Outcome};

/// What to run: one invocation of a function.
#[derive(Debug, Clone)]
pub struct FunctionRequest {
    /// Name of this invocation, used in logs and reports, e.g. `"worker-3"`, `"supervisor"`.
    pub name: String,
    /// Opaque input of the function (for the `mlless` binary: its JSON job description).
    pub payload: Vec<u8>,
    /// The limits the invocation runs under.
    pub limits: Limits,
}

impl FunctionRequest {
    /// A request to run `name` with `payload` under `limits`.
    pub fn new(name: impl Into<String>, payload: Vec<u8>, limits: Limits) -> Self {
        Self {
            name: name.into(),
            payload,
            limits,
        }
    }
}

/// Starts functions on a platform (local processes, AWS Lambda, …).
///
/// Every backend must pass the suite in [`conformance`].
#[async_trait::async_trait]
pub trait Invoker: Send + Sync + fmt::Debug {
    /// Starts one invocation; returns once it is started (not finished).
    ///
    /// # Errors
    ///
    /// Only the invoker's own failures: an invalid request, a program that cannot be started,
    /// a platform that refuses the call. What the function does once started is in its report.
    async fn invoke(&self, request: FunctionRequest) -> Result<Invocation, InvokeError>;

    /// Name of the platform, e.g. `"local"`.
    fn platform(&self) -> &str;

    /// The most invocations this invoker can run at once, or `None` if it knows no bound
    /// (a FaaS platform's concurrency quota is the platform's to enforce). A job that needs
    /// more functions at once than this is refused before any starts.
    fn max_concurrent(&self) -> Option<u32> {
        None
    }
}

/// An `Arc` or a `Box` of an invoker is that invoker.
macro_rules! forward_invoker {
    ($($pointer:ident),*) => {$(
        #[async_trait::async_trait]
        impl<T: Invoker + ?Sized> Invoker for $pointer<T> {
            async fn invoke(&self, request: FunctionRequest) -> Result<Invocation, InvokeError> {
                (**self).invoke(request).await
            }

            fn platform(&self) -> &str {
                (**self).platform()
            }

            fn max_concurrent(&self) -> Option<u32> {
                (**self).max_concurrent()
            }
        }
    )*};
}

forward_invoker!(Arc, Box);

/// A handle that stops an invocation from elsewhere (e.g. when another worker failed).
///
/// Cheap to clone; killing twice, or killing a finished invocation, does nothing.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    token: CancellationToken,
}

impl KillSwitch {
    /// A switch that has not been pulled yet (for backends that build an [`Invocation`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the invocation to stop now; it ends with [`Outcome::Killed`] unless it already ended.
    pub fn kill(&self) {
        self.token.cancel();
    }

    /// Whether [`kill`](Self::kill) was called.
    pub fn is_killed(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes once [`kill`](Self::kill) is called (what a backend's watcher waits on).
    pub async fn killed(&self) {
        self.token.cancelled().await;
    }
}

/// A running invocation.
///
/// Dropping it does not stop the function (as on a FaaS platform, an invocation runs to its end
/// under its limits); use [`kill_switch`](Self::kill_switch) for that.
#[derive(Debug)]
pub struct Invocation {
    name: String,
    pid: Option<u32>,
    kill_switch: KillSwitch,
    task: JoinHandle<Result<InvocationReport, InvokeError>>,
}

impl Invocation {
    /// Wraps the task that watches an invocation (for backends): `task` must stop the function
    /// and end with [`Outcome::Killed`] once `kill_switch` is pulled.
    pub fn new(
        name: impl Into<String>,
        pid: Option<u32>,
        kill_switch: KillSwitch,
        task: JoinHandle<Result<InvocationReport, InvokeError>>,
    ) -> Self {
        Self {
            name: name.into(),
            pid,
            kill_switch,
            task,
        }
    }

    /// Name of the invocation, as in its [`FunctionRequest`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Process id of the invocation, where the platform has one (local processes).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// A handle that stops the invocation from elsewhere (e.g. when another worker failed).
    pub fn kill_switch(&self) -> KillSwitch {
        self.kill_switch.clone()
    }

    /// Whether the invocation has ended ([`wait`](Self::wait) would not block).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the end and returns its report.
    ///
    /// # Errors
    ///
    /// A failed function is a report with a failed outcome, not an `Err`; `Err` is for the
    /// invoker's own failures (e.g. [`InvokeError::Watcher`] if the task watching the
    /// invocation panicked or its runtime shut down).
    pub async fn wait(self) -> Result<InvocationReport, InvokeError> {
        match self.task.await {
            Ok(result) => result,
            Err(join) => Err(InvokeError::Watcher {
                function: self.name,
                reason: if join.is_panic() {
                    "the task watching it panicked".to_owned()
                } else {
                    "the task watching it was cancelled (runtime shutting down)".to_owned()
                },
            }),
        }
    }
}

/// Failures of an invoker itself (a function that fails is an [`Outcome`], not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvokeError {
    /// The request cannot be run as given (e.g. a zero memory cap).
    #[error("invalid request for function {function}: {reason}")]
    InvalidRequest {
        /// Name of the invocation.
        function: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The process of the function could not be started.
    #[error("could not start function {function}: cannot spawn {}", .program.display())]
    Spawn {
        /// Name of the invocation.
        function: String,
        /// The program that was to run.
        program: PathBuf,
        /// Why the OS refused.
        #[source]
        source: io::Error,
    },
    /// An I/O operation on a running function failed.
    #[error("function {function}: {context}")]
    Io {
        /// Name of the invocation.
        function: String,
        /// What the invoker was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The invoker is not configured to reach its platform (e.g. no credentials).
    #[error("cannot invoke functions: {reason}")]
    Config {
        /// What is missing or wrong.
        reason: String,
    },
    /// The platform refused or failed the call (not the function: e.g. no such function, no
    /// permission, throttled past the retries, unreachable).
    #[error("the platform refused to run function {function}: {message}")]
    Platform {
        /// Name of the invocation.
        function: String,
        /// The HTTP status of the refusal, if there was an answer.
        status: Option<u16>,
        /// The platform's error type and message, or why it could not be reached.
        message: String,
    },
    /// The invoker lost track of a running invocation (its watcher panicked or was cancelled).
    #[error("lost track of function {function}: {reason}")]
    Watcher {
        /// Name of the invocation.
        function: String,
        /// What happened to the watcher.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: Outcome) -> InvocationReport {
        InvocationReport {
            name: "worker-2".into(),
            pid: Some(42),
            started_at_unix_ms: 1,
            duration_ms: 10,
            memory_mb: 128,
            peak_rss_mb: 190.4,
            outcome,
        }
    }

    #[test]
    fn describe_failure_names_function_and_limit() {
        assert_eq!(report(Outcome::Succeeded).describe_failure(), None);
        assert_eq!(
            report(Outcome::MemoryExceeded {
                limit_mb: 128,
                peak_mb: 190.4
            })
            .describe_failure()
            .as_deref(),
            Some("worker-2 exceeded its memory limit of 128 MB (peak 190 MB)")
        );
        assert_eq!(
            report(Outcome::TimedOut { limit_s: 3.0 })
                .describe_failure()
                .as_deref(),
            Some("worker-2 timed out after 3 s")
        );
        assert_eq!(
            report(Outcome::TimedOut { limit_s: 0.5 })
                .describe_failure()
                .as_deref(),
            Some("worker-2 timed out after 0.5 s")
        );
        assert_eq!(
            report(Outcome::Failed {
                exit_code: Some(1),
                message: "no such object: data/manifest.json".into()
            })
            .describe_failure()
            .as_deref(),
            Some("worker-2 failed (exit code 1): no such object: data/manifest.json")
        );
        assert!(
            report(Outcome::Killed)
                .describe_failure()
                .is_some_and(|d| d.starts_with("worker-2 was killed"))
        );
    }

    #[test]
    fn kill_switch_is_shared_between_clones() {
        let a = KillSwitch::new();
        let b = a.clone();
        assert!(!b.is_killed());
        a.kill();
        assert!(b.is_killed());
    }

    #[test]
    fn invoke_error_messages_have_context() {
        let e = InvokeError::Spawn {
            function: "worker-1".into(),
            program: "/no/such/mlless".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(
            e.to_string(),
            "could not start function worker-1: cannot spawn /no/such/mlless"
        );
        assert!(std::error::Error::source(&e).is_some());
    }
}
