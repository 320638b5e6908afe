//! `mlless report` on several real runs: one page overlaying them, the table of the runs as
//! CSV, a run given by its directory as well as by its record file, the map tasks of the data
//! set's preparation on the timeline.

mod common;

use common::*;

#[test]
fn report_overlays_runs_given_by_record_or_directory() {
    let dir = tempdir();
    let spec = mlless_data::SparseLrSpec::new(8_000, 2_000, 10, 5);
    // Min-max normalised by 2 map tasks a round: the preparation records their invocations.
    let data = sparse_lr_prepared(
        dir.path(),
        &spec,
        &["--normalize", "minmax", "--map-tasks", "2"],
    );
    let preparation: mlless_job::PrepareRecord = serde_json::from_slice(
        &std::fs::read(data.join(mlless_job::record::PREPARE_RECORD_KEY))
            .expect("prepare.json beside the manifest"),
    )
    .expect("prepare.json parses");
    let names: Vec<&str> = preparation
        .invocations
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["range-map-0", "range-map-1", "scale-map-0", "scale-map-1"]
    );
    let data = s(&data);
    let common = [
        "--data",
        data.as_str(),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "1",
    ];
    let bsp = train(dir.path(), "bsp", &common);
    let mut isp_args = common.to_vec();
    isp_args.extend(["--sync", "isp"]);
    let isp = train(dir.path(), "isp", &isp_args);

    // The ISP run by its run directory (`{runs}/{job}`, holding record.json).
    let out = dir.path().join("compared");
    let isp_dir = isp.spec.run_url.as_str().trim_start_matches("file://");
    let printed = ok(&[
        "report",
        &s(&dir.path().join("bsp.json")),
        isp_dir,
        "--out",
        &s(&out),
    ]);
    let stdout = String::from_utf8_lossy(&printed.stdout);
    assert!(stdout.contains(&bsp.spec.job_id) && stdout.contains(&isp.spec.job_id));

    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("mlless: 2 runs compared"));
    for job in [&bsp.spec.job_id, &isp.spec.job_id] {
        assert!(html.contains(job.as_str()), "{job}");
    }
    // Labelled by what differs: the sync mode, the only difference.
    let start = html
        .find("<table class=\"runs\">")
        .expect("the runs' table");
    let table = &html[start..start + html[start..].find("</table>").expect("its end")];
    assert!(table.contains("<th>sync</th>"));
    assert!(
        !table.contains("<th>workers</th>"),
        "equal options are not shown: {table}"
    );
    let csv = std::fs::read_to_string(out.join("runs.csv")).expect("runs.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("run,sync,"), "{}", lines[0]);
    assert!(lines[1].starts_with("bsp,bsp,"), "{}", lines[1]);
    // ISP's default scale adds ", relative to the mean weight" to the label: quoted.
    assert!(lines[2].starts_with("\"isp (V = 1, "), "{}", lines[2]);
    for figure in [
        "loss.svg",
        "cost.svg",
        "timeline.svg",
        "step-time.svg",
        "bytes.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(figure)).expect("figure written");
        roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{figure}: {e}"));
        assert!(html.contains(svg.trim()), "the page inlines {figure}");
    }
    let timeline = std::fs::read_to_string(out.join("timeline.svg")).expect("timeline.svg");
    assert_eq!(timeline.matches("Map tasks of preparing").count(), 1);
    for name in names {
        assert!(timeline.contains(name), "{name} on the timeline");
    }

    // `mlless runs` shows what sets the runs apart (a BSP and an ISP run looked identical).
    let runs = s(&std::path::PathBuf::from(&data).join("runs"));
    let listed = String::from_utf8_lossy(&ok(&["runs", &runs]).stdout).into_owned();
    let settings: Vec<&str> = listed
        .lines()
        .filter(|l| l.trim_start().starts_with("sync "))
        .collect();
    assert_eq!(settings.len(), 2, "{listed}");
    assert!(settings.iter().any(|l| l.contains("sync bsp")), "{listed}");
    assert!(settings.iter().any(|l| l.contains("sync isp")), "{listed}");
    assert!(
        !listed.contains("workers 2"),
        "equal settings are not shown: {listed}"
    );

    // --json on runs, report and cost: one document on standard output.
    let json = |args: &[&str]| -> serde_json::Value {
        let output = ok(args);
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not one JSON document ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    };
    let listed = json(&["runs", &runs, "--json"]);
    let listed = listed.as_array().expect("an array of runs");
    assert_eq!(listed.len(), 2);
    for run in listed {
        assert_eq!(run["status"], "finished", "{run}");
        assert!(run["settings"]["sync"].is_string(), "{run}");
        assert!(run["settings"].get("workers").is_none(), "{run}");
        assert_eq!(run["summary"]["job_id"], run["job_id"]);
    }
    let bsp_json = s(&dir.path().join("bsp.json"));
    let report = json(&["report", &bsp_json, isp_dir, "--summary-only", "--json"]);
    assert_eq!(report["runs"][0]["job_id"], bsp.spec.job_id.as_str());
    assert_eq!(report["runs"][1]["job_id"], isp.spec.job_id.as_str());
    let again = dir.path().join("again");
    let report = json(&["report", &bsp_json, "--out", &s(&again), "--json"]);
    assert!(
        report["files"].as_array().is_some_and(|f| f
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.ends_with("report.html")))),
        "{report}"
    );
    let cost = json(&["cost", &bsp_json, "--workers", "1,2", "--json"]);
    assert_eq!(cost["job_id"], bsp.spec.job_id.as_str());
    let predictions = cost["predictions"].as_array().expect("predictions");
    assert!(
        predictions
            .iter()
            .any(|p| p["kind"] == "faas" && p["workers"] == 2 && p["runs_fleet"] == true),
        "{cost}"
    );
    assert!(predictions.iter().any(|p| p["kind"] == "vm"), "{cost}");
}
