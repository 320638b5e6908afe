//! `mlless`: train machine-learning models data-parallel on function workers.
//!
//! The binary is also the function: the local invoker runs `mlless function` with a payload on
//! standard input for every worker, supervisor and map task, and inside the AWS Lambda runtime
//! (`AWS_LAMBDA_RUNTIME_API` set) it serves the same payloads as Lambda invocations.

mod bench;
mod cost;
mod demo;
mod generate;
#[cfg(test)]
mod help_and_readme;
mod predict;
mod prepare;
mod progress;
mod reference;
mod report;
mod runs;
mod summary;
mod train;
mod tune;

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Serverless data-parallel training of sparse logistic regression and matrix factorisation.
#[derive(Debug, Parser)]
#[command(name = "mlless", version, about, long_about = None)]
struct Cli {
    /// How logs and progress lines on standard error are written: text, or json (one JSON
    /// object per line, for log collectors).
    #[arg(long, global = true, value_enum, default_value_t = progress::LogFormat::Text)]
    log_format: progress::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate, prepare and train two small data sets end to end on this machine.
    Demo(demo::DemoArgs),
    /// Write a synthetic data set with known ground truth.
    #[command(subcommand)]
    Generate(generate::GenerateCommand),
    /// Turn an input file into minibatch objects and a manifest in an object store.
    Prepare(prepare::PrepareArgs),
    /// Train a model on a prepared data set with function workers.
    #[command(
        override_usage = "mlless train --data <DATA> --model <MODEL> [OPTIONS]\n       \
                                mlless train --resume <RUN> [OPTIONS]"
    )]
    Train(Box<train::TrainArgs>),
    /// Search hyperparameters: trials as training jobs run concurrently, bad ones stopped early
    /// (asynchronous successive halving), within a dollar budget.
    Tune(Box<tune::TuneArgs>),
    /// Score a file with a trained model (CSV predictions; --evaluate for its test metrics).
    Predict(predict::PredictArgs),
    /// Write a trained model as named tensors in a safetensors file.
    Export(predict::ExportArgs),
    /// Print the summary of a run record again and write its plots and HTML page.
    Report(report::ReportArgs),
    /// List the runs in a store, newest first: status (finished, cancelled, failed, running),
    /// stop reason, steps, time, cost and test metrics.
    Runs(runs::RunsArgs),
    /// Predict the time and cost of a recorded run's work at other fleet sizes and on VMs.
    Cost(cost::CostArgs),
    /// Measure the hot paths and the exchange.
    Bench(bench::BenchArgs),
    /// Solve a converged reference model (L2 logistic regression by L-BFGS) on a prepared
    /// data set and print its test metrics.
    #[command(subcommand)]
    Reference(reference::ReferenceCommand),
    /// Run one function invocation (used by the local invoker; payload on standard input).
    #[command(hide = true)]
    Function,
}

/// The ids of the arguments of `command` that the user gave, on the command line or in the
/// environment (not the ids of argument groups, which `matches` also holds).
fn given_ids(command: &clap::Command, matches: &clap::ArgMatches) -> Vec<String> {
    matches
        .ids()
        .filter(|id| command.get_arguments().any(|arg| arg.get_id() == *id))
        .filter(|id| {
            matches!(
                matches.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|id| id.as_str().to_owned())
        .collect()
}

fn main() -> ExitCode {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some_and(|api| !api.is_empty()) {
        init_tracing(true, progress::LogFormat::Text);
        return match serve_lambda() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{}", one_line(&e));
                ExitCode::FAILURE
            }
        };
    }
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let (Command::Train(args), Some(("train", train))) = (&mut cli.command, matches.subcommand())
    {
        let command = Cli::command();
        if let Some(command) = command.find_subcommand("train") {
            args.given = given_ids(command, train);
        }
    }
    let function = matches!(cli.command, Command::Function);
    // A function's lines go to its invoker, which reads them as text.
    let log_format = if function {
        progress::LogFormat::Text
    } else {
        cli.log_format
    };
    progress::set_log_format(log_format);
    init_tracing(function, log_format);
    let result = match cli.command {
        Command::Function => run_function(),
        Command::Demo(args) => demo::run(args),
        Command::Generate(command) => generate::run(command),
        Command::Prepare(args) => prepare::run(args),
        Command::Train(args) => train::run(*args).map(|_| ()),
        Command::Tune(args) => tune::run(*args),
        Command::Predict(args) => predict::run(args),
        Command::Export(args) => predict::export(args),
        Command::Report(args) => report::report(args),
        Command::Runs(args) => runs::run(args),
        Command::Cost(args) => cost::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Reference(command) => reference::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<train::Cancelled>().is_some() => {
            eprintln!("{e}");
            ExitCode::from(130)
        }
        Err(e) => {
            // One line with the whole chain of causes: the invoker shows a function's last line
            // after the function's name, so a function's line needs no prefix of its own.
            if function {
                eprintln!("{}", function_failure(&e));
            } else {
                eprintln!("error: {}", one_line(&e));
            }
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes on one line, each said once. Many errors (ours, `object_store`'s)
/// repeat their source's message in their own, as a complete message for logs that print only
/// the error; a cause whose message the line holds already is left out, so that no cause is
/// said twice ("X: X").
fn one_line(error: &anyhow::Error) -> String {
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
fn function_failure(error: &anyhow::Error) -> String {
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
fn init_tracing(function: bool, format: progress::LogFormat) {
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
        progress::LogFormat::Text => builder.with_target(false).init(),
        progress::LogFormat::Json => builder.json().init(),
    }
}

fn run_function() -> anyhow::Result<()> {
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
fn serve_lambda() -> anyhow::Result<()> {
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
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Where the functions of a job run: `local` (this binary as local processes) or
/// `lambda:FUNCTION` (a deployed Lambda function, invoked through the Lambda API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InvokerChoice {
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
    pub(crate) fn invoker(&self) -> anyhow::Result<std::sync::Arc<dyn mlless_faas::Invoker>> {
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
pub(crate) fn reachable_from_functions(url: &str) -> bool {
    mlless_store::ChannelScheme::parse(Some(url)).is_ok_and(mlless_store::ChannelScheme::is_remote)
}

/// The invoker of this binary as local processes.
fn local_invoker() -> anyhow::Result<std::sync::Arc<dyn mlless_faas::Invoker>> {
    let exe = std::env::current_exe().context("locating the mlless binary to run functions")?;
    Ok(std::sync::Arc::new(mlless_faas::LocalInvoker::new(
        exe,
        vec!["function".to_string()],
    )))
}

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
