//! The promises of `examples/streaming_export.rs`, checked against a real PostgreSQL: a
//! million-row export stays under 64 MiB of resident memory (measured in a child process),
//! outlives its short lease on one attempt, refuses a duplicate request, and a retried export
//! leaves exactly one object.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobState, WorkerConfig};
use job_testkit::{Faults, Point, TestDb};
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

#[allow(dead_code)] // the example's `main` and the helpers only it uses
#[path = "../examples/streaming_export.rs"]
mod example;

/// Set in the child process: the database URL it exports from.
const CHILD_DB: &str = "JOB_EXPORT_CHILD_DATABASE_URL";
/// Set in the child process: the local object store's directory.
const CHILD_STORE: &str = "JOB_EXPORT_CHILD_STORE_DIR";
/// The line the child prints its peak resident memory on.
const HWM_PREFIX: &str = "export-child VmHWM kB: ";

/// A fresh directory for a local object store, removed when dropped.
struct StoreDir(PathBuf);

impl StoreDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("job-export-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        StoreDir(dir)
    }

    fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::new(LocalFileSystem::new_with_prefix(&self.0).unwrap())
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir`, staging files of unfinished uploads included.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The peak resident set size of this process, from /proc/self/status.
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Not a test of its own: the body of the child process that
/// `a_million_row_export_stays_under_64_mib_and_outlives_its_lease` starts; ignored in a
/// normal run, so it never passes without checking anything.
#[tokio::test]
#[ignore = "run in a child process by a_million_row_export_stays_under_64_mib_and_outlives_its_lease"]
async fn export_child_process() {
    let url = std::env::var(CHILD_DB).expect("started by the parent test, which sets the database");
    let dir = std::env::var(CHILD_STORE).expect("started by the parent test, which sets the store");
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    let summary = example::run(&pool, store, 1, example::ROWS, |b| b)
        .await
        .unwrap();
    pool.close().await;
    println!(
        "export-child summary: state={} attempt={} errors={} duplicate_of={:?} job={} lines={} bytes={} objects={:?} elapsed_ms={} renewals={}",
        summary.row.state,
        summary.row.attempt,
        summary.row.errors.len(),
        summary.duplicate_of,
        summary.job,
        summary.lines,
        summary.bytes,
        summary.objects,
        summary.elapsed.as_millis(),
        summary.renewals_seen,
    );
    println!("{HWM_PREFIX}{}", vm_hwm_kib());
}

#[tokio::test]
async fn a_million_row_export_stays_under_64_mib_and_outlives_its_lease() {
    let db = TestDb::new().await;
    let dir = StoreDir::new();
    // The export runs in a child process (this test binary again, running only
    // `export_child_process`), so its peak memory is the export's own.
    let started = std::time::Instant::now();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "export_child_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(CHILD_DB, db.url())
        .env(CHILD_STORE, &dir.0)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    println!("child took {:.1?}", started.elapsed());
    assert!(
        output.status.success(),
        "the export child failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("export-child summary: "))
        .expect("the child printed its summary");
    let field = |name: &str| -> String {
        let start = summary.find(&format!(" {name}=")).unwrap() + name.len() + 2;
        summary[start..].split(' ').next().unwrap().to_owned()
    };
    let hwm_kib: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix(HWM_PREFIX))
        .expect("the child printed its VmHWM")
        .trim()
        .parse()
        .unwrap();
    println!("peak resident memory of the export: {} KiB", hwm_kib);

    assert!(
        hwm_kib < 64 * 1024,
        "the export peaked at {hwm_kib} KiB, over 64 MiB"
    );
    assert_eq!(field("state"), "completed");
    assert_eq!(
        field("attempt"),
        "1",
        "one attempt: the lease never expired"
    );
    assert_eq!(field("errors"), "0");
    assert_eq!(
        field("duplicate_of"),
        format!("Some({})", field("job")),
        "the second request was refused in favour of the first"
    );
    assert_eq!(field("lines"), (example::ROWS + 1).to_string());
    assert_eq!(field("objects"), r#"["exports/1.csv"]"#);
    let elapsed = Duration::from_millis(field("elapsed_ms").parse().unwrap());
    if elapsed > example::ExportReport::OPTIONS.lease {
        assert_ne!(
            field("renewals"),
            "0",
            "a job that outlived its lease on one attempt was renewed"
        );
    }
    assert_eq!(files_under(&dir.0).len(), 1, "no staging file left behind");
    db.close().await;
}

#[tokio::test]
async fn a_retried_export_overwrites_its_object_instead_of_adding_one() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let dir = StoreDir::new();
    // Crash once after the upload and before the outcome is written: the lease expires, the
    // job is rescued and runs again, uploading under the same key.
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<example::ExportReport>()
        .times(1);
    let mut config = WorkerConfig::default();
    config.poll_interval = Duration::from_millis(50);
    config.rescuer.interval = Duration::from_millis(50);
    let summary = example::run(&pool, dir.store(), 7, 20_000, |b| {
        b.config(config).faults(faults.clone())
    })
    .await
    .unwrap();

    assert_eq!(faults.crashes().len(), 1);
    assert_eq!(summary.row.state, JobState::Completed);
    assert_eq!(summary.row.attempt, 2, "ran again after the crash");
    assert_eq!(summary.row.errors[0].class, "lease_expired");
    assert_eq!(summary.duplicate_of, Some(summary.job));
    assert_eq!(summary.objects, ["exports/7.csv"], "exactly one object");
    assert_eq!(summary.lines, 20_001);
    assert_eq!(files_under(&dir.0).len(), 1, "no staging file left behind");
    db.close().await;
}

#[tokio::test]
async fn a_second_request_for_an_active_export_is_a_duplicate() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let first = example::ExportReport { report_id: 3 }
        .enqueue(&pool)
        .await
        .unwrap();
    match (example::ExportReport { report_id: 3 })
        .enqueue(&pool)
        .await
    {
        Err(job::EnqueueError::Duplicate { existing, .. }) => assert_eq!(existing, first),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // Another report is another key.
    example::ExportReport { report_id: 4 }
        .enqueue(&pool)
        .await
        .unwrap();
    db.close().await;
}
