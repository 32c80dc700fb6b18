//! Proves the benchmark runs: `drain` and `latency` with a few jobs against the test server
//! (`DATABASE_URL`, else the local default), checking the output's fields and that every job
//! was finalized. Speed is not asserted.

use std::process::Command;

use serde_json::Value;

/// Runs `job-bench ARGS` and returns its output lines as JSON.
fn bench(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_job-bench"))
        .args(args)
        .output()
        .expect("job-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "job-bench {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn number(line: &Value, field: &str) -> f64 {
    line[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number `{field}` in {line}"))
}

fn common(line: &Value, workload: &str, jobs: f64) {
    assert_eq!(line["workload"], workload, "{line}");
    assert_eq!(number(line, "jobs"), jobs, "{line}");
    assert!(number(line, "concurrency") >= 1.0, "{line}");
    assert!(number(line, "seconds") > 0.0, "{line}");
}

#[test]
fn drain_runs_and_finalizes_every_job() {
    let lines = bench(&["drain", "--jobs", "500", "--concurrency", "4"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    common(line, "drain", 500.0);
    assert!(number(line, "jobs_per_s") > 0.0, "{line}");
    assert!(number(line, "raw_jobs_per_s") > 0.0, "{line}");
    assert_eq!(number(line, "completed"), 500.0, "{line}");
    assert_eq!(number(line, "raw_completed"), 500.0, "{line}");
    assert!(number(line, "peak_rss_mib") > 0.0, "{line}");
}

#[test]
fn latency_runs_and_finalizes_every_job() {
    let lines = bench(&["latency", "--jobs", "50", "--gap-ms", "5"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    common(line, "latency", 50.0);
    for field in ["p50_ms", "p99_ms", "max_ms"] {
        number(line, field);
    }
    assert!(number(line, "p50_ms") <= number(line, "p99_ms"), "{line}");
    assert!(number(line, "p99_ms") <= number(line, "max_ms"), "{line}");
    assert_eq!(number(line, "completed"), 50.0, "{line}");
}

#[test]
fn the_sqlite_drain_and_latency_run_and_finalize_every_job() {
    let lines = bench(&["drain_sqlite", "--jobs", "500", "--concurrency", "4"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    common(line, "drain_sqlite", 500.0);
    assert!(number(line, "jobs_per_s") > 0.0, "{line}");
    assert_eq!(number(line, "completed"), 500.0, "{line}");

    let lines = bench(&["latency_sqlite", "--jobs", "50", "--gap-ms", "5"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    common(line, "latency_sqlite", 50.0);
    assert!(number(line, "p50_ms") <= number(line, "p99_ms"), "{line}");
    assert!(number(line, "p99_ms") <= number(line, "max_ms"), "{line}");
}
