//! `mlless reference lr`: the converged L2 logistic regression of a prepared data set, the
//! optimum that trained runs are compared with ("× the optimum").

use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use mlless_core::{Batch, LrReferenceOptions, LrRegularization, ModelSpec, solve_lr_reference};
use mlless_data::DatasetKind;
use mlless_runtime::dataset::{Dataset, Split};

/// The reference solves.
#[derive(Debug, Subcommand)]
pub enum ReferenceCommand {
    /// L2 logistic regression by L-BFGS on the training split; prints the test metrics.
    Lr(LrArgs),
}

/// Options of `reference lr`.
#[derive(Debug, Args)]
pub struct LrArgs {
    /// The prepared data set.
    #[arg(long)]
    pub data: String,
    /// scikit-learn's C: minimise Σ log loss + ½‖w‖²/C, the bias unregularised.
    #[arg(long, default_value_t = 1.0, conflicts_with = "l2")]
    pub c: f64,
    /// Instead of C: mlless's per-example L2 (`train --l2`), to see the optimum of what a run
    /// with that value minimises.
    #[arg(long)]
    pub l2: Option<f32>,
    /// Stop once the largest gradient coordinate of the mean objective is at most this.
    #[arg(long, default_value_t = 1e-10)]
    pub tolerance: f64,
    /// Iteration cap of L-BFGS.
    #[arg(long, default_value_t = 2000)]
    pub max_iterations: usize,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a reference solve.
pub fn run(command: ReferenceCommand) -> anyhow::Result<()> {
    let ReferenceCommand::Lr(args) = command;
    let regularization = match args.l2 {
        Some(l2) => LrRegularization::PerExample(l2),
        None => LrRegularization::InverseC(args.c),
    };
    let (features, train, test) = crate::runtime()?.block_on(async {
        let dataset = Dataset::open(&args.data).await?;
        let DatasetKind::Sparse { features } = dataset.manifest().kind else {
            bail!("{}: the LR reference needs a sparse data set", args.data);
        };
        let read = async |split| -> anyhow::Result<Vec<Batch>> {
            let mut out = Vec::new();
            for i in 0..dataset.batches(split) {
                out.push(dataset.read_batch(split, i).await?);
            }
            Ok(out)
        };
        let train = read(Split::Train).await?;
        let test = read(Split::Test).await?;
        anyhow::Ok((features, train, test))
    })?;
    let started = Instant::now();
    let options = LrReferenceOptions {
        tolerance: args.tolerance,
        max_iterations: args.max_iterations,
        ..LrReferenceOptions::default()
    };
    let solved = solve_lr_reference(&train, features, regularization, &options)
        .context("solving the reference")?;
    let seconds = started.elapsed().as_secs_f64();
    let spec = ModelSpec::LogisticRegression {
        features,
        l2: 0.0,
        init_bias: 0.0,
    };
    let model = spec.model();
    let mut eval = spec.evaluation();
    for batch in &test {
        model.evaluate(&solved.params, batch, &mut eval)?;
    }
    let metrics = eval.finish();
    let get = |k: &str| metrics.get(k).copied().unwrap_or(f64::NAN);
    let what = match regularization {
        LrRegularization::InverseC(c) => format!("C = {c}"),
        LrRegularization::PerExample(l2) => format!("per-example l2 = {l2}"),
    };
    if args.json {
        let out = serde_json::json!({
            "regularization": what,
            "test_logloss": get("test_logloss"),
            "test_auc": get("test_auc"),
            "test_accuracy": get("test_accuracy"),
            "objective": solved.objective,
            "gradient_max": solved.gradient_max,
            "iterations": solved.iterations,
            "converged": solved.converged,
            "bias": solved.params.last().copied().unwrap_or(0.0),
            "seconds": seconds,
        });
        println!("{out}");
    } else {
        println!(
            "reference LR ({what}): test log loss {:.6}, AUC {:.4}, accuracy {:.4}; {} L-BFGS \
             iterations, largest gradient {:.1e}{}, {seconds:.1} s",
            get("test_logloss"),
            get("test_auc"),
            get("test_accuracy"),
            solved.iterations,
            solved.gradient_max,
            if solved.converged {
                ""
            } else {
                " (not converged)"
            },
        );
    }
    Ok(())
}
