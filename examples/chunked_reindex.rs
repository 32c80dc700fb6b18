//! Chunked reindex: a long job split into pages. Each page job indexes one page of `products`
//! and, in the SAME transaction, enqueues its successor with a resume cursor and completes
//! itself (`job::complete_in`). A page either commits all three or none, so a crash resumes
//! at the page that did not commit, never from zero, and no row is indexed twice.
//!
//! The demo indexes 10,000 products in pages of 500 and crashes the page after id 4,500 once,
//! after it wrote its rows, its successor and its completion but before its commit (the
//! handler panics there; the worker survives it, and the dropped transaction rolls back). The
//! retry redoes that page only. It prints each page and exits 0 when every product was
//! indexed exactly once by a chain of 20 pages that ended by itself.
//!
//! Run with `cargo run --example chunked_reindex`. It uses the database
//! `job_example_chunked_reindex` on the server named by DATABASE_URL (default
//! `postgres://postgres@127.0.0.1:5432/test`), creating it when missing, and recreates its
//! `products` table on every run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use job::prelude::*;
use job::{JobFilter, JobState, WorkerConfig};
use job_testkit::Faults;
use sqlx::PgPool;

/// Products per page.
pub const PAGE: i64 = 500;

/// A demo hook (application state): crash the page whose cursor is `after`, once, between
/// its writes and its commit. `CrashBeforeCommit::never()` crashes nothing.
#[derive(Debug)]
pub struct CrashBeforeCommit {
    after: Option<i64>,
    fired: AtomicBool,
}

impl CrashBeforeCommit {
    /// Crash the page after `after`, once.
    pub fn at(after: i64) -> Self {
        CrashBeforeCommit {
            after: Some(after),
            fired: AtomicBool::new(false),
        }
    }

    /// Crash nothing.
    pub fn never() -> Self {
        CrashBeforeCommit {
            after: None,
            fired: AtomicBool::new(false),
        }
    }

    fn now(&self, after: i64) -> bool {
        self.after == Some(after) && !self.fired.swap(true, Ordering::SeqCst)
    }
}

/// Indexes the page of products with ids after `after`, then hands the rest to its successor.
#[job(
    unique = "reindex:{after}",
    retry = 5,
    backoff(base = "50ms", cap = "200ms")
)]
pub async fn reindex_page(ctx: JobContext, after: i64) -> Result<(), JobError> {
    let pool = ctx.state::<PgPool>()?;
    let mut tx = pool.begin().await?;
    let last: Option<i64> = sqlx::query_scalar(
        "WITH page AS (SELECT id FROM products WHERE id > $1 ORDER BY id LIMIT $2)
         UPDATE products p SET indexed_at = now(), times_indexed = times_indexed + 1
         FROM page WHERE p.id = page.id
         RETURNING p.id",
    )
    .bind(after)
    .bind(PAGE)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .max();
    let more = match last {
        Some(last) => {
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM products WHERE id > $1)")
                .bind(last)
                .fetch_one(&mut *tx)
                .await?
        }
        None => false,
    };
    let next = match (last, more) {
        (Some(last), true) => Some(ReindexPage { after: last }.enqueue(&mut *tx).await?),
        _ => None,
    };
    job::complete_in(&mut tx, &ctx).await?;
    if ctx.state::<CrashBeforeCommit>()?.now(after) {
        // Everything is written, nothing is committed: as if the process died here.
        println!(
            "  page after {after:>5} (attempt {}): wrote its rows, its successor and its completion; crashing before the commit",
            ctx.attempt()
        );
        panic!("simulated crash: page after {after} dies before its commit");
    }
    tx.commit().await?;
    match (last, next) {
        (Some(last), Some(next)) => println!(
            "  page after {after:>5} (attempt {}): indexed up to {last}, next page is job {next}",
            ctx.attempt()
        ),
        _ => println!(
            "  page after {after:>5} (attempt {}): indexed up to {}, the last page",
            ctx.attempt(),
            last.unwrap_or(after)
        ),
    }
    Ok(())
}

/// Recreates `products` with `rows` unindexed rows, ids 1 to `rows`.
pub async fn seed(pool: &PgPool, rows: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DROP TABLE IF EXISTS products")
        .execute(pool)
        .await?;
    sqlx::query(
        "CREATE TABLE products (
            id bigint PRIMARY KEY,
            name text NOT NULL,
            indexed_at timestamptz,
            times_indexed integer NOT NULL DEFAULT 0
        )",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO products (id, name) SELECT i, 'product ' || i FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(pool)
    .await?;
    Ok(())
}

/// A page job as it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The page job's id.
    pub id: JobId,
    /// Its cursor.
    pub after: i64,
    /// Its final state.
    pub state: JobState,
    /// The attempts it took.
    pub attempt: i32,
    /// The classes of its failed attempts.
    pub errors: Vec<String>,
}

/// What a run did.
#[derive(Debug)]
pub struct Report {
    /// Products in the table.
    pub rows: i64,
    /// Products indexed exactly once.
    pub indexed_once: i64,
    /// The most times one product was indexed.
    pub max_times_indexed: i32,
    /// Every page job, oldest first.
    pub pages: Vec<Page>,
}

impl Report {
    /// The promise: every product indexed exactly once by one completed chain of pages, one
    /// job per cursor, with the cursors `0, PAGE, 2·PAGE, ...` (and no page after the last).
    pub fn held(&self) -> bool {
        let expected: Vec<i64> = (0..self.rows).step_by(PAGE as usize).collect();
        let cursors: Vec<i64> = self.pages.iter().map(|p| p.after).collect();
        self.indexed_once == self.rows
            && self.max_times_indexed == 1
            && cursors == expected
            && self.pages.iter().all(|p| p.state == JobState::Completed)
    }
}

/// Seeds `rows` products, enqueues the first page, runs a worker (with `crash` as state and
/// `faults` installed) until the chain has ended (60 s at most), and reports.
pub async fn run(
    pool: &PgPool,
    rows: i64,
    crash: CrashBeforeCommit,
    faults: Faults,
) -> Result<Report, Box<dyn std::error::Error>> {
    seed(pool, rows).await?;
    let store = PgStore::new(pool.clone());
    let first = ReindexPage { after: 0 }.enqueue(pool).await?;
    println!("reindexing {rows} products in pages of {PAGE}, starting with job {first}");

    let mut config = WorkerConfig::default();
    config.poll_interval = Duration::from_millis(50);
    config.rescuer.interval = Duration::from_millis(100);
    let worker = Worker::builder(store.clone())
        .register::<ReindexPage>()
        .queue("default", 4)
        .config(config)
        .state(pool.clone())
        .state(crash)
        .faults(faults)
        .build()?
        .start();

    let filter = JobFilter {
        kind: Some(<ReindexPage as Job>::KIND.to_owned()),
        limit: Some(10_000),
        ..JobFilter::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // A page enqueues its successor in the commit that finishes it, so "every page job is
    // finished" holds only once the chain has ended.
    let jobs = loop {
        let jobs = store.list(&filter).await?;
        if jobs.iter().all(|j| j.state.is_terminal()) {
            break jobs;
        }
        if tokio::time::Instant::now() > deadline {
            worker.shutdown().await;
            return Err("the chain of pages did not end within 60 seconds".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    worker.shutdown().await;

    let pages = jobs
        .into_iter()
        .map(|j| Page {
            id: j.id,
            after: j.payload["after"].as_i64().unwrap_or(-1),
            state: j.state,
            attempt: j.attempt,
            errors: j.errors.into_iter().map(|e| e.class).collect(),
        })
        .collect();
    let (indexed_once, max_times_indexed): (i64, i32) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE times_indexed = 1 AND indexed_at IS NOT NULL),
                coalesce(max(times_indexed), 0)
         FROM products",
    )
    .fetch_one(pool)
    .await?;
    Ok(Report {
        rows,
        indexed_once,
        max_times_indexed,
        pages,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = db::ensure_database(&server, "job_example_chunked_reindex").await?;
    let pool = job::pool_options()
        .max_connections(5)
        .connect_with(options)
        .await?;
    PgStore::new(pool.clone()).migrate().await?;
    // This demo starts over on every run: page jobs an interrupted earlier run left behind
    // would otherwise resume against the freshly seeded table.
    sqlx::query("DELETE FROM job.jobs WHERE kind = $1")
        .bind(<ReindexPage as Job>::KIND)
        .execute(&pool)
        .await?;

    let report = run(
        &pool,
        10_000,
        CrashBeforeCommit::at(9 * PAGE),
        Faults::new(),
    )
    .await?;

    let retried: Vec<_> = report.pages.iter().filter(|p| p.attempt > 1).collect();
    for p in &retried {
        println!(
            "page after {} took {} attempts (failed: {}); no other page ran twice",
            p.after,
            p.attempt,
            p.errors.join(", ")
        );
    }
    println!(
        "{} pages; {} of {} products indexed exactly once (most times indexed: {})",
        report.pages.len(),
        report.indexed_once,
        report.rows,
        report.max_times_indexed
    );
    if !report.held() || retried.len() != 1 {
        return Err("the promise did not hold".into());
    }
    println!("every product indexed exactly once; the crash resumed at its own page");
    Ok(())
}

#[path = "support/db.rs"]
mod db;
