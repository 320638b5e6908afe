//! `mlless`: train machine-learning models data-parallel on function workers.
//!
//! The binary is also the function: the local invoker runs `mlless function` with a payload on
//! standard input for every worker, supervisor and map task, and inside the AWS Lambda runtime
//! (`AWS_LAMBDA_RUNTIME_API` set) it serves the same payloads as Lambda invocations. The
//! commands live in the library (`src/lib.rs`); this file parses the command line.

#[cfg(test)]
mod help_and_readme;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use mlless_cli::{
    bench, cost, demo, function_failure, generate, init_tracing, one_line, plan, predict, prepare,
    progress, ps, reference, report, run_function, runs, serve_lambda, train, tune,
};

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
    /// Choose the fleet, memory and channel that reach a validation target within a deadline
    /// (the cheapest) or a budget (the fastest), from short profile runs; --run trains with it.
    Plan(Box<plan::PlanArgs>),
    /// Measure the hot paths and the exchange.
    Bench(bench::BenchArgs),
    /// Run a parameter server: the channel `--channel ps://:SECRET@host:port` of functions
    /// that exchange their updates through a VM.
    Ps(ps::PsArgs),
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
        Command::Plan(args) => plan::run(*args),
        Command::Bench(args) => bench::run(args),
        Command::Ps(args) => ps::run(args),
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
