//! `prepare` of inputs larger than its memory limit: shuffled through temporary files, in
//! bounded memory, into the very data set an unbounded run gives — every input row exactly once,
//! the splits exact, the order shuffled and fixed by the seed.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use mlless_core::{Batch, SparseBatch};
use mlless_runtime::dataset::Split;

/// A LIBSVM file of `rows` rows whose first feature is the row's position (so that a row tells
/// where it came from), with 40 more features: about 450 bytes a row.
fn write_positions(path: &Path, rows: u32) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create input"));
    for i in 0..rows {
        let label = if i % 3 == 0 { "+1" } else { "-1" };
        write!(out, "{label} 1:{i}").expect("write");
        for k in 0..40u32 {
            let index = 2 + (i.wrapping_mul(2_654_435_761) >> 8).wrapping_add(k * 997) % 50_000;
            write!(out, " {}:0.{:04}", index + k * 50_000, (i + k) % 9_999 + 1).expect("write");
        }
        writeln!(out).expect("write");
    }
    out.flush().expect("flush");
}

/// Runs `mlless prepare` of `input` into `out` with `--memory-mb memory_mb` and `extra`; returns
/// its peak resident memory in MB, read from /proc while it runs.
fn prepare_measured(input: &Path, out: &Path, memory_mb: u32, extra: &[&str]) -> f64 {
    let temp = out.with_extension("tmp");
    std::fs::create_dir_all(&temp).expect("temp dir");
    let mut child = mlless()
        .args(["prepare", "--format", "libsvm", "--input", &s(input)])
        .args(["--out", &s(out), "--batch-size", "500"])
        .args([
            "--memory-mb",
            &memory_mb.to_string(),
            "--temp-dir",
            &s(&temp),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        {
            peak_kb = peak_kb.max(kb);
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().expect("mlless ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let left = std::fs::read_dir(&temp).expect("temp dir").count();
    assert_eq!(left, 0, "the temporary files are removed");
    peak_kb as f64 / 1024.0
}

/// The rows of each split (train, validation, test), in order.
fn rows(data: &Path) -> [SparseBatch; 3] {
    [Split::Train, Split::Validation, Split::Test].map(|split| {
        let mut all = SparseBatch::new();
        for batch in batches(data, split) {
            let Batch::Sparse(rows) = batch else {
                panic!("sparse minibatches expected")
            };
            for r in 0..rows.rows() {
                let (label, indices, values) = rows.row(r);
                all.push_row(label, indices, values);
            }
        }
        all
    })
}

/// The input position of each row (its feature 0).
fn positions(rows: &SparseBatch) -> Vec<u32> {
    (0..rows.rows())
        .map(|r| {
            let (_, indices, values) = rows.row(r);
            assert_eq!(indices[0], 0, "the position feature comes first");
            values[0] as u32
        })
        .collect()
}

/// Every minibatch object under `dir`, with its bytes, in path order.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for split in ["train", "validation", "test"] {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(split))
            .expect("split dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = s(path.strip_prefix(dir).expect("under dir"));
            out.push((name, std::fs::read(&path).expect("read")));
        }
    }
    out
}

#[test]
fn an_input_larger_than_the_memory_limit_is_shuffled_exactly_in_bounded_memory() {
    let dir = tempdir();
    let n = 200_000u32;
    let input = dir.path().join("big.svm");
    write_positions(&input, n);
    let input_mb = std::fs::metadata(&input).expect("input").len() as f64 / 1e6;
    assert!(
        input_mb > 64.0,
        "the input ({input_mb:.0} MB) is larger than the limit"
    );

    let bounded = dir.path().join("bounded");
    let peak = prepare_measured(&input, &bounded, 64, &[]);
    assert!(peak <= 64.0, "peak RSS {peak:.0} MB under --memory-mb 64");
    let unbounded = dir.path().join("unbounded");
    let unbounded_peak = prepare_measured(&input, &unbounded, 4096, &[]);
    eprintln!(
        "peak RSS of {input_mb:.0} MB: {peak:.0} MB at --memory-mb 64, {unbounded_peak:.0} MB at 4096"
    );
    assert!(
        unbounded_peak > 1.5 * peak,
        "in memory the same input takes {unbounded_peak:.0} MB, spilled {peak:.0} MB"
    );
    // The same data set, byte for byte, whatever the memory.
    assert!(files(&bounded) == files(&unbounded), "the same minibatches");

    // Exact splits: the test fraction of the input, then the validation fraction of the rest.
    let [train, validation, test] = rows(&bounded);
    let test_n = (f64::from(n) * 0.1).round() as usize;
    let validation_n = ((f64::from(n) - test_n as f64) * 0.1).round() as usize;
    assert_eq!(test.rows(), test_n);
    assert_eq!(validation.rows(), validation_n);
    assert_eq!(train.rows(), n as usize - test_n - validation_n);

    // Every input row once, whole (labels mapped to 0/1, indices 0-based).
    let parsed = mlless_data::parse_file(
        &input,
        mlless_data::InputFormat::Libsvm,
        &mlless_data::ParseOptions::default(),
    )
    .expect("parse");
    let mlless_data::Parsed::Sparse { rows: original, .. } = parsed else {
        panic!("sparse input")
    };
    let mut seen = vec![false; n as usize];
    for split in [&train, &validation, &test] {
        for (r, position) in positions(split).into_iter().enumerate() {
            assert!(!seen[position as usize], "row {position} twice");
            seen[position as usize] = true;
            assert_eq!(
                split.row(r),
                original.row(position as usize),
                "row {position}"
            );
        }
    }
    assert!(seen.iter().all(|&s| s), "every row");

    // Shuffled: input deciles against output deciles, chi-square with 81 degrees of freedom
    // (1% critical value 113.5); in input order it would be 9·n.
    let order: Vec<u32> = [&train, &validation, &test]
        .into_iter()
        .flat_map(positions)
        .collect();
    let mut table = [[0u32; 10]; 10];
    for (at, &from) in order.iter().enumerate() {
        table[(from as usize * 10) / n as usize][at * 10 / n as usize] += 1;
    }
    let expected = f64::from(n) / 100.0;
    let chi2: f64 = table
        .iter()
        .flatten()
        .map(|&c| (f64::from(c) - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 113.5, "chi-square {chi2} of positions");

    // Another seed, another order of the same rows.
    let reseeded = dir.path().join("reseeded");
    prepare_measured(&input, &reseeded, 64, &["--seed", "2"]);
    let other: Vec<u32> = rows(&reseeded).iter().flat_map(positions).collect();
    assert_ne!(other, order);
    let (mut a, mut b) = (other, order);
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

#[test]
fn test_and_validation_inputs_keep_their_order_through_disk() {
    let dir = tempdir();
    let (train_input, test_input, validation_input) = (
        dir.path().join("train.svm"),
        dir.path().join("test.svm"),
        dir.path().join("validation.svm"),
    );
    write_positions(&train_input, 60_000);
    write_positions(&test_input, 50_000);
    write_positions(&validation_input, 40_000);
    let extra = [
        "--test-input",
        &s(&test_input),
        "--validation-input",
        &s(&validation_input),
    ];
    let bounded = dir.path().join("bounded");
    prepare_measured(&train_input, &bounded, 32, &extra);
    let unbounded = dir.path().join("unbounded");
    prepare_measured(&train_input, &unbounded, 4096, &extra);
    assert!(files(&bounded) == files(&unbounded), "the same minibatches");
    let [train, validation, test] = rows(&bounded);
    assert_eq!(positions(&test), (0..50_000).collect::<Vec<_>>());
    assert_eq!(positions(&validation), (0..40_000).collect::<Vec<_>>());
    let mut shuffled = positions(&train);
    assert_ne!(shuffled, (0..60_000).collect::<Vec<_>>());
    shuffled.sort_unstable();
    assert_eq!(shuffled, (0..60_000).collect::<Vec<_>>());
}

#[test]
fn a_preparation_cancelled_while_it_spills_removes_its_temporary_files() {
    let dir = tempdir();
    let input = dir.path().join("big.svm");
    write_positions(&input, 200_000);
    let (out, temp) = (dir.path().join("data"), dir.path().join("tmp"));
    std::fs::create_dir_all(&temp).expect("temp dir");
    let mut child = mlless()
        .args(["prepare", "--format", "libsvm", "--input", &s(&input)])
        .args([
            "--out",
            &s(&out),
            "--memory-mb",
            "16",
            "--temp-dir",
            &s(&temp),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    // Once a run is on disk, Ctrl-C.
    let started = std::time::Instant::now();
    let spilled = || {
        std::fs::read_dir(&temp)
            .expect("temp dir")
            .filter_map(|e| std::fs::read_dir(e.ok()?.path()).ok())
            .any(|mut runs| runs.next().is_some())
    };
    while !spilled() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "prepare ended before it spilled"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no run spilled"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let output = child.wait_with_output().expect("mlless ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("cancelled while reading the input"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&temp).expect("temp dir").collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    assert!(!out.join("manifest.json").exists());
}
