//! The report page in a real browser: headless Chromium (Debian's `chromium`, which
//! `scripts/test.sh` installs) loads a report of three runs, runs its script without an error
//! or a console message, shows every run's curve, and takes a screenshot that is kept as
//! `target/tmp/report-screenshot.png`. Skipped, saying so, where no Chromium can start.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::record;
use mlless_report::{Run, label_runs, render_runs, run_color_hex};

/// The Chromium binary: `$MLLESS_CHROMIUM`, or the first of the usual names on the `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MLLESS_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| {
            ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name))
        })
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `page` with `args` and a profile of its own (so that it shares
/// nothing with a browser already open): its standard output and error, or `None` (with the
/// reason printed) when it cannot start.
fn headless(browser: &Path, page: &Path, args: &[&str]) -> Option<(String, String)> {
    let profile = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(browser)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output();
    match output {
        Ok(out) if out.status.success() => Some((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )),
        Ok(out) => {
            eprintln!(
                "SKIPPED: {} did not run ({}): {}",
                browser.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("SKIPPED: {} cannot start: {e}", browser.display());
            None
        }
    }
}

/// Three runs: the record of the other tests, a slower one on 2 workers, and one with a
/// validation curve.
fn runs() -> Vec<Run> {
    let base = record();
    let mut slow = record();
    slow.spec.job_id = "job-slow".into();
    slow.spec.training.workers = 2;
    for step in &mut slow.steps {
        step.time_s *= 1.6;
        step.loss = 0.9 * step.loss + 0.05;
    }
    let mut validated = record();
    validated.spec.job_id = "job-validated".into();
    validated.spec.training.workers = 8;
    validated.validation = Some(mlless_job::record::ValidationRecord {
        metric: "logloss".into(),
        points: (0..7u64)
            .map(|k| mlless_job::record::EvalPoint {
                step: 10 * k,
                epoch: 0.3 * k as f64,
                time_s: 0.1 * k as f64,
                cost_usd: None,
                metrics: [("logloss".to_string(), 0.7 - 0.04 * k as f64)]
                    .into_iter()
                    .collect(),
                last: k == 6,
            })
            .collect(),
        best: Some(6),
        targets: Vec::new(),
    });
    let mut runs: Vec<Run> = [base, slow, validated].into_iter().map(Run::new).collect();
    label_runs(&mut runs);
    runs
}

#[test]
fn the_page_loads_in_chromium_with_every_run_and_a_screenshot() {
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED: no Chromium found (install Debian's `chromium`, or set MLLESS_CHROMIUM); \
             scripts/test.sh installs it"
        );
        return;
    };
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-browser");
    let runs = runs();
    let files = render_runs(&runs, &out).unwrap();
    // The SVG files parse.
    for figure in &files.figures {
        let text = std::fs::read_to_string(figure).unwrap();
        roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", figure.display()));
    }
    let page = files.html.canonicalize().unwrap();

    // The DOM after the page's script ran.
    let Some((dom, stderr)) = headless(&browser, &page, &["--dump-dom"]) else {
        return;
    };
    assert!(
        dom.contains("data-ready=\"yes\""),
        "the page's script did not finish:\n{stderr}"
    );
    assert!(
        !dom.contains("data-script-error=\""),
        "the page's script failed: {}",
        dom.split("data-script-error=\"").nth(1).unwrap_or_default()
    );
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    // The x-axis selector of the loss and validation figures.
    assert_eq!(dom.matches("<div class=\"axes\">").count(), 2, "selectors");
    // Every run's curve, in its colour, in each of the loss figure's four panels (smoothed
    // and raw), and the validated run's in the validation figure.
    let figure = |id: &str| -> &str {
        let start = dom
            .find(&format!("<figure id=\"fig-{id}\""))
            .unwrap_or_else(|| panic!("no figure {id}"));
        let end = start + dom[start..].find("</figure>").unwrap();
        &dom[start..end]
    };
    let loss = figure("loss");
    for (i, run) in runs.iter().enumerate() {
        let curves = loss
            .split("<polyline")
            .skip(1)
            .filter(|p| p.contains(&format!("stroke=\"{}\"", run_color_hex(i))))
            .filter(|p| p.split_whitespace().count() > 20)
            .count();
        assert!(
            curves >= 8,
            "{}: {curves} curves in the loss figure",
            run.label
        );
        assert!(loss.contains(&run.label), "{} not in the legend", run.label);
    }
    assert!(figure("validation").contains(&format!("stroke=\"{}\"", run_color_hex(2))));
    assert!(figure("timeline").contains("Invocations of"));

    // The screenshot, kept.
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    let _ = std::fs::remove_file(&screenshot);
    let arg = format!("--screenshot={}", screenshot.display());
    if headless(&browser, &page, &[&arg, "--window-size=1400,4200"]).is_none() {
        return;
    }
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        png.len() > 50_000,
        "a blank screenshot? {} bytes",
        png.len()
    );
    println!("screenshot: {}", screenshot.display());
    println!("report: {}", page.display());
}
