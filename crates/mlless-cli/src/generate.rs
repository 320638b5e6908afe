//! `mlless generate`: synthetic data sets with known ground truth.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use mlless_data::{RatingsSpec, SparseLrSpec};

/// The generators.
#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Sparse binary classification (LIBSVM text) from a known logistic-regression model.
    SparseLr(SparseLrArgs),
    /// Ratings (MovieLens `u.data` text) from a known low-rank model plus Gaussian noise.
    Ratings(RatingsArgs),
}

/// Options of `generate sparse-lr`.
#[derive(Debug, Args)]
pub struct SparseLrArgs {
    /// Number of rows.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// Number of features.
    #[arg(long, default_value_t = 100_000)]
    pub features: u32,
    /// Non-zeros per row.
    #[arg(long, default_value_t = 30)]
    pub nnz: u32,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (LIBSVM); the true model goes to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Options of `generate ratings`.
#[derive(Debug, Args)]
pub struct RatingsArgs {
    /// Number of users.
    #[arg(long, default_value_t = 2_000)]
    pub users: u32,
    /// Number of items.
    #[arg(long, default_value_t = 1_500)]
    pub items: u32,
    /// Rank of the true factor model.
    #[arg(long, default_value_t = 10)]
    pub rank: u32,
    /// Fraction of (user, item) pairs that are rated.
    #[arg(long, default_value_t = 0.1)]
    pub density: f64,
    /// Standard deviation of the Gaussian noise on each rating.
    #[arg(long, default_value_t = 0.5)]
    pub noise: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (tab-separated `user item rating timestamp`); the truth goes to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs a generator.
pub fn run(command: GenerateCommand) -> anyhow::Result<()> {
    match command {
        GenerateCommand::SparseLr(args) => {
            let spec = sparse_lr_spec(&args);
            let truth = write_with(&args.out, |out| mlless_data::write_sparse_lr(&spec, out))?;
            write_truth(&args.out, &truth)?;
            println!(
                "wrote {} rows × {} features to {}",
                args.samples,
                args.features,
                args.out.display()
            );
        }
        GenerateCommand::Ratings(args) => {
            let spec = ratings_spec(&args);
            let truth = write_with(&args.out, |out| mlless_data::write_ratings(&spec, out))?;
            write_truth(&args.out, &truth)?;
            println!(
                "wrote {} ratings of {} users × {} items to {}",
                truth.ratings,
                args.users,
                args.items,
                args.out.display()
            );
        }
    }
    Ok(())
}

/// The generator spec of the arguments.
pub fn sparse_lr_spec(args: &SparseLrArgs) -> SparseLrSpec {
    SparseLrSpec::new(args.samples, args.features, args.nnz, args.seed)
}

/// The generator spec of the arguments.
pub fn ratings_spec(args: &RatingsArgs) -> RatingsSpec {
    RatingsSpec {
        users: args.users,
        items: args.items,
        rank: args.rank,
        density: args.density,
        noise: args.noise,
        seed: args.seed,
    }
}

/// Writes a file through a buffered writer, creating its directory.
pub fn write_with<T>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<T>,
) -> anyhow::Result<T> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    let value = write(&mut out).with_context(|| format!("writing {}", path.display()))?;
    out.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(value)
}

fn write_truth(out: &Path, truth: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut name = out.as_os_str().to_owned();
    name.push(".truth.json");
    let path = PathBuf::from(name);
    write_with(&path, |w| {
        serde_json::to_writer(w, truth).map_err(std::io::Error::other)
    })?;
    Ok(())
}
