//! Job ids (issue #20, "no collisions"): a new id is unique and time-ordered (a UUIDv7), the
//! commands that read ids (`mlless runs`, `runs --clean --job`) take it, and two runs of one
//! job id (given with the hidden test aid `--job-id`) cannot both start: the second is refused
//! before any of its functions starts, and the first run is left exactly as it was.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use mlless_data::SparseLrSpec;

/// A small sparse-LR set: 4,000 rows × 1,000 features, batches of 500.
fn small_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(4_000, 1_000, 10, 5);
    sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0"])
}

/// Whether `id` is `job-` and a UUIDv7 in its simple form.
fn is_uuid7_id(id: &str) -> bool {
    id.strip_prefix("job-").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            && hex.as_bytes()[12] == b'7'
    })
}

/// Every file below `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                files.insert(path, bytes);
            }
        }
    }
    files
}

#[test]
fn job_ids_are_unique_time_ordered_and_never_shared_by_two_runs() {
    let dir = tempdir();
    let data = small_data(dir.path());
    let runs = dir.path().join("runs");
    let (d, r) = (s(&data), s(&runs));
    let base = [
        "--data",
        d.as_str(),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "1",
        "--runs",
        r.as_str(),
    ];

    // New ids: UUIDv7s, different, in the order the runs started.
    let first = train(dir.path(), "first", &base);
    let second = train(dir.path(), "second", &base);
    let (a, b) = (&first.spec.job_id, &second.spec.job_id);
    assert!(is_uuid7_id(a) && is_uuid7_id(b), "{a} {b}");
    assert!(a < b, "ids sort by their start: {a} then {b}");
    assert!(first.spec.run_url.as_str().ends_with(&format!("/{a}")));

    // `mlless runs` lists them, the newest first; `--clean --job` finds a run by its id.
    let listed = String::from_utf8_lossy(&ok(&["runs", &r]).stdout).into_owned();
    let (at_a, at_b) = (
        listed.find(&format!("{a}  finished")),
        listed.find(&format!("{b}  finished")),
    );
    assert!(
        matches!((at_a, at_b), (Some(x), Some(y)) if y < x),
        "{listed}"
    );
    let cleaned =
        String::from_utf8_lossy(&ok(&["runs", &r, "--clean", "--job", a]).stdout).into_owned();
    assert!(cleaned.contains(&format!("{a}  cleaned")), "{cleaned}");

    // Two runs given one id: the first trains, the second is refused before anything starts.
    let mut fixed = base.to_vec();
    fixed.extend(["--job-id", "job-fixed"]);
    let kept = train(dir.path(), "fixed", &fixed);
    assert_eq!(kept.spec.job_id, "job-fixed");
    let run = runs.join("job-fixed");
    let before = snapshot(&run);
    let mut again = vec!["train", "--quiet"];
    again.extend(&fixed);
    let err = fails(&again);
    let location = std::fs::canonicalize(&run).expect("the run exists");
    assert!(
        err.contains("job job-fixed exists already at")
            && err.contains(&format!("file://{}", location.display()))
            && err.contains("did not start"),
        "{err}"
    );
    // Nothing of the first run changed: no spec, record or model written over, no heartbeat
    // of a second driver, no failure left, no channel or checkpoint object.
    assert!(snapshot(&run) == before, "the first run was touched");
    assert!(before.keys().any(|p| p.ends_with("model.bin")));

    // A given id must be one key segment on every store and channel.
    let mut bad = base.to_vec();
    bad.extend(["--job-id", "a:b"]);
    let mut args = vec!["train", "--quiet"];
    args.extend(&bad);
    let err = fails(&args);
    assert!(err.contains("--job-id \"a:b\""), "{err}");
}
