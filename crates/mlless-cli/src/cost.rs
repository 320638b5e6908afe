//! `mlless cost`: what the work of a recorded run would take and cost at other fleet sizes and
//! on VMs; and the `--platform` price tables of `train`, `report` and `cost`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use mlless_cost::{DEFAULT_VM_STARTUP_S, PriceTable, RunMeasurements, VmPrice};
use mlless_job::RunRecord;
use mlless_report::ReportOptions;
use mlless_store::CloudLatency;

/// The price table `--platform` names: a built-in (`aws-lambda`, `ibm-cf`) or a TOML file (see
/// `mlless_cost::PriceTable` for its format).
pub fn price_table(platform: &str) -> anyhow::Result<PriceTable> {
    if let Some(table) = PriceTable::by_name(platform) {
        return Ok(table);
    }
    let path = Path::new(platform);
    if path.extension().is_some_and(|e| e == "toml") || path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the price table {}", path.display()))?;
        return PriceTable::from_toml_str(&text)
            .with_context(|| format!("in the price table {}", path.display()));
    }
    anyhow::bail!("unknown --platform {platform:?}: use aws-lambda, ibm-cf or a TOML price table")
}

/// Parses `--emulate` (of `train` and `cost`): a built-in cloud or a latency file.
pub(crate) fn parse_cloud(text: &str) -> Result<CloudLatency, String> {
    CloudLatency::by_name_or_file(text).map_err(|e| e.to_string())
}

/// The options of the cost model, shared by `mlless report` and `mlless cost`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Prices: aws-lambda, ibm-cf or a TOML price table [default: the run's own].
    #[arg(long)]
    pub platform: Option<String>,
    /// VM types to compare with, as TYPE:PRICE (dollars per hour) or a built-in type
    /// (t3.medium, c5.large, c5.4xlarge) [default: the built-in types].
    #[arg(long = "vm", value_name = "TYPE:PRICE")]
    pub vms: Vec<VmPrice>,
    /// CPUs the run's functions shared, for the contention model; 0: each had its own (a FaaS
    /// platform) [default: this machine's CPUs if the run was local, else 0].
    #[arg(long)]
    pub cores: Option<u32>,
    /// Predict the other fleet sizes on the measured machine (its CPUs shared by every
    /// function) instead of on a FaaS platform, where every function has its own CPU share.
    #[arg(long)]
    pub same_machine: bool,
    /// Seconds VMs take to boot and start the job.
    #[arg(long, default_value_t = DEFAULT_VM_STARTUP_S, value_parser = crate::seconds("--vm-startup-s", mlless_job::config::SecondsRange::NonNegative))]
    pub vm_startup_s: f64,
    /// Project the exchange onto a cloud channel: s3, elasticache, dynamodb or a TOML latency
    /// file, as
    /// `train --emulate` takes them (the projection is then billed as that kind of channel)
    /// [default: the latency the run emulated, if it did; otherwise the exchange it measured].
    #[arg(long, value_parser = parse_cloud)]
    pub emulate: Option<CloudLatency>,
}

impl ModelArgs {
    /// The report options for `record` with these arguments.
    pub fn options(&self, record: &RunRecord) -> anyhow::Result<ReportOptions> {
        let mut options = ReportOptions::for_record(record);
        if let Some(platform) = &self.platform {
            options.prices = price_table(platform)?;
        }
        if !self.vms.is_empty() {
            options.vms = self.vms.clone();
        }
        if let Some(cores) = self.cores {
            options.cores = (cores > 0).then_some(cores);
        }
        options.same_machine = self.same_machine;
        if !(self.vm_startup_s.is_finite() && self.vm_startup_s >= 0.0) {
            anyhow::bail!("--vm-startup-s must be a number of seconds, 0 or more");
        }
        options.vm_startup_s = self.vm_startup_s;
        if let Some(latency) = &self.emulate {
            options.cloud = Some(mlless_job::config::service_latency(latency));
            options.cloud_sets_channel = true;
        }
        Ok(options)
    }
}

/// Options of `mlless cost`.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// A run record (JSON), as written by `mlless train --record`.
    pub record: PathBuf,
    /// Fleet sizes to predict, e.g. 1,2,4,8 [default: powers of two up to 4× the run's, and
    /// the run's].
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]")]
    pub workers: Vec<u32>,
    /// The options of the cost model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document on standard output instead of the table: the run, its bill at
    /// the chosen prices, and each prediction (platform, kind, workers, steps, step ms, time,
    /// cost).
    #[arg(long)]
    pub json: bool,
}

/// Runs `mlless cost`.
pub fn run(args: CostArgs) -> anyhow::Result<()> {
    let record = crate::summary::read_record(&args.record)?;
    let options = args.model.options(&record)?;
    if args.workers.contains(&0) {
        anyhow::bail!("--workers: a fleet needs at least 1 worker");
    }
    if let Some(p) = args
        .workers
        .iter()
        .find(|&&p| p > mlless_job::config::MAX_WORKERS)
    {
        anyhow::bail!(
            "--workers {p}: a fleet has at most {} workers",
            mlless_job::config::MAX_WORKERS
        );
    }
    let fleets = if args.workers.is_empty() {
        default_fleets(record.spec.training.workers)
    } else {
        args.workers.clone()
    };
    if args.json {
        use std::io::Write;
        let json = serde_json::to_string_pretty(&document(&record, &options, &fleets))
            .context("writing the predictions as JSON")?;
        writeln!(std::io::stdout().lock(), "{json}").context("writing the predictions")?;
        return Ok(());
    }
    print!("{}", render(&record, &options, &fleets));
    Ok(())
}

/// What `mlless cost --json` prints: the run, its bill at the chosen prices and the
/// predictions, as the table shows them.
fn document(record: &RunRecord, options: &ReportOptions, fleets: &[u32]) -> serde_json::Value {
    let m = options.measurements(record);
    let bill = record.bill_at(&options.prices);
    let mut predictions = Vec::new();
    let mut row = |platform: &str, kind: &str, p: mlless_cost::Projection| {
        predictions.push(serde_json::json!({
            "platform": platform,
            "kind": kind,
            "workers": p.workers,
            "steps": p.steps,
            "step_ms": p.step_ms,
            "time_s": p.time_s,
            "cost_usd": p.cost_usd,
            "runs_fleet": kind == "faas" && p.workers == record.spec.training.workers,
        }));
    };
    for &p in fleets {
        row(
            &options.prices.name,
            "faas",
            m.project_faas(p, &options.prices),
        );
    }
    for vm in &options.vms {
        for &p in fleets {
            row(&vm.name, "vm", m.project_vm(vm, p));
        }
    }
    serde_json::json!({
        "job_id": record.spec.job_id,
        "workers": record.spec.training.workers,
        "steps": record.steps.len(),
        "epochs": record.epochs,
        "wall_s": record.wall_s,
        "billed_usd": record.bill.as_ref().map(|b| b.total_usd),
        "bill_at_prices": {
            "platform": bill.platform,
            "total_usd": bill.total_usd,
            "compute_usd": bill.compute_usd,
        },
        "predictions": predictions,
    })
}

/// 1, 2, 4, … up to 4 P, and P itself, in order.
fn default_fleets(p: u32) -> Vec<u32> {
    let p = p.max(1);
    let mut fleets: Vec<u32> = std::iter::successors(Some(1u32), |n| n.checked_mul(2))
        .take_while(|&n| n <= p.saturating_mul(4))
        .collect();
    fleets.push(p);
    fleets.sort_unstable();
    fleets.dedup();
    fleets
}

/// The table of `mlless cost` as text.
fn render(record: &RunRecord, options: &ReportOptions, fleets: &[u32]) -> String {
    let m = options.measurements(record);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {}: {} workers, {} steps, {:.2} epochs, wall {:.2} s{}",
        record.spec.job_id,
        record.spec.training.workers,
        record.steps.len(),
        record.epochs,
        record.wall_s,
        record.bill.as_ref().map_or_else(String::new, |b| format!(
            ", billed ${:.6} at {} prices",
            b.total_usd, b.platform
        ))
    );
    out.push_str(&describe_run_bill(record, &options.prices));
    out.push_str(&describe_model(&m));
    let _ = writeln!(
        out,
        "\n{:<24} {:>8} {:>8} {:>10} {:>10} {:>12}",
        "platform", "workers", "steps", "step ms", "time s", "cost USD"
    );
    let mut row = |name: &str, p: &mlless_cost::Projection| {
        let mark = if p.workers == record.spec.training.workers && name.ends_with("(FaaS)") {
            " *"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>8} {:>10.2} {:>10.2} {:>12.6}{mark}",
            name, p.workers, p.steps, p.step_ms, p.time_s, p.cost_usd
        );
    };
    let faas = format!("{} (FaaS)", options.prices.name);
    for &p in fleets {
        row(&faas, &m.project_faas(p, &options.prices));
    }
    for vm in &options.vms {
        let name = format!("{} ${}/h (VM)", vm.name, vm.usd_per_hour);
        for &p in fleets {
            row(&name, &m.project_vm(vm, p));
        }
    }
    let _ = writeln!(
        out,
        "\n* the run's fleet size (for a run with one worker count the model reproduces its \
         time and, within the few ms by which the functions' durations differ from the wall \
         time and the requests the estimate leaves out, its cost at these prices as broken \
         down above). FaaS costs include the channel's servers and the object-store requests \
         (estimated: a minibatch GET per worker and step, and on the object-store channel the \
         exchange's; a lower bound, without the polls of a collect, the checkpoints and the \
         driver's). VMs: one worker \
         per machine, start-up {:.0} s, the machines only, billed per second with a 60 s \
         minimum.",
        m.vm_startup_s
    );
    out
}

/// What the run costs at `prices` as runs are billed ([`RunRecord::bill_at`]), broken down:
/// at the run's own prices its record's bill, and the figure the starred row
/// reproduces. Says whether the object-store requests were counted or estimated, and, when the
/// record's own bill at the same prices differs (a record an older version billed), what it
/// says.
fn describe_run_bill(record: &RunRecord, prices: &PriceTable) -> String {
    let bill = record.bill_at(prices);
    let mut out = format!(
        "the run at {} prices: ${:.6} = compute {:.6} ({:.1} GB-s) + requests {:.6} + channel \
         servers {:.6} + object-store requests {:.6} ({}){}\n",
        bill.platform,
        bill.total_usd,
        bill.compute_usd,
        bill.gb_seconds,
        bill.request_usd,
        bill.services_usd,
        bill.storage_usd,
        record.billed_requests().1,
        dynamodb_units(record, &bill)
    );
    if let Some(recorded) = &record.bill
        && recorded.platform == bill.platform
        // More than the last digits a record's JSON may round.
        && (recorded.total_usd - bill.total_usd).abs() > 1e-9 * bill.total_usd.abs()
    {
        let _ = writeln!(
            out,
            "       (the record's own bill says ${:.6}: billed by an older version of mlless, or \
             at other prices of that name{})",
            recorded.total_usd,
            if recorded.services_usd + recorded.storage_usd + recorded.table_usd == 0.0 {
                ", without the channel's servers and the object-store requests"
            } else {
                ""
            }
        );
    }
    out
}

/// ` + DynamoDB request units $X (W write, R read units)` for a run whose channel is DynamoDB;
/// nothing for the others.
fn dynamodb_units(record: &RunRecord, bill: &mlless_cost::Bill) -> String {
    let requests = record.billed_requests().0;
    if mlless_job::billing::channel_kind(record.spec.training.channel.as_deref())
        != mlless_cost::ChannelKind::DynamoDb
    {
        return String::new();
    }
    format!(
        " + DynamoDB request units {:.6} ({} write, {} read units)",
        bill.table_usd, requests.table_write_units, requests.table_read_units
    )
}

/// The model in a few lines: the step at the run's fleet size, where its compute comes from,
/// and the exchange (projected onto a cloud channel, or fitted on the run's steps).
fn describe_model(m: &RunMeasurements) -> String {
    let p = m.workers.max(1);
    let (c, c_text) = if m.same_machine {
        (
            m.contention(p),
            m.cores.map_or_else(
                || "1 (own CPUs)".to_string(),
                |c| format!("max(1, P/{c}): this machine's CPUs shared"),
            ),
        )
    } else {
        (
            1.0,
            "1 (a FaaS platform: a CPU share per function)".to_string(),
        )
    };
    let exchange = m.exchange_ms_at(p);
    let rest = m.step_ms_at(p) / c - exchange;
    let compute = if !m.phases.is_empty() && m.phases.iter().all(|ph| ph.compute_cpu_ms.is_some()) {
        "the workers' CPU time"
    } else {
        "wall time over the contention of the run's fleet"
    };
    let exchange_text = match &m.cloud {
        Some(cloud) => format!(
            "exchange(P) on {} ({} ms a request, {} MB/s{}), {}, updates of {:.1} KB{}",
            cloud.latency.name,
            cloud.latency.request_ms,
            cloud.latency.mb_per_s,
            cloud
                .latency
                .reads_at_once
                .map_or_else(String::new, |k| format!(", {k} reads at once")),
            cloud.pattern,
            cloud.update.bytes / 1e3,
            if cloud.update.sparse { " (sparse)" } else { "" }
        ),
        None => {
            let e = m.exchange_model();
            format!(
                "exchange(P) = {:.2} + {:.2}·(P − 1) ms, fitted on the run's steps",
                e.floor_ms, e.per_peer_ms
            )
        }
    };
    format!(
        "model: step(P) = c(P) · (read, compute and bookkeeping + exchange(P)); at P = {p}: \
         c = {c:.2} · ({rest:.2} ms + {exchange:.2} ms)\n       compute from {compute}; c(P) = \
         {c_text}\n       {exchange_text}\n       start-up {:.2} s, teardown {:.2} s, {} phase(s) \
         measured\n",
        m.startup_s,
        m.teardown_s,
        m.phases.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleets_and_platforms() {
        assert_eq!(default_fleets(4), vec![1, 2, 4, 8, 16]);
        assert_eq!(default_fleets(3), vec![1, 2, 3, 4, 8]);
        assert_eq!(default_fleets(0), vec![1, 2, 4]);
        assert_eq!(price_table("ibm-cf").unwrap().granularity_ms, 100);
        let err = price_table("azure").unwrap_err().to_string();
        assert!(err.contains("aws-lambda, ibm-cf"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices.toml");
        std::fs::write(&path, PriceTable::ibm_cloud_functions().to_toml_string()).unwrap();
        let table = price_table(path.to_str().unwrap()).unwrap();
        assert_eq!(table, PriceTable::ibm_cloud_functions());
        std::fs::write(&path, "name = \"x\"\n").unwrap();
        let err = format!("{:#}", price_table(path.to_str().unwrap()).unwrap_err());
        assert!(
            err.contains("prices.toml") && err.contains("gb_second_usd"),
            "{err}"
        );
        let missing = format!("{:#}", price_table("/nonexistent/p.toml").unwrap_err());
        assert!(missing.contains("/nonexistent/p.toml"), "{missing}");
    }
}
