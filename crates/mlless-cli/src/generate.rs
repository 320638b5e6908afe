//! `mlless generate`: synthetic data sets with known ground truth.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use mlless_data::{
    BlobsSpec, CriteoSpec, DenseLrSpec, FeatureValues, RatingsSpec, RingsSpec, SparseLrSpec,
};

/// The generators.
#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Sparse binary classification (LIBSVM text) from a known logistic-regression model.
    SparseLr(SparseLrArgs),
    /// Criteo display-ads TSV (label, 13 counts, 26 hex categories, missing values) from a known
    /// logistic model over the features `prepare --format criteo` makes of it.
    Criteo(CriteoArgs),
    /// Ratings (MovieLens `u.data` text) from a known low-rank model plus Gaussian noise.
    Ratings(RatingsArgs),
    /// Dense binary classification (LIBSVM text, every feature) from a known logistic model,
    /// shaped like the Higgs data set.
    DenseLr(DenseLrArgs),
    /// Concentric rings in 2-D, one class per ring (LIBSVM text): no linear model fits.
    Rings(RingsArgs),
    /// Gaussian blobs labelled by blob (LIBSVM text), for k-means.
    Blobs(BlobsArgs),
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
    /// Expected fraction of positive rows, in (0, 1): the true bias is shifted to give it
    /// (class imbalance; default: bias 0, about half positive).
    #[arg(long)]
    pub positive_rate: Option<f64>,
    /// Every feature value is 1, as in web-page and census LIBSVM sets (the default).
    #[arg(long, conflicts_with = "real_valued")]
    pub binary: bool,
    /// Feature values uniform in (0, 2] instead of 1.
    #[arg(long)]
    pub real_valued: bool,
    /// Standard deviation of the true margin w·x of an average row: higher is easier to
    /// classify, and the optimum's weights (and bias, on imbalanced data) are larger, as on
    /// web-page sets that a few keywords nearly separate (6 to 8).
    #[arg(long, default_value_t = 2.0)]
    pub margin_std: f64,
    /// Output file (LIBSVM); the true model goes to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Options of `generate criteo`.
#[derive(Debug, Args)]
pub struct CriteoArgs {
    /// Number of rows.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// The feature space the data is for: prepare it with `--format criteo --features F`, the
    /// space where the true model is a logistic model over the parsed features (at least 14).
    #[arg(long, default_value_t = 1 << 20)]
    pub features: u32,
    /// Expected fraction of positive rows, in (0, 1) (Criteo's is about 0.256).
    #[arg(long, default_value_t = 0.256)]
    pub positive_rate: f64,
    /// Standard deviation of the true margin over rows: higher is easier.
    #[arg(long, default_value_t = 1.5)]
    pub margin_std: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (Criteo TSV); the true model and what it scores on the rows go to
    /// OUT.truth.json.
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
    /// Popularity skew: user activity and item popularity follow a Zipf law of this exponent,
    /// as in real ratings sets (most users and items rated a few times, a few very often); 0:
    /// every pair equally likely. MovieLens is about 1.
    #[arg(long, default_value_t = 0.0)]
    pub skew: f64,
    /// Round every rating to a whole star, 1 to 5, as MovieLens-100k's are.
    #[arg(long)]
    pub stars: bool,
    /// Variance of the user-item interaction of the true model (real ratings are mostly biases
    /// and noise: about 0.15 reproduces MovieLens's small gain of a factor model over biases).
    #[arg(long, default_value_t = 1.0)]
    pub interaction: f64,
    /// Standard deviation of the true user and item biases.
    #[arg(long, default_value_t = mlless_data::generate::RATINGS_BIAS_STD)]
    pub bias_std: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (tab-separated `user item rating timestamp`); the truth goes to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Options of `generate dense-lr`.
#[derive(Debug, Args)]
pub struct DenseLrArgs {
    /// Number of rows.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// Number of features (Higgs has 28).
    #[arg(long, default_value_t = 28)]
    pub features: u32,
    /// Standard deviation of the true margin w·x: higher is easier.
    #[arg(long, default_value_t = 2.0)]
    pub margin_std: f64,
    /// Correlation of the features within each group of 4.
    #[arg(long, default_value_t = 0.5)]
    pub correlation: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (LIBSVM); the true model goes to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Options of `generate rings`.
#[derive(Debug, Args)]
pub struct RingsArgs {
    /// Number of rows.
    #[arg(long, default_value_t = 20_000)]
    pub samples: u64,
    /// Number of rings (classes); ring c has radius c + 1.
    #[arg(long, default_value_t = 2)]
    pub classes: u32,
    /// Standard deviation of the Gaussian noise on the radius.
    #[arg(long, default_value_t = 0.1)]
    pub noise: f64,
    /// Standard-normal noise features after the two coordinates.
    #[arg(long, default_value_t = 0)]
    pub extra_dims: u32,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (LIBSVM); the radii and noise go to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Options of `generate blobs`.
#[derive(Debug, Args)]
pub struct BlobsArgs {
    /// Number of rows.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// Number of blobs.
    #[arg(long, default_value_t = 8)]
    pub k: u32,
    /// Dimension of the points.
    #[arg(long, default_value_t = 16)]
    pub features: u32,
    /// Standard deviation of each coordinate around its blob's centre.
    #[arg(long, default_value_t = 1.0)]
    pub spread: f64,
    /// Centres are drawn uniformly in [-BOX, BOX] on every axis.
    #[arg(long = "box", value_name = "BOX", default_value_t = 10.0)]
    pub box_half_width: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (LIBSVM, label = blob id); the centres and spread go to OUT.truth.json.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs a generator.
pub fn run(command: GenerateCommand) -> anyhow::Result<()> {
    match command {
        GenerateCommand::SparseLr(args) => {
            let spec = sparse_lr_spec(&args);
            generate(&args.out, spec.validate(), |out| {
                mlless_data::write_sparse_lr(&spec, out)
            })?;
            println!(
                "wrote {} rows × {} features to {}",
                args.samples,
                args.features,
                args.out.display()
            );
        }
        GenerateCommand::Criteo(args) => {
            let spec = criteo_spec(&args);
            let truth = generate(&args.out, spec.validate(), |out| {
                mlless_data::write_criteo(&spec, out)
            })?;
            println!(
                "wrote {} Criteo rows ({:.1}% positive) to {}; prepare with --format criteo \
                 --features {} (true model: log loss {:.4}, base rate's {:.4}, AUC {:.3})",
                args.samples,
                100.0 * truth.positive_fraction,
                args.out.display(),
                args.features,
                truth.log_loss,
                truth.base_log_loss,
                truth.auc
            );
        }
        GenerateCommand::Ratings(args) => {
            let spec = ratings_spec(&args);
            let truth = generate(&args.out, spec.validate(), |out| {
                mlless_data::write_ratings(&spec, out)
            })?;
            println!(
                "wrote {} ratings of {} users × {} items to {}",
                truth.ratings,
                args.users,
                args.items,
                args.out.display()
            );
        }
        GenerateCommand::DenseLr(args) => {
            let spec = dense_lr_spec(&args);
            let truth = generate(&args.out, spec.validate(), |out| {
                mlless_data::write_dense_lr(&spec, out)
            })?;
            println!(
                "wrote {} dense rows × {} features to {} (Bayes log loss {:.4})",
                args.samples,
                args.features,
                args.out.display(),
                truth.bayes_log_loss
            );
        }
        GenerateCommand::Rings(args) => {
            let spec = rings_spec(&args);
            generate(&args.out, spec.validate(), |out| {
                mlless_data::write_rings(&spec, out)
            })?;
            println!(
                "wrote {} points on {} rings × {} features to {}",
                args.samples,
                args.classes,
                2 + u64::from(args.extra_dims),
                args.out.display()
            );
        }
        GenerateCommand::Blobs(args) => {
            let spec = blobs_spec(&args);
            generate(&args.out, spec.validate(), |out| {
                mlless_data::write_blobs(&spec, out)
            })?;
            println!(
                "wrote {} points of {} blobs × {} features to {}",
                args.samples,
                args.k,
                args.features,
                args.out.display()
            );
        }
    }
    Ok(())
}

/// The generator spec of the arguments.
pub fn sparse_lr_spec(args: &SparseLrArgs) -> SparseLrSpec {
    SparseLrSpec {
        positive_rate: args.positive_rate,
        values: if args.real_valued {
            FeatureValues::Real
        } else {
            FeatureValues::Binary
        },
        margin_std: args.margin_std,
        ..SparseLrSpec::new(args.samples, args.features, args.nnz, args.seed)
    }
}

/// The generator spec of the arguments (Kaggle-Criteo-shaped columns).
pub fn criteo_spec(args: &CriteoArgs) -> CriteoSpec {
    CriteoSpec {
        features: args.features,
        positive_rate: args.positive_rate,
        margin_std: args.margin_std,
        ..CriteoSpec::new(args.samples, args.seed)
    }
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
        skew: args.skew,
        stars: args.stars,
        interaction: args.interaction,
        bias_std: args.bias_std,
    }
}

/// The generator spec of the arguments.
pub fn dense_lr_spec(args: &DenseLrArgs) -> DenseLrSpec {
    DenseLrSpec {
        margin_std: args.margin_std,
        correlation: args.correlation,
        ..DenseLrSpec::new(args.samples, args.features, args.seed)
    }
}

/// The generator spec of the arguments.
pub fn rings_spec(args: &RingsArgs) -> RingsSpec {
    RingsSpec {
        noise: args.noise,
        extra_dims: args.extra_dims,
        ..RingsSpec::new(args.samples, args.classes, args.seed)
    }
}

/// The generator spec of the arguments.
pub fn blobs_spec(args: &BlobsArgs) -> BlobsSpec {
    BlobsSpec {
        spread: args.spread,
        box_half_width: args.box_half_width,
        ..BlobsSpec::new(args.samples, args.k, args.features, args.seed)
    }
}

/// Checks the spec, so that an invalid one creates no file, then writes the data to `out` and
/// the truth the generator returns to OUT.truth.json.
fn generate<T: serde::Serialize>(
    out: &Path,
    valid: std::io::Result<()>,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<T>,
) -> anyhow::Result<T> {
    valid.context("invalid generator options")?;
    let truth = write_with(out, write)?;
    write_truth(out, &truth)?;
    Ok(truth)
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: GenerateCommand,
    }

    fn run_args(args: &[&str]) -> anyhow::Result<()> {
        run(Cli::try_parse_from([&["generate"], args].concat())?.command)
    }

    fn truth(out: &Path) -> serde_json::Value {
        let text = std::fs::read_to_string(format!("{}.truth.json", out.display())).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn dense_generators_write_data_and_truth() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let (lr, rings, blobs) = (
            path("lr.libsvm"),
            path("rings.libsvm"),
            path("blobs.libsvm"),
        );
        run_args(&["dense-lr", "--samples", "50", "--out", lr.to_str().unwrap()]).unwrap();
        run_args(&[
            "rings",
            "--samples",
            "50",
            "--classes",
            "3",
            "--extra-dims",
            "2",
            "--out",
            rings.to_str().unwrap(),
        ])
        .unwrap();
        run_args(&[
            "blobs",
            "--samples",
            "50",
            "--k",
            "3",
            "--features",
            "4",
            "--box",
            "5",
            "--out",
            blobs.to_str().unwrap(),
        ])
        .unwrap();
        let tokens = |p: &Path| {
            let text = std::fs::read_to_string(p).unwrap();
            assert_eq!(text.lines().count(), 50);
            text.lines().next().unwrap().split(' ').count()
        };
        assert_eq!(tokens(&lr), 1 + 28);
        assert_eq!(tokens(&rings), 1 + 2 + 2);
        assert_eq!(tokens(&blobs), 1 + 4);
        assert_eq!(truth(&lr)["weights"].as_array().unwrap().len(), 28);
        assert!(truth(&lr)["bayes_log_loss"].as_f64().unwrap() > 0.0);
        assert_eq!(truth(&rings)["radii"], serde_json::json!([1.0, 2.0, 3.0]));
        assert_eq!(truth(&rings)["noise"], serde_json::json!(0.1));
        let centres = truth(&blobs)["centres"].as_array().unwrap().clone();
        assert_eq!(centres.len(), 3);
        assert!(
            centres
                .iter()
                .flat_map(|c| c.as_array().unwrap())
                .all(|x| x.as_f64().unwrap().abs() <= 5.0)
        );
    }

    #[test]
    fn criteo_writes_data_and_truth() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("criteo.tsv");
        run_args(&[
            "criteo",
            "--samples",
            "50",
            "--features",
            "1000",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text.lines().count(), 50);
        assert!(text.lines().all(|l| l.split('\t').count() == 40));
        let truth = truth(&out);
        assert_eq!(truth["features"], serde_json::json!(1000));
        assert_eq!(truth["samples"], serde_json::json!(50));
        assert_eq!(truth["integer_weights"].as_array().unwrap().len(), 13);
        let missing = dir.path().join("bad.tsv");
        let err = run_args(&[
            "criteo",
            "--features",
            "13",
            "--out",
            missing.to_str().unwrap(),
        ])
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("at least 14 features"),
            "{err:#}"
        );
        assert!(!missing.exists());
    }

    #[test]
    fn invalid_options_create_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rings.libsvm");
        let err =
            run_args(&["rings", "--classes", "1", "--out", out.to_str().unwrap()]).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "invalid generator options: rings classes must be in 2..=16777216, got 1"
        );
        assert!(!out.exists());
    }
}
