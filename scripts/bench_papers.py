#!/usr/bin/env python3
"""The papers' scaling experiments, reproduced on generated data shaped like theirs.

Run by `scripts/bench-papers.sh` (which builds mlless first); standard library only. Writes
`papers.md` (the README's tables) and the runs' records under the output directory.

Each experiment combines three measurements, each of what it can measure honestly on one
machine:

- the *steps to a target* of a real `mlless train` run on this machine (the global batch is
  held, so for SGD and momentum these are the steps at any fleet size; PMF's Adam steps,
  averaged uniformly, move a row one worker touched 1/P as far, so a larger fleet needs more
  steps than these: the tables say so),
- the *step time and bill in a cloud* of `mlless bench cloud`'s simulated fleets (every
  function its own core, every request the cloud's latency and bandwidth),
- the *cost model's projection* of the same run (`mlless cost RECORD --emulate CLOUD`), for
  FaaS and for a cluster of VMs, and how far it is from the simulation.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path


def log(message):
    print(f"[bench-papers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Mlless:
    def __init__(self, binary, work):
        self.binary = binary
        self.work = work

    def run(self, *args, capture=True):
        command = [self.binary, *map(str, args)]
        log(" ".join(command))
        done = subprocess.run(
            command,
            cwd=self.work,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"mlless {' '.join(map(str, args))} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def bench_cloud(self, job, clouds, workers, patterns, updates, steps=5):
        out = self.run(
            "bench", "cloud", "--json", "--job", job, "--emulate", ",".join(clouds),
            "--workers", ",".join(map(str, workers)), "--pattern", ",".join(patterns),
            "--update", ",".join(updates), "--steps", steps,
        )
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def cost(self, record, cloud, workers, vm="c5.large"):
        """`mlless cost`'s rows: {(platform kind, P): (steps, step ms, time s, cost USD)}."""
        out = self.run(
            "cost", record, "--emulate", cloud, "--workers", ",".join(map(str, workers)),
            "--vm", vm,
        )
        rows = {}
        for line in out.splitlines():
            m = re.match(r"^(.*?\((FaaS|VM)\))\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
            if m:
                rows[(m.group(2), int(m.group(3)))] = (
                    int(m.group(4)), float(m.group(5)), float(m.group(6)), float(m.group(7)))
        return rows


def record_of(path):
    with open(path) as f:
        return json.load(f)


def reached(record, target, lower_is_better=True):
    """The first validation point that reaches `target`: (step, epoch, time s), or None."""
    validation = record.get("validation") or {}
    metric = validation.get("metric")
    for point in validation.get("points", []):
        value = point["metrics"].get(metric)
        if value is None:
            continue
        if (value <= target) if lower_is_better else (value >= target):
            return point["step"] + 1, point["epoch"], point["time_s"]
    return None


def best_metric(record):
    validation = record["validation"]
    best = validation["best"]
    return validation["points"][best]["metrics"][validation["metric"]]


def default_pattern(workers, cloud):
    """`train`'s default pattern by P on the cloud's kind of channel (BSP and ISP): the limits
    of `mlless_job::Pattern::broadcast_limit` (`BROADCAST_MAX_ON_STORE`, `_ON_SERVER`)."""
    limit = 16 if cloud == "s3" else 64
    return "broadcast" if workers <= limit else "allreduce"


def pick(rows, **keys):
    for row in rows:
        if all(row[k] == v for k, v in keys.items()):
            return row
    raise KeyError(keys)


def pct(a, b):
    return f"{(a / b - 1) * 100:+.0f}%" if b else "n/a"


def prepared(m, work, name, generate, prepare):
    """The data set `work/name`, generated (`generate` arguments, into `work/name.data`) and
    prepared (`prepare` arguments) unless it already is."""
    data = work / name
    if not (data / "manifest.json").exists():
        raw = work / f"{name}.data"
        m.run("generate", *generate, "--out", raw)
        m.run("prepare", *prepare, "--input", raw, "--out", data)
    return data


def trained(m, record, *train):
    """The record of `mlless train TRAIN… --quiet --record RECORD`, run unless it exists."""
    if not record.exists():
        m.run("train", *train, "--quiet", "--record", record)
    return record_of(record)


def own_target(rec, what):
    """A run's own target (its best validation metric + 1%) and when it first reached it."""
    target = round(best_metric(rec) * 1.01, 4)
    hit = reached(rec, target)
    if hit is None:
        sys.exit(f"the {what} run never reached its own target")
    return (target, *hit)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def scale_out(m, work, epochs):
    """MLLess's scale-out: MovieLens-20M-shaped PMF, global batch 12,000, P = 12 … 96, Redis."""
    data = prepared(m, work, "ml20m",
                    ["ratings", "--users", 138_493, "--items", 26_744, "--density", 0.0054],
                    ["--format", "movielens", "--batch-size", 3000])
    record = work / "ml20m-p4.json"
    rec = trained(m, record, "--data", data, "--model", "pmf", "--workers", 4,
                  "--global-batch", 12_000, "--sync", "isp", "--max-epochs", epochs)
    target, steps, epoch, local_s = own_target(rec, "scale-out")
    fleets = [12, 24, 48, 96]
    sim = m.bench_cloud("pmf-20m", ["elasticache"], fleets, ["broadcast", "allreduce"], ["isp", "bsp"])
    proj = m.cost(record, "elasticache", fleets)
    rows = []
    redis_hour = 0.17
    for p in fleets:
        pattern = default_pattern(p, "elasticache")
        case = pick(sim, workers=p, pattern=pattern, update="isp:0.7")
        step_s = case["step_ms"] / 1e3
        time_s = steps * step_s
        faas_one = steps * case["usd_per_step"]
        faas_two = faas_one + time_s / 3600 * redis_hour
        _, model_ms, _, _ = proj[("FaaS", p)]
        _, vm_ms, _, _ = proj[("VM", p)]
        vm_time = 60 + steps * vm_ms / 1e3
        vm_usd = p * 0.085 / 3600 * max(60, vm_time)
        rows.append([
            p, pattern, f"{case['step_ms']:.1f}", f"{model_ms:.1f} ({pct(model_ms, case['step_ms'])})",
            f"{case['epoch_s']:.0f}", f"{time_s:.0f}", f"{faas_one:.3f}", f"{faas_two:.3f}",
            f"{vm_time:.0f}", f"{vm_usd:.3f}",
        ])
    text = (
        f"MovieLens-20M-shaped PMF (20,000,440 generated ratings, 138,493 × 26,744, rank 10), "
        f"ISP (V = 0.7), global batch 12,000 (minibatches of 3,000), ElastiCache's latency. "
        f"Target: validation RMSE ≤ {target} (the local run's best + 1%), reached after "
        f"{steps} steps ({epoch:.2f} epochs; {local_s:.0f} s with 4 local workers, ISP, on this "
        f"machine). Steps to the target are those of the local run at every P (the global batch "
        f"is held). `step ms`: the simulated fleet's; `model`: `mlless cost --emulate "
        f"elasticache` of the local run (its difference from the simulation). Redis 2 shards: "
        f"one more ElastiCache node for the run's time (the emulation has no server limit, so "
        f"the time is that of one). VMs: P × c5.large ($0.085/h), start-up 60 s.\n\n"
    )
    return text + table(
        ["P", "pattern", "step ms", "model ms", "epoch s", "to target s", "FaaS $ (1 shard)",
         "FaaS $ (2 shards)", "VM s", "VM $"], rows)


def protocols(m, work, epochs):
    """MLLess's ISP vs SSP vs BSP at P = 12 and 24: time to the same target on this machine."""
    data = prepared(m, work, "ml1m",
                    ["ratings", "--users", 6_040, "--items", 3_706, "--density", 0.0447],
                    ["--format", "movielens", "--batch-size", 1000])
    redis_port = os.environ.get("MLLESS_PAPERS_REDIS_PORT", "6399")
    runs = {}
    for p in (12, 24):
        for sync in ("bsp", "isp", "ssp"):
            runs[(p, sync)] = trained(
                m, work / f"ml1m-{sync}-p{p}.json", "--data", data, "--model", "pmf",
                "--workers", p, "--sync", sync, "--global-batch", 12_000, "--max-epochs", epochs,
                "--emulate", "elasticache", "--channel", f"redis://127.0.0.1:{redis_port}")
    rows = []
    for p in (12, 24):
        target = round(max(best_metric(runs[(p, s)]) for s in ("bsp", "isp", "ssp")) * 1.01, 4)
        bsp = reached(runs[(p, "bsp")], target)
        for sync in ("bsp", "isp", "ssp"):
            rec = runs[(p, sync)]
            hit = reached(rec, target)
            sent = sum(w["bytes_sent"] for s in rec["steps"] for w in s["workers"])
            if hit is None:
                rows.append([p, sync, target, "not reached", "", "", f"{sent / 1e6:.0f}"])
                continue
            steps, epoch, t = hit
            speedup = f"{bsp[2] / t:.2f}x" if bsp else ""
            rows.append([p, sync, target, steps, f"{epoch:.1f}", f"{t:.1f} ({speedup})",
                         f"{sent / 1e6:.0f}"])
    text = (
        "MovieLens-1M-shaped PMF (about 1M generated ratings, 6,040 × 3,706), global batch "
        "12,000, real runs of P workers on this machine's 2 cores through a local Redis with "
        "ElastiCache's latency added (`--emulate elasticache`): the P processes share 2 cores, "
        "so the times are this machine's, not a cloud's. Target: validation RMSE within 1% of the "
        "worst of the three protocols' best. `time s`: the supervisor's clock when the target "
        "was first reached (speed-up over BSP); MB: bytes the workers sent in the whole run.\n\n"
    )
    return text + table(["P", "sync", "target RMSE", "steps", "epochs", "time s (vs BSP)",
                         "MB sent"], rows)


def criteo(m, work, epochs):
    """Criteo-shaped sparse LR at P = 16, 64, 256, on S3's and ElastiCache's latencies."""
    data = prepared(m, work, "criteo", ["criteo", "--samples", 1_000_000],
                    ["--format", "criteo", "--features", 1 << 20, "--batch-size", 1000])
    record = work / "criteo-p4.json"
    rec = trained(m, record, "--data", data, "--model", "lr", "--workers", 4,
                  "--max-epochs", epochs)
    target, steps, epoch, local_s = own_target(rec, "Criteo-shaped")
    fleets = [16, 64, 256]
    rows = []
    for cloud in ("s3", "elasticache"):
        sim = m.bench_cloud("criteo", [cloud], fleets, ["broadcast", "allreduce"], ["bsp"])
        proj = m.cost(record, cloud, fleets)
        for p in fleets:
            pattern = default_pattern(p, cloud)
            case = pick(sim, workers=p, pattern=pattern, update="bsp")
            _, model_ms, _, _ = proj[("FaaS", p)]
            _, vm_ms, _, _ = proj[("VM", p)]
            time_s = steps * case["step_ms"] / 1e3
            usd = steps * case["usd_per_step"]
            vm_time = 60 + steps * vm_ms / 1e3
            vm_usd = p * 0.085 / 3600 * max(60, vm_time)
            rows.append([
                cloud, p, pattern, f"{case['step_ms']:.1f}",
                f"{model_ms:.1f} ({pct(model_ms, case['step_ms'])})",
                f"{case['epoch_s']:.0f}", f"{case['usd_per_epoch']:.2f}", f"{time_s:.1f}",
                f"{usd:.4f}", f"{vm_time:.0f}", f"{vm_usd:.3f}",
            ])
    text = (
        f"Criteo-shaped sparse LR (Kaggle Criteo's columns hashed into 2^20 features), BSP, "
        f"the defaults (global batch 4,000). `epoch s` and `$/epoch`: a pass over the Kaggle "
        f"set's 45.8M rows, simulated. To the target: validation log loss ≤ {target} (the best "
        f"+ 1%) of a local run on 1M generated rows, reached after {steps} steps ({epoch:.2f} "
        f"epochs; {local_s:.0f} s with 4 local workers), at the simulated step and bill; VMs: "
        f"P × c5.large from `mlless cost --emulate`.\n\n"
    )
    return text + table(["cloud", "P", "pattern", "step ms", "model ms", "epoch s", "$/epoch",
                         "to target s", "FaaS $", "VM s", "VM $"], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the mlless binary")
    parser.add_argument("--dir", required=True, help="where the data, runs and tables go")
    parser.add_argument("--only", choices=["scale-out", "protocols", "criteo"], action="append",
                        help="run only these experiments (repeatable)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the local runs")
    args = parser.parse_args()
    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    m = Mlless(str(Path(args.bin).resolve()), work)
    only = args.only or ["scale-out", "protocols", "criteo"]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    options = "".join(f" --only {name}" for name in args.only or [])
    if args.epochs != 3:
        options += f" --epochs {args.epochs}"
    sections = [
        f"Measured {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), mlless {rev}, "
        f"with `scripts/bench-papers.sh{options}`."
    ]
    experiments = {
        "scale-out": ("MLLess's scale-out", scale_out),
        "protocols": ("MLLess's ISP, SSP and BSP", protocols),
        "criteo": ("Criteo-shaped LR at scale", criteo),
    }
    for name in only:
        title, run = experiments[name]
        started = time.time()
        sections.append(f"#### {title}\n\n{run(m, work, args.epochs)}")
        log(f"{name}: {time.time() - started:.0f} s")
    text = "\n\n".join(sections) + "\n"
    (work / "papers.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
