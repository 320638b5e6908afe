//! The commands of `mlless`, as a library: the `mlless` binary parses its command line and runs
//! them, and an embedding (the Python package, `crates/mlless-python`) runs the same commands'
//! options, checks and progress through it.
//!
//! The binary is also the function: the local invoker runs `mlless function` with a payload on
//! standard input for every worker, supervisor and map task ([`run_function_main`]), and inside
//! the AWS Lambda runtime it serves the same payloads as Lambda invocations ([`serve_lambda`]).
//! An embedding whose executable is not `mlless` says what its local functions run with
//! [`set_function_command`].

pub mod bench;
pub mod cost;
pub mod demo;
pub mod generate;
pub mod plan;
pub mod predict;
pub mod prepare;
pub mod progress;
pub mod ps;
pub mod reference;
pub mod report;
pub mod runs;
pub mod summary;
pub mod train;
pub mod tune;

use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// The value parser of every option in seconds (`flag`, e.g. `--max-time`): a number in
/// `range` and at most [`mlless_job::config::MAX_SECONDS`], checked as the job's spec is
/// ([`mlless_job::config::check_seconds`]), so that no duration can overflow a clock.
pub fn seconds(
    flag: &'static str,
    range: mlless_job::config::SecondsRange,
) -> impl clap::builder::TypedValueParser<Value = f64> {
    use clap::builder::TypedValueParser;
    clap::builder::StringValueParser::new().try_map(move |text| {
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|&value| mlless_job::config::check_seconds(flag, value, range).is_ok())
            .ok_or_else(|| {
                format!(
                    "{flag} must be {} (at most 1e9, about 31 years), not {text}",
                    range.describe()
                )
            })
    })
}

/// `error` and its causes on one line, each said once. Many errors (ours, `object_store`'s)
/// repeat their source's message in their own, as a complete message for logs that print only
/// the error; a cause whose message the line holds already is left out, so that no cause is
/// said twice ("X: X").
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// A function's failure as its invoker reads it: [`one_line`], ending with
/// [`mlless_runtime::NOT_RESUMABLE`] when resuming the run could not get past it.
pub fn function_failure(error: &anyhow::Error) -> String {
    let mut line = one_line(error);
    if error
        .downcast_ref::<mlless_runtime::RuntimeError>()
        .is_some_and(|e| !e.resume_can_help())
    {
        line.push_str(mlless_runtime::NOT_RESUMABLE);
    }
    line
}

/// Logs go to standard error; `RUST_LOG` chooses what is shown (default: warnings, and for a
/// function the info lines too, which its invoker keeps at debug level; not the warnings of
/// the AWS SDK's credential chain, whose failures the error that needs credentials names),
/// `format` how.
pub fn init_tracing(function: bool, format: progress::LogFormat) {
    let default = if function {
        "info,aws_config=error"
    } else {
        "warn,aws_config=error"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only on a terminal: not in a CI log, a file or a notebook.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        // A second setting (an embedding that trains again) keeps the first.
        progress::LogFormat::Text => {
            let _ = builder.with_target(false).try_init();
        }
        progress::LogFormat::Json => {
            let _ = builder.json().try_init();
        }
    }
}

/// Runs the invocation whose payload is on standard input (`mlless function`).
pub fn run_function() -> anyhow::Result<()> {
    let mut payload = Vec::new();
    std::io::stdin()
        .read_to_end(&mut payload)
        .context("reading the function payload from standard input")?;
    runtime()?.block_on(run_function_task(payload))
}

/// Runs one invocation's payload on a worker thread of the runtime rather than on the thread
/// that blocks on it: the tasks it wakes (a Redis connection's, a prefetch) then run on the
/// same thread, without a wake-up across threads for every request (a Redis step of `mlless
/// bench channel` at P = 4 took 0.58 ms with them, 0.33 ms without).
async fn run_function_task(payload: Vec<u8>) -> anyhow::Result<()> {
    tokio::spawn(async move { mlless_runtime::run_function(&payload).await })
        .await
        .context("the function's task panicked")?
        .map_err(anyhow::Error::from)
}

/// Serves Lambda invocations: each payload runs as `mlless function` would run it.
pub fn serve_lambda() -> anyhow::Result<()> {
    let handler = |payload: Vec<u8>| async move {
        run_function_task(payload)
            .await
            .map_err(|e| function_failure(&e))
    };
    runtime()?.block_on(mlless_faas::lambda::serve(handler))?;
    Ok(())
}

/// The async runtime of the CLI and of a function: two threads, so that prefetching and sending
/// go on while the main task computes.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Where the functions of a job run: `local` (this binary as local processes) or
/// `lambda:FUNCTION` (a deployed Lambda function, invoked through the Lambda API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvokerChoice {
    /// Local processes of this binary.
    Local,
    /// A deployed AWS Lambda function (name or ARN).
    Lambda(String),
}

impl std::str::FromStr for InvokerChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "local" => Ok(Self::Local),
            Some(("lambda", function)) if !function.is_empty() => {
                Ok(Self::Lambda(function.to_owned()))
            }
            _ => Err(format!(
                "unknown invoker {s:?}: expected local or lambda:FUNCTION_NAME"
            )),
        }
    }
}

impl InvokerChoice {
    /// The invoker this choice names.
    pub fn invoker(&self) -> anyhow::Result<std::sync::Arc<dyn mlless_faas::Invoker>> {
        match self {
            Self::Local => local_invoker(),
            Self::Lambda(function) => Ok(std::sync::Arc::new(
                mlless_faas::LambdaInvoker::from_env(function.as_str())
                    .context("setting up the Lambda invoker")?,
            )),
        }
    }
}

/// Whether a location (store or channel URL) is one a remote function can reach: S3, Redis or
/// Memcached, not a directory of this machine.
pub fn reachable_from_functions(url: &str) -> bool {
    mlless_store::ChannelScheme::parse(Some(url)).is_ok_and(mlless_store::ChannelScheme::is_remote)
}

/// What the local invoker runs for each function when it is not this executable's `function`
/// command ([`set_function_command`]).
static FUNCTION_COMMAND: OnceLock<(PathBuf, Vec<String>)> = OnceLock::new();

/// Makes every local function of this process run `program args…` (which must end in
/// [`run_function_main`], the payload on its standard input) instead of this executable's
/// `function` command: for an embedding whose executable is not `mlless` (the Python package
/// runs its interpreter). The first setting holds; `false` when one was set before.
pub fn set_function_command(program: PathBuf, args: Vec<String>) -> bool {
    FUNCTION_COMMAND.set((program, args)).is_ok()
}

/// The invoker of this binary (or of the [`set_function_command`]) as local processes.
fn local_invoker() -> anyhow::Result<std::sync::Arc<dyn mlless_faas::Invoker>> {
    let (program, args) = match FUNCTION_COMMAND.get() {
        Some(command) => command.clone(),
        None => (
            std::env::current_exe().context("locating the mlless binary to run functions")?,
            vec!["function".to_string()],
        ),
    };
    Ok(std::sync::Arc::new(mlless_faas::LocalInvoker::new(
        program, args,
    )))
}

/// `mlless function` whole: logs set up as a function's, the invocation on standard input run,
/// and its failure written to standard error as its invoker reads it; the exit status.
pub fn run_function_main() -> u8 {
    progress::set_log_format(progress::LogFormat::Text);
    init_tracing(true, progress::LogFormat::Text);
    match run_function() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}", function_failure(&e));
            1
        }
    }
}

#[cfg(test)]
mod option_enums;

#[cfg(test)]
mod tests {
    use super::one_line;

    /// An error that repeats its source's message, as `object_store`'s do.
    #[derive(Debug, thiserror::Error)]
    #[error("store failed: {source}")]
    struct Repeats {
        source: std::io::Error,
    }

    #[test]
    fn one_line_says_each_cause_once() {
        let io = std::io::Error::other("disk on fire");
        let e = anyhow::Error::from(Repeats { source: io }).context("reading spec.json");
        assert_eq!(
            one_line(&e),
            "reading spec.json: store failed: disk on fire"
        );
        let plain = anyhow::Error::from(std::io::Error::other("gone")).context("writing");
        assert_eq!(one_line(&plain), "writing: gone");
    }
}
