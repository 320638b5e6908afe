//! `mlless demo`: two small data sets with known ground truth, prepared and trained end to end on
//! the embedded default (local processes as functions, the local filesystem as store and
//! channel).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use mlless_data::{InputFormat, RatingsTruth, SparseLrTruth};

use crate::generate::{RatingsArgs, SparseLrArgs};
use crate::prepare::PrepareArgs;
use mlless_job::ModelChoice;

use crate::train::TrainArgs;

/// Options of `mlless demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the demo's data, store and run records.
    #[arg(long, default_value = "mlless-demo")]
    pub dir: PathBuf,
    /// Number of function workers.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = dir.join("store");

    println!("== sparse logistic regression: 200,000 rows × 100,000 features, 30 non-zeros a row");
    let lr_input = dir.join("sparse-lr.libsvm");
    let lr_args = SparseLrArgs {
        samples: 200_000,
        features: 100_000,
        nnz: 30,
        seed: 7,
        positive_rate: None,
        binary: true,
        real_valued: false,
        margin_std: 2.0,
        out: lr_input.clone(),
    };
    let lr_spec = crate::generate::sparse_lr_spec(&lr_args);
    let truth: SparseLrTruth =
        crate::generate::write_with(&lr_input, |out| mlless_data::write_sparse_lr(&lr_spec, out))?;
    let lr_data = store.join("sparse-lr");
    prepare_local(InputFormat::Libsvm, &lr_input, &lr_data, 1000, 4)?;
    let record = train(
        &args,
        ModelChoice::LogisticRegression,
        &lr_data,
        &dir.join("sparse-lr-record.json"),
    )?;
    let reference = reference_log_loss(&lr_data, &truth)?;
    println!(
        "  the true weights score test_logloss {reference:.5} on the same test set (ratio {:.3})\n",
        record
            .metrics
            .get("test_logloss")
            .copied()
            .unwrap_or(f64::NAN)
            / reference
    );

    // Shaped like MovieLens-1M, as real ratings are: popular and rare films, whole stars,
    // mostly biases and noise.
    println!(
        "== matrix factorisation: 1M ratings shaped like MovieLens-1M (6,040 users × 3,706 \
         films, popular and rare, whole stars)"
    );
    let ratings_input = dir.join("ratings.tsv");
    let ratings_args = RatingsArgs {
        users: 6_040,
        items: 3_706,
        rank: 10,
        density: 0.0447,
        noise: 0.85,
        skew: 1.3,
        stars: true,
        interaction: 0.15,
        bias_std: 0.45,
        seed: 7,
        out: ratings_input.clone(),
    };
    let ratings_spec = crate::generate::ratings_spec(&ratings_args);
    let truth: RatingsTruth = crate::generate::write_with(&ratings_input, |out| {
        mlless_data::write_ratings(&ratings_spec, out)
    })?;
    let ratings_data = store.join("ratings");
    prepare_local(
        InputFormat::Movielens,
        &ratings_input,
        &ratings_data,
        1000,
        4,
    )?;
    let record = train(
        &args,
        ModelChoice::MatrixFactorization,
        &ratings_data,
        &dir.join("ratings-record.json"),
    )?;
    println!(
        "  the true model's RMSE on these ratings is {:.3}: test_rmse / that = {:.3}",
        truth.model_rmse,
        record.metrics.get("test_rmse").copied().unwrap_or(f64::NAN) / truth.model_rmse
    );
    println!("\nrun records and data are in {}", dir.display());
    Ok(())
}

/// Prepares `input` into the local store `out`, a tenth held out for test, with local map
/// tasks: the demo's and the benchmarks' data sets.
pub(crate) fn prepare_local(
    format: InputFormat,
    input: &Path,
    out: &Path,
    batch_size: u32,
    map_tasks: u32,
) -> anyhow::Result<()> {
    crate::prepare::run(PrepareArgs {
        format,
        input: input.to_path_buf(),
        out: out.display().to_string(),
        batch_size,
        test_fraction: Some(0.1),
        test_input: None,
        validation_fraction: None,
        validation_input: None,
        seed: 1,
        normalize: None,
        features: None,
        delimiter: None,
        header: None,
        label_column: None,
        invoker: crate::InvokerChoice::Local,
        map_tasks,
        distributed: false,
        memory_mb: 1024,
        timeout_s: 900.0,
        temp_dir: None,
    })
}

fn train(
    args: &DemoArgs,
    model: ModelChoice,
    data: &Path,
    record: &Path,
) -> anyhow::Result<mlless_job::RunRecord> {
    let mut train = TrainArgs::with_defaults(&data.display().to_string(), model)?;
    train.workers = args.workers;
    train.record = Some(record.to_path_buf());
    train.quiet = args.quiet;
    crate::train::run(train)
}

/// The mean log loss of the true weights on the prepared test set.
fn reference_log_loss(data: &Path, truth: &SparseLrTruth) -> anyhow::Result<f64> {
    crate::runtime()?.block_on(async {
        let dataset = mlless_runtime::dataset::Dataset::open(&data.display().to_string()).await?;
        let (mut sum, mut n) = (0.0, 0usize);
        for i in 0..dataset.batches(mlless_runtime::dataset::Split::Test) {
            if let mlless_core::Batch::Sparse(rows) = dataset
                .read_batch(mlless_runtime::dataset::Split::Test, i)
                .await?
            {
                sum += truth.log_loss(&rows) * rows.rows() as f64;
                n += rows.rows();
            }
        }
        Ok(sum / n.max(1) as f64)
    })
}
