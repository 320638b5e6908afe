//! `mlless bench cloud`: the step time and bill of training jobs for fleets of up to hundreds of
//! functions on a cloud's latencies, simulated on this machine
//! ([`mlless_runtime::bench::cloud`]).

use mlless_cost::PriceTable;
use mlless_job::Pattern;
use mlless_runtime::bench::cloud::{
    CloudCase, CloudData, CloudJob, CloudReport, UpdateRule, simulate,
};
use mlless_store::CloudLatency;

use super::BenchArgs;

/// Steps measured per case when `--steps` is not given.
const DEFAULT_STEPS: u64 = 5;

/// Runs every case of the sweep the options name and prints a row per case as it is done.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let jobs = if args.job.is_empty() {
        vec![CloudJob::SparseLr, CloudJob::Pmf]
    } else {
        args.job.clone()
    };
    let clouds: Vec<CloudLatency> = if args.emulate.is_empty() {
        vec![CloudLatency::s3(), CloudLatency::elasticache()]
    } else {
        args.emulate.iter().flatten().cloned().collect()
    };
    anyhow::ensure!(
        !clouds.is_empty(),
        "bench cloud needs a cloud to emulate: --emulate s3, elasticache, dynamodb or a file, \
         not none"
    );
    let workers = if args.workers.is_empty() {
        vec![4, 16, 64, 256]
    } else {
        args.workers.clone()
    };
    let patterns: Vec<Pattern> = if args.pattern.is_empty() {
        vec![
            Pattern::Broadcast,
            Pattern::AllReduce,
            Pattern::ScatterReduce,
            Pattern::Server,
        ]
    } else {
        args.pattern.clone()
    };
    let ps = CloudLatency::ps().name;
    if let Some(cloud) = clouds.iter().find(|c| c.name != ps)
        && !args.pattern.is_empty()
        && patterns.contains(&Pattern::Server)
    {
        anyhow::bail!(
            "--pattern server has parameter servers average the updates: it needs --emulate ps, \
             not {}",
            cloud.name
        );
    }
    let rules = if args.update.is_empty() {
        vec![
            UpdateRule::Bsp,
            UpdateRule::Isp(0.7),
            UpdateRule::Compressed(mlless_core::Compression::TopKFraction(0.01)),
        ]
    } else {
        args.update.clone()
    };
    let prices = PriceTable::aws_lambda();
    let mut diverging = 0;
    let steps = args.steps.unwrap_or(DEFAULT_STEPS);
    if !args.json {
        println!(
            "simulated: each worker a function of {} MB at {} prices; {} steps measured per case \
             after {} of warm-up; epoch = a pass over the training minibatches",
            args.memory_mb,
            prices.name,
            steps,
            mlless_runtime::bench::cloud::WARM_UP_STEPS
        );
        println!(
            "model ms: the step the cost model projects for the same case (mlless cost --emulate), \
             from the case's latency, pattern and update size"
        );
        println!(
            "{:<7} {:<12} {:>4} {:<15} {:<11} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>11} {:>9} {:>11} {:>7}",
            "job",
            "cloud",
            "P",
            "pattern",
            "update",
            "step ms",
            "model ms",
            "compute",
            "sent KB",
            "recv KB",
            "req/step",
            "$/1k steps",
            "epoch s",
            "$/epoch",
            "loss"
        );
    }
    for job in jobs {
        let data = CloudData::generate(job, 1)?;
        for cloud in &clouds {
            for &p in &workers {
                // Only parameter servers average.
                let for_cloud = patterns
                    .iter()
                    .filter(|&&pattern| pattern != Pattern::Server || cloud.name == ps);
                for &pattern in for_cloud {
                    for rule in &rules {
                        let case = CloudCase {
                            cloud: cloud.clone(),
                            workers: p,
                            pattern,
                            rule: *rule,
                            steps,
                            memory_mb: args.memory_mb,
                        };
                        let report = simulate(&data, &case, &prices)?;
                        if args.json {
                            println!("{}", json_row(data.job.name(), &case, &report));
                            continue;
                        }
                        println!(
                            "{:<7} {:<12} {:>4} {:<15} {:<11} {:>9.2} {:>9.2} {:>8.3} {:>9.1} {:>9.1} {:>8.0} {:>11.5} {:>9.2} {:>11.6} {:>7.4}",
                            data.job.name(),
                            cloud.name,
                            p,
                            pattern.name(),
                            rule.name(),
                            report.step_ms,
                            report.model_step_ms,
                            report.compute_ms,
                            report.sent_bytes / 1e3,
                            report.received_bytes / 1e3,
                            report.requests_per_step,
                            report.usd_per_step * 1e3,
                            report.epoch_s,
                            report.usd_per_epoch,
                            report.loss
                        );
                        if report.diverging() {
                            diverging += 1;
                            println!(
                                "     ^ diverging: the loss rose from {:.4} at the first step (by more than 10%)",
                                report.first_loss
                            );
                        }
                    }
                }
            }
        }
    }
    if diverging > 0 {
        println!(
            "{diverging} case(s) diverged with the default learning rate of their fleet: their \
             step times stand, their training would not"
        );
    }
    Ok(())
}

/// One case as `--json` prints it.
fn json_row(job: &str, case: &CloudCase, report: &CloudReport) -> serde_json::Value {
    serde_json::json!({
        "job": job,
        "cloud": case.cloud.name,
        "workers": case.workers,
        "pattern": case.pattern.name(),
        "update": case.rule.name(),
        "step_ms": report.step_ms,
        "model_step_ms": report.model_step_ms,
        "compute_ms": report.compute_ms,
        "sent_bytes": report.sent_bytes,
        "received_bytes": report.received_bytes,
        "requests_per_step": report.requests_per_step,
        "usd_per_step": report.usd_per_step,
        "epoch_s": report.epoch_s,
        "usd_per_epoch": report.usd_per_epoch,
        "steps_per_epoch": report.steps_per_epoch,
        "loss": report.loss,
        "first_loss": report.first_loss,
        "diverging": report.diverging(),
    })
}
