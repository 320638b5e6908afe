//! `mlless predict`: score a file with a trained model; `mlless export`: write it as
//! safetensors.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use mlless_data::InputFormat;
use mlless_runtime::predict::TrainedModel;

/// Options of `mlless predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The model: a run (`{runs}/{job}`, a path or URL) or a `model.bin`.
    #[arg(long)]
    pub model: String,
    /// The data set the model was trained on (default: the run's, from its spec.json).
    #[arg(long)]
    pub data: Option<String>,
    /// The file to score: `-` is standard input; gzip and zstd are decompressed.
    #[arg(long)]
    pub input: PathBuf,
    /// Its format.
    #[arg(long, value_enum)]
    pub format: InputFormat,
    /// Where to write the predictions (CSV); `-` is standard output.
    #[arg(long)]
    pub out: PathBuf,
    /// Also print the model's test metrics on the input (it must have labels; k-means needs
    /// none).
    #[arg(long)]
    pub evaluate: bool,
    /// Print the summary as one JSON document on standard output instead of the lines on
    /// standard error: samples, input, model, output, ignored features, unknown users and
    /// items, and with --evaluate the metrics next to the run record's (needs --out to be a
    /// file).
    #[arg(long)]
    pub json: bool,
}

/// Options of `mlless export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The model: a run (`{runs}/{job}`, a path or URL) or a `model.bin`.
    #[arg(long)]
    pub model: String,
    /// The data set the model was trained on (default: the run's, from its spec.json).
    #[arg(long)]
    pub data: Option<String>,
    /// The safetensors file to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `mlless predict`.
pub fn run(args: PredictArgs) -> anyhow::Result<()> {
    let trained =
        crate::runtime()?.block_on(TrainedModel::load(&args.model, args.data.as_deref()))?;
    let layout = trained.scoring_layout(args.format);
    let input = mlless_data::read_for_scoring(&args.input, &layout)?;
    let shown = mlless_data::input_name(&args.input).display().to_string();
    let to_stdout = args.out.as_os_str() == "-";
    if to_stdout && args.json {
        anyhow::bail!(
            "--json prints its document on standard output, where --out - would write the \
             predictions: give --out a file"
        );
    }
    let summary = if to_stdout {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        match trained
            .score(input, &shown, &mut out, args.evaluate)
            .and_then(|summary| {
                out.flush()
                    .map_err(|source| mlless_runtime::RuntimeError::Io {
                        path: "the predictions".into(),
                        source,
                    })?;
                Ok(summary)
            }) {
            // A reader that stopped reading (`| head`) is no failure, as for any filter.
            Err(mlless_runtime::RuntimeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                return Ok(());
            }
            result => result?,
        }
    } else {
        let file = std::fs::File::create(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let summary = trained.score(input, &shown, &mut out, args.evaluate)?;
        out.flush()
            .with_context(|| format!("writing {}", args.out.display()))?;
        summary
    };
    if args.json {
        let recorded = trained.record.as_ref().map(|r| &r.metrics);
        let document = serde_json::json!({
            "samples": summary.samples,
            "input": shown,
            "model": trained.model.spec.name(),
            "model_url": mlless_store::redact_url(&trained.model_url),
            "out": args.out.display().to_string(),
            "ignored_features": summary.ignored_features,
            "unknown_users": summary.unknown_users,
            "unknown_items": summary.unknown_items,
            "metrics": summary.metrics,
            "recorded_metrics": recorded,
        });
        let json = serde_json::to_string_pretty(&document).context("writing the summary")?;
        writeln!(std::io::stdout().lock(), "{json}").context("writing the summary")?;
        return Ok(());
    }
    // Standard error, so that `--out -` leaves only the CSV on standard output.
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "scored {} samples of {} with the {} model of {}{}",
        summary.samples,
        shown,
        trained.model.spec.name(),
        mlless_store::redact_url(&trained.model_url),
        if to_stdout {
            String::new()
        } else {
            format!(" -> {}", args.out.display())
        }
    )?;
    if summary.ignored_features > 0 {
        writeln!(
            err,
            "ignored {} feature values whose index is beyond the model's features",
            summary.ignored_features
        )?;
    }
    if summary.unknown_users + summary.unknown_items > 0 {
        writeln!(
            err,
            "{} ratings of users and {} of items the data set never had: predicted from the \
             mean and the known bias",
            summary.unknown_users, summary.unknown_items
        )?;
    }
    if let Some(metrics) = &summary.metrics {
        let recorded = trained.record.as_ref().map(|r| &r.metrics);
        for (name, value) in metrics {
            match recorded.and_then(|m| m.get(name)) {
                Some(r) => writeln!(err, "{name} {value} (the run record: {r})")?,
                None => writeln!(err, "{name} {value}")?,
            }
        }
    }
    Ok(())
}

/// Runs `mlless export`.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let trained =
        crate::runtime()?.block_on(TrainedModel::load(&args.model, args.data.as_deref()))?;
    let bytes = mlless_runtime::export::export_safetensors(&trained)?;
    std::fs::write(&args.out, &bytes).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "exported the {} model of {} to {} ({} bytes)",
        trained.model.spec.name(),
        mlless_store::redact_url(&trained.model_url),
        args.out.display(),
        bytes.len()
    );
    Ok(())
}
