//! `enqueue` (single enqueues, each its own transaction, against plain single-row INSERTs) and
//! `enqueue_bulk` (the bulk API).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use job::{Job, Store};
use serde_json::json;
use sqlx::{Executor, PgPool};

use crate::args::Args;
use crate::db::BenchDb;
use crate::jobs::{Noop, QUEUE};
use crate::report::{emit, median, per_s, round};
use crate::Result;

/// Scratch tables for the reference INSERTs: the same payload column type, an identity key,
/// nothing else; the second one with a statement-level `pg_notify` trigger like `job.jobs`.
/// Then two copies of `job.jobs` (columns, defaults, indexes; no trigger), with and without
/// its CHECK constraints, to tell what of the table's cost is which.
const SCRATCH_DDL: &str = "
CREATE TABLE IF NOT EXISTS bench.scratch (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text        NOT NULL,
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS bench.scratch_notify (LIKE bench.scratch INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench.jobs_copy (LIKE job.jobs INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench.jobs_copy_unchecked (LIKE job.jobs INCLUDING ALL EXCLUDING CONSTRAINTS);
CREATE OR REPLACE FUNCTION bench.notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bench_scratch', 'default');
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS scratch_notify_insert ON bench.scratch_notify;
CREATE TRIGGER scratch_notify_insert AFTER INSERT ON bench.scratch_notify
    FOR EACH STATEMENT EXECUTE FUNCTION bench.notify_insert();
";

/// The ways of inserting one row, each its own (implicit) transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// `Noop {}.enqueue(&pool)`: the typed helper the macro generates.
    Typed,
    /// A plain INSERT into `job.jobs` itself (every other column its default): the table's
    /// cost (indexes, constraints, trigger) without the store's statement and client work.
    RawJobs,
    /// A plain INSERT into the scratch table.
    Raw,
    /// A plain INSERT into the scratch table with the notify trigger.
    RawNotify,
    /// A plain INSERT into a copy of `job.jobs` without its trigger.
    Copy,
    /// The same without the CHECK constraints.
    CopyUnchecked,
}

const VARIANTS: [Variant; 6] = [
    Variant::Typed,
    Variant::Raw,
    Variant::RawJobs,
    Variant::RawNotify,
    Variant::Copy,
    Variant::CopyUnchecked,
];

async fn insert_one(pool: &PgPool, variant: Variant) -> Result<i64> {
    Ok(match variant {
        Variant::Typed => Noop {}.enqueue(pool).await?,
        Variant::RawJobs => {
            sqlx::query_scalar(
                "INSERT INTO job.jobs (kind, payload) VALUES ($1, $2::text::jsonb) RETURNING id",
            )
            .bind(Noop::KIND)
            .bind("{}")
            .fetch_one(pool)
            .await?
        }
        Variant::Raw => sqlx::query_scalar(
            "INSERT INTO bench.scratch (kind, payload) VALUES ($1, $2::text::jsonb) RETURNING id",
        )
        .bind(Noop::KIND)
        .bind("{}")
        .fetch_one(pool)
        .await?,
        Variant::Copy | Variant::CopyUnchecked => {
            let table = if variant == Variant::Copy {
                "bench.jobs_copy"
            } else {
                "bench.jobs_copy_unchecked"
            };
            sqlx::query_scalar(&format!(
                "INSERT INTO {table} (kind, payload) VALUES ($1, $2::text::jsonb) RETURNING id"
            ))
            .bind(Noop::KIND)
            .bind("{}")
            .fetch_one(pool)
            .await?
        }
        Variant::RawNotify => {
            sqlx::query_scalar(
                "INSERT INTO bench.scratch_notify (kind, payload) VALUES ($1, $2::text::jsonb) \
                 RETURNING id",
            )
            .bind(Noop::KIND)
            .bind("{}")
            .fetch_one(pool)
            .await?
        }
    })
}

/// `n` inserts of `variant` from `c` concurrent tasks; the elapsed seconds.
async fn run_inserts(pool: &PgPool, c: usize, n: usize, variant: Variant) -> Result<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..c)
        .map(|_| {
            let pool = pool.clone();
            let next = next.clone();
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    insert_one(&pool, variant).await?;
                }
                Ok::<_, crate::BoxError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Opens `c` connections at once so that no timed insert pays a connection setup.
async fn warm(pool: &PgPool, c: usize) -> Result<()> {
    let mut held = Vec::new();
    for _ in 0..c {
        held.push(pool.acquire().await?);
    }
    Ok(())
}

pub(crate) async fn enqueue(args: &Args) -> Result<()> {
    let n = args.jobs_or(5_000);
    let c = args.concurrency_or(1);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(c as u32 + 1).await?;
        pool.execute(SCRATCH_DDL).await?;
        warm(&pool, c).await?;
        // Interleaved rounds, each variant's position rotating, so drift on a shared machine
        // (checkpoints, neighbours) hits every variant alike; the ratio is the median of the
        // rounds' ratios (typed and raw measured moments apart).
        const ROUNDS: usize = 20;
        let mut seconds = [0.0f64; VARIANTS.len()];
        let mut done = [0usize; VARIANTS.len()];
        let mut ratios = Vec::with_capacity(ROUNDS);
        // One untimed warm-up pass of each (prepares the statements on every connection).
        for v in VARIANTS {
            run_inserts(&pool, c, 2 * c, v).await?;
        }
        for round in 0..ROUNDS {
            let k = (n / ROUNDS + usize::from(round < n % ROUNDS)).max(1);
            let mut took = [0.0f64; VARIANTS.len()];
            for i in 0..VARIANTS.len() {
                let slot = (i + round) % VARIANTS.len();
                took[slot] = run_inserts(&pool, c, k, VARIANTS[slot]).await?;
                seconds[slot] += took[slot];
                done[slot] += k;
            }
            // Same k: the rate ratio is the inverse time ratio.
            ratios.push(took[1] / took[0]);
        }
        let rate = |v: Variant| {
            let i = VARIANTS.iter().position(|x| *x == v).unwrap_or(0);
            per_s(done[i], seconds[i])
        };
        let typed = rate(Variant::Typed);
        let raw = rate(Variant::Raw);
        let typed_seconds = seconds[0];
        emit(&json!({
            "workload": "enqueue",
            "jobs": n,
            "concurrency": c,
            "seconds": round(typed_seconds, 3),
            "inserts_per_s": typed,
            "raw_inserts_per_s": raw,
            "ratio": round(median(&ratios), 3),
            "ratio_of_totals": round(typed / raw, 3),
            "raw_jobs_table_inserts_per_s": rate(Variant::RawJobs),
            "raw_notify_inserts_per_s": rate(Variant::RawNotify),
            "jobs_copy_inserts_per_s": rate(Variant::Copy),
            "jobs_copy_unchecked_inserts_per_s": rate(Variant::CopyUnchecked),
            "typed_mean_ms": round(c as f64 * 1e3 / typed, 3),
            "raw_mean_ms": round(c as f64 * 1e3 / raw, 3),
        }));
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}

pub(crate) async fn enqueue_bulk(args: &Args) -> Result<()> {
    let n = args.jobs_or(100_000);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(2).await?;
        let store = job::PgStore::new(pool.clone());
        const REPS: usize = 3;
        let (mut typed, mut chunked, mut server) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            // `Enqueue::many`: one statement for all n.
            pool.execute("TRUNCATE job.jobs CASCADE").await?;
            let start = Instant::now();
            let ids = job::Enqueue::<Noop>::many(&pool, (0..n).map(|_| Noop {})).await?;
            typed.push(start.elapsed().as_secs_f64());
            check_count(&pool, n, ids.len()).await?;

            // `Store::enqueue_many`: validated, 10,000 per statement in one transaction.
            pool.execute("TRUNCATE job.jobs CASCADE").await?;
            let start = Instant::now();
            let jobs = (0..n)
                .map(|_| job::Enqueue::new(Noop {}).build())
                .collect::<Result<Vec<_>, _>>()?;
            let ids = store.enqueue_many(jobs).await?;
            chunked.push(start.elapsed().as_secs_f64());
            check_count(&pool, n, ids.len()).await?;

            // The table's own ceiling: rows made in the server, no client work at all.
            pool.execute("TRUNCATE job.jobs CASCADE").await?;
            let start = Instant::now();
            sqlx::query(
                "INSERT INTO job.jobs (kind, queue, payload)
                 SELECT $2, $3, '{}' FROM generate_series(1, $1::bigint)",
            )
            .bind(n as i64)
            .bind(Noop::KIND)
            .bind(QUEUE)
            .execute(&pool)
            .await?;
            server.push(start.elapsed().as_secs_f64());
            check_count(&pool, n, n).await?;
        }
        let t = median(&typed);
        emit(&json!({
            "workload": "enqueue_bulk",
            "jobs": n,
            "concurrency": 1,
            "seconds": round(t, 3),
            "inserts_per_s": per_s(n, t),
            "best_inserts_per_s": per_s(n, typed.iter().copied().fold(f64::MAX, f64::min)),
            "store_inserts_per_s": per_s(n, median(&chunked)),
            "server_side_inserts_per_s": per_s(n, median(&server)),
            "reps": REPS,
        }));
        pool.execute("TRUNCATE job.jobs CASCADE").await?;
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}

async fn check_count(pool: &PgPool, n: usize, ids: usize) -> Result<()> {
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(pool)
        .await?;
    if usize::try_from(rows).ok() != Some(n) || ids != n {
        return Err(format!("inserted {rows} rows ({ids} ids), expected {n}").into());
    }
    Ok(())
}
