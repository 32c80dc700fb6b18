//! Quick start: define two jobs with `#[job]`, enqueue a few inside a transaction, run a worker
//! until they are all finished, and print each outcome.
//!
//! Run with `cargo run --example quickstart`. Without `DATABASE_URL` it needs no server: it
//! uses the SQLite file `job_quickstart.sqlite` in the system's temporary directory (and says
//! so). With `DATABASE_URL` set it uses PostgreSQL: the database `job_quickstart` on that
//! server, created when missing, so your own databases are not touched.

use std::time::Duration;

use job::prelude::*;
use job::{JobState, SqliteStore};

/// Sends the welcome email of a new user.
#[job(retry = 2, queue = "mail")]
async fn send_welcome(ctx: JobContext, user: String) -> Result<(), JobError> {
    println!("  [job {}] welcome mail to {user}", ctx.id());
    Ok(())
}

/// Builds a report; the report service is busy on the first attempt.
#[job(retry = 3, timeout = "10s", backoff(base = "50ms", cap = "200ms"))]
async fn build_report(ctx: JobContext, report_id: i64) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        println!(
            "  [job {}] report {report_id}: service busy, will retry",
            ctx.id()
        );
        return Err(JobError::retryable("report service busy"));
    }
    println!(
        "  [job {}] report {report_id} built on attempt {}",
        ctx.id(),
        ctx.attempt()
    );
    Ok(())
}

/// Refuses bad input for good: no retry can fix it.
#[job(retry = 5)]
async fn charge(_ctx: JobContext, cents: i64) -> Result<(), JobError> {
    if cents <= 0 {
        return Err(JobError::terminal(format!("cannot charge {cents} cents")));
    }
    Ok(())
}

/// Enqueues the quick start's jobs through `$tx` (`&mut *tx` of either backend's open
/// transaction): the same typed helpers on PostgreSQL and on SQLite.
macro_rules! enqueue_jobs {
    ($tx:expr) => {
        vec![
            SendWelcome {
                user: "ada@example.com".into(),
            }
            .enqueue(&mut *$tx)
            .await?,
            BuildReport { report_id: 7 }.enqueue(&mut *$tx).await?,
            Charge { cents: -5 }.enqueue(&mut *$tx).await?,
            SendWelcome {
                user: "grace@example.com".into(),
            }
            .schedule_in(Duration::from_millis(200))
            .enqueue(&mut *$tx)
            .await?,
        ]
    };
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        Some(server) => {
            let options = db::ensure_database(&server, "job_quickstart").await?;
            println!("using PostgreSQL database job_quickstart on the server of DATABASE_URL");
            let pool = job::pool_options()
                .max_connections(5)
                .connect_with(options)
                .await?;
            let store = PgStore::new(pool.clone());
            store.migrate().await?;
            // Enqueue inside our own transaction: the jobs exist only if it commits.
            let mut tx = pool.begin().await?;
            let ids = enqueue_jobs!(tx);
            tx.commit().await?;
            run(store, ids).await
        }
        None => {
            let path = std::env::temp_dir().join("job_quickstart.sqlite");
            println!(
                "using SQLite database {} (set DATABASE_URL to use PostgreSQL)",
                path.display()
            );
            let store = SqliteStore::open(&path).await?;
            // The same, in a SQLite transaction (immediate: it takes the write lock at once).
            let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await?;
            let ids = enqueue_jobs!(tx);
            tx.commit().await?;
            run(store, ids).await
        }
    }
}

/// Runs a worker until the jobs `ids` have finished, and prints and checks each outcome.
async fn run<S: Store>(store: S, ids: Vec<JobId>) -> Result<(), Box<dyn std::error::Error>> {
    println!("enqueued jobs {ids:?}");

    let worker = Worker::builder(store.clone())
        .register::<SendWelcome>()
        .register::<BuildReport>()
        .register::<Charge>()
        .queue("default", 4)
        .queue("mail", 4)
        .poll_interval(Duration::from_millis(100))
        .build()?
        .start();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let rows = loop {
        let mut rows = Vec::new();
        for id in &ids {
            rows.extend(store.get(*id).await?);
        }
        if rows.iter().all(|r| r.state.is_terminal()) {
            break rows;
        }
        if tokio::time::Instant::now() > deadline {
            return Err("jobs did not finish within 30 seconds".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    worker.shutdown().await;

    println!("outcomes:");
    for row in &rows {
        let last_error = row.errors.last().map_or(String::new(), |e| {
            format!(" (last error: {} \"{}\")", e.class, e.message)
        });
        println!(
            "  job {:>4} {:<14} {:<9} after {} attempt(s){last_error}",
            row.id, row.kind, row.state, row.attempt
        );
    }
    let expected = [
        JobState::Completed,
        JobState::Completed,
        JobState::Discarded,
        JobState::Completed,
    ];
    let states: Vec<_> = rows.iter().map(|r| r.state).collect();
    if states != expected {
        return Err(format!("unexpected outcomes {states:?}").into());
    }
    Ok(())
}

#[path = "support/db.rs"]
mod db;
