//! Streaming export: a job exports a million database rows to CSV without holding them in
//! memory, then uploads the file to object storage as a multipart stream.
//!
//! - Rows are streamed with sqlx `fetch` (never `fetch_all`) into a temporary file.
//! - The file is uploaded in 5 MiB parts through `object_store`'s `WriteMultipart`, read from
//!   disk one 1 MiB buffer at a time, under a key derived from the job (`exports/{id}.csv`):
//!   a retry overwrites the same object instead of leaving a second one behind.
//! - The job's lease is 2 s, far shorter than the export: the worker's heartbeat renews it
//!   while the job runs, and the job completes on its first attempt.
//! - `#[job(unique = "export:{report_id}")]`: a second request for the same report, while the
//!   first is active, is refused with `EnqueueError::Duplicate`.
//!
//! Run with `cargo run --example streaming_export`. It uses the database
//! `job_example_export` on the server named by DATABASE_URL (default
//! `postgres://postgres@127.0.0.1:5432/test`), creating it when missing. Objects go to the
//! local directory EXPORT_STORE_DIR (default `$TMPDIR/job_example_export`). For an
//! S3-compatible store, set EXPORT_S3_BUCKET (plus the usual AWS_* variables, read by
//! `AmazonS3Builder::from_env`) and build with `--features example-s3`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use job::prelude::*;
use job::{EnqueueError, JobState, WorkerBuilder};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, WriteMultipart};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};

/// Rows the example exports.
pub(crate) const ROWS: i64 = 1_000_000;
/// Size of one uploaded part (S3's minimum for all but the last part).
const PART_SIZE: usize = 5 * 1024 * 1024;
/// Parts in flight at most: with the part being filled, memory stays near 3 parts.
const PARTS_IN_FLIGHT: usize = 2;

/// What the export job needs, registered on the worker as state.
#[derive(Clone)]
pub(crate) struct Exporter {
    /// The database holding `report_rows`.
    pub(crate) pool: PgPool,
    /// Where exports are uploaded.
    pub(crate) store: Arc<dyn ObjectStore>,
}

/// The object key of a report's export: the same for every attempt of the job.
pub(crate) fn object_key(report_id: i64) -> ObjectPath {
    ObjectPath::from(format!("exports/{report_id}.csv"))
}

/// Exports one report's rows as CSV to `exports/{report_id}.csv`.
#[job(
    unique = "export:{report_id}",
    lease = "2s",
    retry = 3,
    timeout = "10m"
)]
pub(crate) async fn export_report(ctx: JobContext, report_id: i64) -> Result<(), JobError> {
    let exporter = ctx.state::<Exporter>()?.clone();
    // A fresh temporary file per attempt, removed when the attempt ends however it ends.
    let temp = tempfile::Builder::new()
        .prefix(&format!(
            "job-export-{report_id}-{}-{}-",
            ctx.id(),
            ctx.attempt()
        ))
        .suffix(".csv")
        .tempfile()?
        .into_temp_path();

    // 1. Stream the rows into the file, one row at a time.
    let mut out = BufWriter::new(tokio::fs::File::create(&temp).await?);
    out.write_all(b"n,digest\n").await?;
    let mut rows = sqlx::query_as::<_, (i64, String)>(
        "SELECT n, digest FROM report_rows WHERE report_id = $1 ORDER BY n",
    )
    .bind(report_id)
    .fetch(&exporter.pool);
    let mut line = String::new();
    while let Some((n, digest)) = rows.try_next().await? {
        line.clear();
        let _ = writeln!(line, "{n},{digest}");
        out.write_all(line.as_bytes()).await?;
    }
    drop(rows);
    out.flush().await?;
    drop(out);
    if ctx.is_cancelled() {
        return Err(JobError::retryable("stopped before the upload"));
    }

    // 2. Upload the file as a multipart stream, a buffer at a time.
    let key = object_key(report_id);
    let upload = exporter
        .store
        .put_multipart_opts(&key, Default::default())
        .await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut file = tokio::fs::File::open(&temp).await?;
    let mut buf = vec![0u8; 1024 * 1024];
    let sent: Result<(), JobError> = async {
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            // Back pressure: at most PARTS_IN_FLIGHT parts uploading while we read on.
            writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            if ctx.is_cancelled() {
                return Err(JobError::retryable("stopped during the upload"));
            }
            writer.write(&buf[..n]);
        }
    }
    .await;
    match sent {
        Ok(()) => {
            writer.finish().await?;
            Ok(())
        }
        Err(e) => {
            // Drop the parts uploaded so far; the retry starts a new upload of the same key.
            let _ = writer.abort().await;
            Err(e)
        }
    }
}

/// Creates `report_rows` and fills report `report_id` with `rows` generated rows (kept when
/// it already has exactly that many, so a second run starts at once).
pub(crate) async fn generate_rows(pool: &PgPool, report_id: i64, rows: i64) -> sqlx::Result<()> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS report_rows (
             report_id bigint NOT NULL, n bigint NOT NULL, digest text NOT NULL,
             PRIMARY KEY (report_id, n))",
    )
    .execute(pool)
    .await?;
    let have: i64 = sqlx::query_scalar("SELECT count(*) FROM report_rows WHERE report_id = $1")
        .bind(report_id)
        .fetch_one(pool)
        .await?;
    if have != rows {
        let mut tx = pool.begin().await?;
        sqlx::query("DELETE FROM report_rows WHERE report_id = $1")
            .bind(report_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO report_rows (report_id, n, digest)
             SELECT $1, g, md5(g::text) FROM generate_series(1, $2::bigint) g",
        )
        .bind(report_id)
        .bind(rows)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    Ok(())
}

/// What one run of the export showed.
#[derive(Debug)]
pub(crate) struct Summary {
    /// The export job.
    pub(crate) job: JobId,
    /// The job a second request for the same report was refused in favour of.
    pub(crate) duplicate_of: Option<JobId>,
    /// The job's final row.
    pub(crate) row: job::JobRow,
    /// From enqueue to a terminal state.
    pub(crate) elapsed: Duration,
    /// Times the job's `locked_until` was seen moving forward while it ran.
    pub(crate) renewals_seen: u32,
    /// Lines of the uploaded object (header included), read back as a stream.
    pub(crate) lines: u64,
    /// Size of the uploaded object.
    pub(crate) bytes: u64,
    /// Objects under `exports/` afterwards.
    pub(crate) objects: Vec<String>,
}

/// Generates `rows` rows for `report_id`, enqueues the export, shows that a duplicate request
/// is refused, runs a worker (built by `customize` from the default builder) until the job is
/// finished, and reads back what was uploaded.
pub(crate) async fn run(
    pool: &PgPool,
    store: Arc<dyn ObjectStore>,
    report_id: i64,
    rows: i64,
    customize: impl FnOnce(WorkerBuilder<PgStore>) -> WorkerBuilder<PgStore>,
) -> Result<Summary, Box<dyn std::error::Error>> {
    let jobs = PgStore::new(pool.clone());
    jobs.migrate().await?;
    let started = Instant::now();
    generate_rows(pool, report_id, rows).await?;
    println!(
        "report {report_id}: {rows} rows ready in {:.1?}",
        started.elapsed()
    );

    let started = Instant::now();
    let job = (ExportReport { report_id }).enqueue(pool).await?;
    println!("enqueued export job {job} (unique key export:{report_id})");
    let duplicate_of = match (ExportReport { report_id }).enqueue(pool).await {
        Err(EnqueueError::Duplicate { existing, .. }) => {
            println!("a second export request for report {report_id} was refused: job {existing} is active");
            Some(existing)
        }
        Ok(id) => {
            println!("a second export request was NOT refused (job {id})");
            None
        }
        Err(e) => return Err(e.into()),
    };

    let worker = customize(
        Worker::builder(jobs.clone())
            .register::<ExportReport>()
            .queue("default", 1)
            .poll_interval(Duration::from_millis(50))
            .state(Exporter {
                pool: pool.clone(),
                store: store.clone(),
            }),
    )
    .build()?
    .start();

    // Watch the job until it finishes, noting each lease renewal.
    let mut renewals_seen = 0;
    let mut last_lease = None;
    let row = loop {
        let row = jobs.get(job).await?.ok_or("the export job vanished")?;
        if row.state.is_terminal() {
            break row;
        }
        if row.state == JobState::Running {
            let lease = (row.lock_token, row.locked_until);
            if let (Some((token, Some(until))), (Some(_), Some(now))) = (last_lease, lease) {
                if lease.0 == token && now > until {
                    renewals_seen += 1;
                }
            }
            last_lease = Some(lease);
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the export did not finish within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let elapsed = started.elapsed();
    worker.shutdown().await;
    println!(
        "job {job} {} after {} attempt(s) in {elapsed:.1?} with a {:?} lease; lease renewed {renewals_seen} time(s) while it ran",
        row.state,
        row.attempt,
        <ExportReport as Job>::OPTIONS.lease,
    );

    // Read the object back as a stream and count its lines.
    let key = object_key(report_id);
    let mut lines = 0u64;
    let mut bytes = 0u64;
    let mut body = store
        .get_opts(&key, Default::default())
        .await?
        .into_stream();
    while let Some(chunk) = body.try_next().await? {
        bytes += chunk.len() as u64;
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
    }
    let objects: Vec<String> = store
        .list(Some(&ObjectPath::from("exports")))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await?;
    println!("uploaded {key}: {bytes} bytes, {lines} lines; objects under exports/: {objects:?}");
    Ok(Summary {
        job,
        duplicate_of,
        row,
        elapsed,
        renewals_seen,
        lines,
        bytes,
        objects,
    })
}

/// The object store: S3-compatible when EXPORT_S3_BUCKET is set, else a local directory.
fn object_store_from_env() -> Result<Arc<dyn ObjectStore>, Box<dyn std::error::Error>> {
    if let Ok(bucket) = std::env::var("EXPORT_S3_BUCKET") {
        #[cfg(feature = "example-s3")]
        {
            println!("object store: S3 bucket {bucket}");
            let s3 = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()?;
            return Ok(Arc::new(s3));
        }
        #[cfg(not(feature = "example-s3"))]
        return Err(format!(
            "EXPORT_S3_BUCKET={bucket} needs S3 support: cargo run --features example-s3 --example streaming_export"
        )
        .into());
    }
    let dir = std::env::var_os("EXPORT_STORE_DIR").map_or_else(
        || std::env::temp_dir().join("job_example_export"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir)?;
    println!("object store: local directory {}", dir.display());
    Ok(Arc::new(LocalFileSystem::new_with_prefix(&dir)?))
}

#[path = "support/db.rs"]
mod db;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = db::ensure_database(&server, "job_example_export").await?;
    let pool = job::pool_options()
        .max_connections(5)
        .connect_with(options)
        .await?;
    PgStore::new(pool.clone()).migrate().await?;
    // This demo starts over on every run: the export job of a run killed part-way would
    // otherwise hold the report's unique key, and run again here on its second attempt.
    sqlx::query("DELETE FROM job.jobs WHERE kind = $1")
        .bind(<ExportReport as Job>::KIND)
        .execute(&pool)
        .await?;
    let store = object_store_from_env()?;
    let report_id = 1;
    let summary = run(&pool, store, report_id, ROWS, |builder| builder).await?;

    let key = object_key(report_id).to_string();
    let held = summary.row.state == JobState::Completed
        && summary.row.attempt == 1
        && summary.duplicate_of == Some(summary.job)
        && summary.lines == ROWS as u64 + 1
        && summary.objects == [key]
        && summary.bytes > 0
        // Outliving its lease on one attempt means the heartbeat renewed it.
        && (summary.elapsed <= <ExportReport as Job>::OPTIONS.lease || summary.renewals_seen > 0);
    if !held {
        return Err(format!("the export did not keep its promise: {summary:?}").into());
    }
    println!("ok: one object, every row, one attempt, duplicate refused");
    Ok(())
}
