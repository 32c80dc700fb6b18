//! Ledger day close: per-key ordering, a batch and its callback, together.
//!
//! In ONE transaction the day's entries are enqueued, three per account, each ordered by
//! `account:{account_id}`: an account's entries are posted one at a time, in enqueue order,
//! whatever the workers, while different accounts post in parallel. Then a batch: one
//! `Statement` per account, ordered by the same key (so it runs after that account's entries),
//! whose result is the account's balance; and its callback, `CloseDay`, which runs once, after
//! every statement has finished, and reads their results to record the day's total.
//!
//! Posting is idempotent and checks the order: an entry is applied only right after the
//! previous one of its account (`seq = last + 1`), so a wrong order would fail the job, and a
//! second run of an applied entry changes nothing. The demo crashes one posting after it ran
//! (a killed worker); its key stays held until the rescuer runs it again.
//!
//! Run with `cargo run --example ledger_batch`. It uses the database `job_example_ledger_batch`
//! on the server named by DATABASE_URL (default `postgres://postgres@127.0.0.1:5432/test`),
//! creating it when missing; the application's tables live in its `public` schema.

use std::time::Duration;

use job::prelude::*;
use job::{Batch, JobFilter, JobState, WorkerConfig};
use job_testkit::{Faults, Point};
use sqlx::PgPool;

/// Applies entry `seq` of an account: only right after entry `seq - 1`, once.
#[job(
    queue = "ledger",
    retry = 5,
    lease = "500ms",
    backoff(base = "20ms", cap = "100ms"),
    ordering = "account:{account_id}"
)]
pub async fn post_entry(
    ctx: JobContext,
    account_id: i64,
    seq: i32,
    cents: i64,
) -> Result<(), JobError> {
    let pool = ctx.state::<PgPool>()?;
    let mut tx = pool.begin().await?;
    let last: Option<i32> =
        sqlx::query_scalar("SELECT max(seq) FROM entries WHERE account_id = $1")
            .bind(account_id)
            .fetch_one(&mut *tx)
            .await?;
    let last = last.unwrap_or(0);
    if seq <= last {
        return Ok(()); // applied by an earlier attempt
    }
    if seq != last + 1 {
        return Err(JobError::terminal(format!(
            "entry {seq} of account {account_id} came after entry {last}: out of order"
        )));
    }
    sqlx::query("INSERT INTO entries (account_id, seq, cents) VALUES ($1, $2, $3)")
        .bind(account_id)
        .bind(seq)
        .bind(cents)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// An account's balance after the day's entries: its result.
#[job(queue = "ledger", retry = 5, ordering = "account:{account_id}")]
pub async fn statement(ctx: JobContext, account_id: i64) -> Result<i64, JobError> {
    let balance: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(cents), 0)::bigint FROM entries WHERE account_id = $1",
    )
    .bind(account_id)
    .fetch_one(ctx.state::<PgPool>()?)
    .await?;
    Ok(balance)
}

/// Runs once every statement has finished: records the day's total of their results.
#[job(queue = "ledger", retry = 5)]
pub async fn close_day(ctx: JobContext, day: String) -> Result<i64, JobError> {
    let store = ctx.state::<PgStore>()?;
    let ids = store.dependencies(ctx.id()).await?;
    let statements = store
        .list(&JobFilter {
            ids,
            ..Default::default()
        })
        .await?;
    let mut total = 0;
    for s in &statements {
        if s.state != JobState::Completed {
            return Err(JobError::terminal(format!(
                "statement job {} ended {}",
                s.id, s.state
            )));
        }
        total += s.result.as_ref().and_then(|v| v.as_i64()).unwrap_or(0);
    }
    sqlx::query(
        "INSERT INTO closed_days (day, statements, total) VALUES ($1, $2, $3) \
         ON CONFLICT (day) DO NOTHING",
    )
    .bind(&day)
    .bind(i32::try_from(statements.len()).unwrap_or(i32::MAX))
    .bind(total)
    .execute(ctx.state::<PgPool>()?)
    .await?;
    Ok(total)
}

/// Creates the application's tables when missing, and empties them.
pub async fn create_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    for statement in [
        "CREATE TABLE IF NOT EXISTS entries (
            account_id bigint NOT NULL,
            seq integer NOT NULL,
            cents bigint NOT NULL,
            posted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (account_id, seq)
        )",
        "CREATE TABLE IF NOT EXISTS closed_days (
            day text PRIMARY KEY,
            statements integer NOT NULL,
            total bigint NOT NULL
        )",
        "TRUNCATE entries, closed_days",
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// The accounts of the demo, and each one's entries in cents.
pub const ACCOUNTS: [(i64, [i64; 3]); 4] = [
    (1, [1_000, -250, 40]),
    (2, [500, 500, -1_000]),
    (3, [7, 8, 9]),
    (4, [-300, 1_200, 100]),
];

/// What a run did.
#[derive(Debug)]
pub struct Report {
    /// The callback's row, once finished.
    pub close: job::JobRow,
    /// `closed_days.total` of the day, if the callback recorded it.
    pub recorded_total: Option<i64>,
    /// Entries posted, per account, in the order they were posted.
    pub posted: Vec<(i64, Vec<i32>)>,
    /// How many crashes the faults injected.
    pub crashes: usize,
}

impl Report {
    /// The promise: every entry posted once and in order, the callback completed once with
    /// the sum of the statements.
    pub fn held(&self) -> bool {
        let want: i64 = ACCOUNTS.iter().flat_map(|(_, e)| e.iter()).sum();
        self.close.state == JobState::Completed
            && self.recorded_total == Some(want)
            && self.close.result == Some(serde_json::json!(want))
            && self.posted.iter().all(|(_, seqs)| seqs == &[1, 2, 3])
    }
}

/// Enqueues the day in one transaction, runs two workers under `faults` until the callback has
/// finished (30 s at most), and reports.
pub async fn run(pool: &PgPool, faults: Faults) -> Result<Report, Box<dyn std::error::Error>> {
    create_tables(pool).await?;
    let store = PgStore::new(pool.clone());

    let mut tx = pool.begin().await?;
    for (account_id, entries) in ACCOUNTS {
        for (i, cents) in entries.into_iter().enumerate() {
            let seq = i32::try_from(i).unwrap_or(0) + 1;
            PostEntry {
                account_id,
                seq,
                cents,
            }
            .enqueue(&mut *tx)
            .await?;
        }
    }
    let mut batch = Batch::new();
    for (account_id, _) in ACCOUNTS {
        batch = batch.member(Enqueue::new(Statement { account_id }));
    }
    let batch = batch
        .callback(Enqueue::new(CloseDay {
            day: "2026-12-03".into(),
        }))
        .enqueue(&mut *tx)
        .await?;
    tx.commit().await?;
    println!(
        "enqueued 12 entries, {} statements and their callback {} in one transaction",
        batch.members.len(),
        batch.callback
    );

    let mut config = WorkerConfig::default();
    config.poll_interval = Duration::from_millis(50);
    config.rescuer.interval = Duration::from_millis(100);
    let workers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            Worker::builder(store.clone())
                .register::<PostEntry>()
                .register::<Statement>()
                .register::<CloseDay>()
                .queue("ledger", 4)
                .id(format!("ledger-{name}"))
                .config(config.clone())
                .state(pool.clone())
                .state(store.clone())
                .faults(faults.clone())
                .build()
                .map(Worker::start)
        })
        .collect::<Result<_, _>>()?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let close = loop {
        let row = store
            .get(batch.callback)
            .await?
            .ok_or("the callback vanished")?;
        if row.state.is_terminal() {
            break row;
        }
        if tokio::time::Instant::now() > deadline {
            for w in workers {
                w.shutdown().await;
            }
            // What it still waits for, to tell why.
            let unfinished: Vec<(i64, String, String, i32)> = sqlx::query_as(
                "SELECT id, kind, state::text, attempt FROM job.jobs
                 WHERE queue = 'ledger'
                   AND state NOT IN ('completed', 'cancelled', 'discarded')
                 ORDER BY id",
            )
            .fetch_all(pool)
            .await?;
            return Err(format!(
                "the callback is still {} after 30 seconds; jobs not finished (id, kind, \
                 state, attempt): {unfinished:?}",
                row.state
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for w in workers {
        w.shutdown().await;
    }

    let recorded_total: Option<i64> =
        sqlx::query_scalar("SELECT total FROM closed_days WHERE day = '2026-12-03'")
            .fetch_optional(pool)
            .await?;
    let mut posted = Vec::new();
    for (account_id, _) in ACCOUNTS {
        let seqs: Vec<i32> = sqlx::query_scalar(
            "SELECT seq FROM entries WHERE account_id = $1 ORDER BY posted_at, seq",
        )
        .bind(account_id)
        .fetch_all(pool)
        .await?;
        posted.push((account_id, seqs));
    }
    Ok(Report {
        close,
        recorded_total,
        posted,
        crashes: faults.crashes().len(),
    })
}

#[path = "support/db.rs"]
mod db;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The workers' warnings on stderr (the injected crash says so, and so would anything that
    // held the jobs up: a lease the rescuer holds off from after a jump of the clock, say).
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = db::ensure_database(&server, "job_example_ledger_batch").await?;
    let pool = job::pool_options()
        .max_connections(10)
        .connect_with(options)
        .await?;
    PgStore::new(pool.clone()).migrate().await?;
    // This demo starts over on every run: the jobs of a run killed part-way would otherwise
    // post into this run's emptied tables, and hold up its accounts' ordering keys.
    sqlx::query("DELETE FROM job.jobs WHERE queue = 'ledger'")
        .execute(&pool)
        .await?;

    // One posting "dies" right after it ran, before its outcome is written.
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<PostEntry>()
        .times(1);
    let report = run(&pool, faults).await?;
    for (account, seqs) in &report.posted {
        println!("  account {account}: entries posted in order {seqs:?}");
    }
    println!(
        "day closed by job {} ({}), total {:?}, {} crash(es) injected",
        report.close.id, report.close.state, report.recorded_total, report.crashes
    );
    if !report.held() {
        return Err("the promise did not hold: see the report above".into());
    }
    Ok(())
}
