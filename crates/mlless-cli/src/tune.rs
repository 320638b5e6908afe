//! `mlless tune`: serverless hyperparameter search over `train`'s options, with asynchronous
//! successive halving and a dollar budget.
//!
//! The command takes every option of `train` (flattened [`TrainArgs`]: the options every
//! trial shares) and a search space whose parameters are `train`'s own flags; a trial's options
//! are the shared ones with its parameters set as if given on the command line
//! ([`TrainArgs::with_params`]), so each value goes through the flag's own parser.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;
use clap::{Args, FromArgMatches, ValueEnum};
use mlless_runtime::Control;
use mlless_runtime::tune::{SearchProgress, Trial, TuneOptions};
use mlless_tune::{AshaConfig, Domain, RungUnit, Sampler, SearchSpace, TuneRecord};

use crate::train::TrainArgs;

/// `train`'s options that a search cannot vary: what the search itself decides or shows, and
/// the model, whose metric every trial is compared by.
const NOT_SEARCHED: &[&str] = &[
    "model",
    "resume",
    "record",
    "json",
    "quiet",
    "progress-every",
    "max-time",
    "invoker",
    "platform",
    "runs",
    "fault",
];

/// Whether trials are stopped early, as the CLI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerArg {
    /// Asynchronous successive halving: at each rung only the top 1/eta go on.
    Asha,
    /// None: every trial trains to its end (a full search).
    None,
}

/// Options of `mlless tune`.
#[derive(Debug, Args)]
#[command(
    mut_arg("workers", |a| a.long("workers-per-trial").help("Function workers of every trial")),
    mut_arg("max_time", |a| a.help("Stop the search after this much wall time, seconds (the \
        running trials are stopped; none starts that could not reach its first rung in time)")),
    mut_arg("record", |a| a.help("Also write the tune record (JSON) to this local file")),
    mut_arg("json", |a| a.help("Print the tune record as JSON on standard output, and nothing \
        else there")),
    mut_arg("quiet", |a| a.help("No progress: neither the trials' events nor the status lines")),
    mut_arg("progress_every", |a| a.help("A status line of the search every this many seconds \
        (0: only the trials' events)")),
    mut_arg("seed", |a| a.help("Seed of the sampling, and of every trial's initialisation and \
        minibatch order")),
    mut_arg("resume", |a| a.hide(true)),
)]
pub struct TuneArgs {
    /// The options every trial shares: those of `mlless train`.
    #[command(flatten)]
    pub train: TrainArgs,
    /// A search space in TOML: one key per parameter, a string as --param takes it or an
    /// array of values (lr = "log:1e-3..1", factors = [5, 10, 20]).
    #[arg(long, value_name = "FILE")]
    pub space: Option<PathBuf>,
    /// A parameter of the search (repeatable): a flag of train and its values, NAME=a,b,c or a
    /// range LO..HI, log:LO..HI, int:LO..HI, log-int:LO..HI, each with :N grid points (e.g.
    /// lr=log:1e-3..1:4, factors=5,10,20, optimizer=momentum,adam, data=DIR1,DIR2).
    #[arg(long = "param", value_name = "NAME=VALUES")]
    pub params: Vec<String>,
    /// The budget: the trials' bills add up to no more than this, US dollars.
    #[arg(long, value_name = "USD")]
    pub budget_usd: f64,
    /// Trials: the draws of --sampler random (required there), or the first N points of the
    /// shuffled grid.
    #[arg(long)]
    pub trials: Option<u32>,
    /// Trials that run at once, each its own fleet of functions.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u32,
    /// How trials are drawn from the space.
    #[arg(long, value_enum, default_value_t = Sampler::Grid)]
    pub sampler: Sampler,
    /// Stop bad trials early (asha) or let every trial train to its end (none).
    #[arg(long, value_enum, default_value_t = SchedulerArg::Asha)]
    pub scheduler: SchedulerArg,
    /// Successive halving's reduction factor: a rung keeps the top 1/ETA of the trials.
    #[arg(long, default_value_t = 3)]
    pub eta: u32,
    /// The first rung, in --rung-unit; the others at MIN × ETA^k below the most a trial trains
    /// (--max-epochs, or --trial-time).
    #[arg(long, default_value_t = 1.0)]
    pub min_rung: f64,
    /// What the rungs count.
    #[arg(long, value_enum, default_value_t = RungUnit::Epochs)]
    pub rung_unit: RungUnit,
    /// The most a trial trains, seconds (its --max-time; required with --rung-unit seconds).
    #[arg(long, value_name = "SECONDS", value_parser = crate::seconds("--trial-time", mlless_job::config::SecondsRange::Positive))]
    pub trial_time: Option<f64>,
    /// Also run a trial with the shared options as they are (no parameter set), to compare.
    #[arg(long)]
    pub baseline: bool,
    /// Directory of the tune record (tune.json) and the report (report.html, curves.svg,
    /// cost.svg).
    #[arg(long, default_value = "mlless-tune")]
    pub out: PathBuf,
}

/// `train`'s command with no defaults and nothing required, and its flags taking `true` or
/// `false`: what [`TrainArgs::with_params`] parses a trial's parameters with, so that the
/// matches hold only what the parameters set.
fn params_command() -> clap::Command {
    <TrainArgs as Args>::augment_args(clap::Command::new("train"))
        .no_binary_name(true)
        .mut_args(|a| {
            let a = a
                .default_value(None)
                .required(false)
                .required_unless_present(clap::builder::Resettable::Reset);
            if matches!(a.get_action(), clap::ArgAction::SetTrue) {
                a.action(clap::ArgAction::Set)
                    .value_parser(clap::value_parser!(bool))
            } else {
                a
            }
        })
}

impl TrainArgs {
    /// These options with `params` (a `train` flag without its dashes, and its value) set as
    /// if given on the command line; the others as they are.
    pub fn with_params(&self, params: &[(String, String)]) -> anyhow::Result<TrainArgs> {
        let args = params
            .iter()
            .map(|(name, value)| format!("--{name}={value}"));
        let matches = params_command().try_get_matches_from(args)?;
        let mut out = self.clone();
        out.update_from_arg_matches(&matches)?;
        Ok(out)
    }
}

/// Checks that every parameter of `space` names a flag of `train` that a search may vary, and
/// that each of its values (a range: both ends) is one the flag takes.
fn check_space(space: &SearchSpace, base: &TrainArgs) -> anyhow::Result<()> {
    let command = params_command();
    let flags: Vec<&str> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !NOT_SEARCHED.contains(l))
        .collect();
    for param in &space.params {
        if !flags.contains(&param.name.as_str()) {
            anyhow::bail!(
                "--param {}: not an option a search may vary; it may vary {}",
                param.name,
                flags.join(", ")
            );
        }
        let values = match &param.domain {
            Domain::Choice { values } => values.clone(),
            Domain::Range { lo, hi, .. } => {
                let (lo, hi) = (*lo, *hi);
                let text = |v: f64| {
                    if matches!(
                        param.domain,
                        Domain::Range {
                            scale: mlless_tune::Scale::Int | mlless_tune::Scale::LogInt,
                            ..
                        }
                    ) {
                        format!("{}", v.ceil() as i64)
                    } else {
                        format!("{v}")
                    }
                };
                vec![text(lo), text(hi)]
            }
        };
        for value in values {
            base.with_params(&[(param.name.clone(), value.clone())])
                .map_err(|e| {
                    let e = e.to_string();
                    let first = e
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ");
                    anyhow::anyhow!("--param {}: {first}", param.name)
                })?;
        }
    }
    Ok(())
}

/// The trials of the search `args` asks for.
fn trials(args: &TuneArgs, space: &SearchSpace) -> anyhow::Result<Vec<Trial>> {
    let mut drawn = space.trials(args.sampler, args.trials, args.train.seed)?;
    if args.baseline {
        drawn.insert(0, mlless_tune::Assignment::default());
    }
    Ok(drawn
        .into_iter()
        .map(|params| {
            let options = args
                .train
                .with_params(&params.0)
                .and_then(|mut train| {
                    // The search's --max-time is the search's; a trial's is --trial-time.
                    train.max_time = args.trial_time;
                    train.options()
                })
                .map_err(|e| format!("{e:#}"));
            Trial { params, options }
        })
        .collect())
}

/// Runs `mlless tune`: the search, its leaderboard on standard output, its record and report
/// in `--out`; a cancelled search ends in [`crate::train::Cancelled`] once they are written.
pub fn run(args: TuneArgs) -> anyhow::Result<()> {
    if args.train.resume.is_some() {
        anyhow::bail!("a search starts its trials afresh: --resume is train's alone");
    }
    let mut space = SearchSpace::default();
    if let Some(path) = &args.space {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the search space {}", path.display()))?;
        space
            .push_toml(&text)
            .with_context(|| format!("in {}", path.display()))?;
    }
    for param in &args.params {
        space.push_arg(param)?;
    }
    if args.train.data.is_empty() && space.params.iter().all(|p| p.name != "data") {
        anyhow::bail!("a search needs --data, or a parameter data=DIR1,DIR2,…");
    }
    check_space(&space, &args.train)?;
    if let Some(t) = args.trial_time
        && !(t > 0.0 && t.is_finite())
    {
        anyhow::bail!("--trial-time must be a positive number of seconds, not {t}");
    }
    let unit = args.rung_unit;
    let max = match unit {
        RungUnit::Epochs => f64::from(args.train.max_epochs),
        RungUnit::Seconds => args
            .trial_time
            .context("--rung-unit seconds needs --trial-time, the most a trial trains")?,
    };
    let scheduler = (args.scheduler == SchedulerArg::Asha).then_some(AshaConfig {
        unit,
        min: args.min_rung,
        eta: args.eta,
        max,
    });
    let options = TuneOptions {
        trials: trials(&args, &space)?,
        concurrency: args.concurrency,
        budget_usd: args.budget_usd,
        max_time_s: args.train.max_time,
        unit,
        scheduler,
        space,
        sampler: args.sampler,
        seed: args.train.seed,
    };
    if let crate::InvokerChoice::Lambda(function) = &args.train.invoker {
        crate::train::check_reachable_from_functions(&args.train, function)?;
    }
    let invoker = args.train.invoker.invoker()?;
    let interrupts = Arc::new(AtomicU32::new(0));
    let mut status = Status::new(&args);
    let mut observe = |p: &SearchProgress| {
        status.show(p);
        match interrupts.load(Ordering::SeqCst) {
            0 => Control::Continue,
            1 => Control::Cancel,
            _ => Control::Kill,
        }
    };
    let runtime = crate::runtime()?;
    runtime.spawn(crate::train::count_interrupts(interrupts.clone()));
    let record = runtime.block_on(mlless_runtime::tune::tune(&options, invoker, &mut observe))?;
    let json = serde_json::to_vec_pretty(&record).context("writing the tune record")?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let record_path = args.out.join("tune.json");
    std::fs::write(&record_path, &json)
        .with_context(|| format!("writing {}", record_path.display()))?;
    if let Some(path) = &args.train.record {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    let files = mlless_report::render_tune_report(&record, &args.out)?;
    if args.train.json {
        writeln!(
            std::io::stdout().lock(),
            "{}",
            String::from_utf8_lossy(&json)
        )
        .context("writing the tune record")?;
    } else {
        print!("{}", leaderboard(&record));
        println!(
            "tune record: {} · report: {}",
            record_path.display(),
            files.html.display()
        );
    }
    if record.stop_reason == mlless_job::record::CANCELLED {
        return Err(crate::train::Cancelled {
            message: format!(
                "cancelled search {}: its trials stopped after their step (each resumable with \
                 `mlless train --resume RUN`)",
                record.tune_id
            ),
        }
        .into());
    }
    Ok(())
}

/// The search's summary and leaderboard, as printed at its end.
pub fn leaderboard(record: &TuneRecord) -> String {
    let mut out = String::new();
    let counts: Vec<String> = record
        .counts()
        .iter()
        .map(|(s, n)| format!("{n} {}", s.name()))
        .collect();
    out.push_str(&format!(
        "search {}: {}; {} trials ({}) in {:.1} s\n",
        record.tune_id,
        record.stop_reason,
        record.trials.len(),
        counts.join(", "),
        record.wall_s
    ));
    out.push_str(&format!(
        "spent ${:.6} of the ${:.6} budget ({:.1}%)\n",
        record.spent_usd,
        record.budget_usd,
        100.0 * record.spent_usd / record.budget_usd
    ));
    out.push_str(&format!(
        "{:>4} {:>5} {:>12} {:>7} {:>8} {:>10}  {:<10} parameters\n",
        "rank", "trial", record.metric, "epochs", "time (s)", "cost ($)", "status"
    ));
    for (rank, t) in record.leaderboard().iter().enumerate() {
        out.push_str(&format!(
            "{:>4} {:>5} {:>12} {:>7.2} {:>8.1} {:>10.6}  {:<10} {}\n",
            rank + 1,
            t.trial,
            t.best_metric.map_or("—".to_string(), |v| format!("{v:.6}")),
            t.epochs,
            t.wall_s,
            t.cost_usd,
            t.status.name(),
            t.params
        ));
    }
    match record.best_trial() {
        Some(best) => {
            let tests: Vec<String> = best
                .test_metrics
                .iter()
                .filter(|(k, _)| *k != "test_samples")
                .map(|(k, v)| format!("{k} {v:.6}"))
                .collect();
            out.push_str(&format!(
                "best: trial {} ({}), validation {} {:.6}; {}\n",
                best.trial,
                best.params,
                record.metric,
                best.best_metric.unwrap_or(f64::NAN),
                tests.join(", ")
            ));
            if let Some(run) = &best.run_url {
                out.push_str(&format!(
                    "its model is kept in {run}: `mlless export --model {run} --out best.safetensors`\n"
                ));
            }
        }
        None => out.push_str("best: none (no trial reported a validation metric)\n"),
    }
    out
}

/// The search's progress on standard error: each event as a line, and a status line every
/// `--progress-every` seconds.
struct Status {
    quiet: bool,
    every_s: f64,
    next_at_s: f64,
    json: bool,
}

impl Status {
    fn new(args: &TuneArgs) -> Self {
        Self {
            quiet: args.train.quiet,
            every_s: args.train.progress_every,
            next_at_s: args.train.progress_every,
            json: crate::progress::log_format() == crate::progress::LogFormat::Json,
        }
    }

    fn show(&mut self, p: &SearchProgress) {
        if self.quiet {
            return;
        }
        let mut lines: Vec<String> = p.events.iter().map(ToString::to_string).collect();
        if self.every_s > 0.0 && p.elapsed_s >= self.next_at_s {
            self.next_at_s = ((p.elapsed_s / self.every_s).floor() + 1.0) * self.every_s;
            let best = match (&p.metric, p.best) {
                (Some(metric), Some((trial, v))) => {
                    format!(" · best {metric} {v:.6} (trial {trial})")
                }
                _ => String::new(),
            };
            lines.push(format!(
                "{:.1} s · {} running · {} of {} ended · ${:.6} of ${:.6}{best}",
                p.elapsed_s, p.running, p.ended, p.trials, p.spent_usd, p.budget_usd
            ));
        }
        let mut err = std::io::stderr().lock();
        for line in lines {
            // A closed standard error must not stop the search.
            let _ = if self.json {
                writeln!(err, "{}", crate::progress::json_message("tune", &line))
            } else {
                writeln!(err, "tune: {line}")
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(extra: &[&str]) -> TrainArgs {
        let command = <TrainArgs as Args>::augment_args(clap::Command::new("train"));
        let matches = command
            .try_get_matches_from(
                ["train", "--data", "d", "--model", "lr", "--quiet"]
                    .iter()
                    .chain(extra),
            )
            .expect("the arguments parse");
        TrainArgs::from_arg_matches(&matches).expect("train's arguments")
    }

    fn set(name: &str, value: &str) -> (String, String) {
        (name.to_string(), value.to_string())
    }

    #[test]
    fn parameters_set_only_their_option() {
        let base = base(&["--l2", "0.01", "--workers", "2", "--max-epochs", "7"]);
        let trial = base
            .with_params(&[
                set("lr", "0.25"),
                set("optimizer", "adam"),
                set("hidden", "32,16"),
                set("memory-mb", "512"),
            ])
            .unwrap();
        assert_eq!(trial.lr, Some(0.25));
        assert_eq!(trial.optimizer, Some(mlless_core::OptimizerKind::Adam));
        assert_eq!(trial.hidden, [32, 16]);
        assert_eq!(trial.memory_mb, 512);
        // The shared options stay, flags included.
        assert_eq!(trial.l2, Some(0.01));
        assert_eq!(trial.workers, 2);
        assert_eq!(trial.max_epochs, 7);
        assert!(trial.quiet);
        assert_eq!(trial.data, "d");
        // Through the flag's own parser.
        assert!(base.with_params(&[set("optimizer", "adma")]).is_err());
        assert!(base.with_params(&[set("lr", "fast")]).is_err());
        assert!(base.with_params(&[set("l2", "-1")]).unwrap().l2 == Some(-1.0));
    }

    #[test]
    fn the_space_is_checked_against_trains_flags() {
        let base = base(&[]);
        let space = |args: &[&str]| {
            let mut s = SearchSpace::default();
            for a in args {
                s.push_arg(a).unwrap();
            }
            s
        };
        assert!(check_space(&space(&["lr=log:1e-3..1", "factors=int:5..20"]), &base).is_ok());
        let e = check_space(&space(&["optimizer=sgd,adma"]), &base).unwrap_err();
        assert!(e.to_string().contains("--param optimizer"), "{e}");
        let e = check_space(&space(&["speed=1,2"]), &base).unwrap_err();
        assert!(
            e.to_string().contains("may vary") && e.to_string().contains("lr"),
            "{e}"
        );
        for name in ["model", "max-time", "resume", "record", "fault"] {
            let e = check_space(&space(&[&format!("{name}=1")]), &base).unwrap_err();
            assert!(
                e.to_string().contains("not an option a search may vary"),
                "{e}"
            );
        }
    }

    #[test]
    fn tune_takes_trains_options_under_its_names() {
        let tune = <TuneArgs as clap::Args>::augment_args(clap::Command::new("tune"));
        let longs: Vec<&str> = tune.get_arguments().filter_map(|a| a.get_long()).collect();
        for flag in [
            "workers-per-trial",
            "budget-usd",
            "param",
            "lr",
            "max-time",
            "concurrency",
        ] {
            assert!(longs.contains(&flag), "{flag}");
        }
        assert!(!longs.contains(&"workers"));
    }
}
