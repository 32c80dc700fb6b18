//! Helpers shared by the `store_*` contract tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use job_core::{ClaimKind, ClaimRequest, ClaimedJob, NewJob, RunAt, Store};
use job_postgres::PgStore;
use sqlx::PgPool;

/// A kind this worker runs at payload version 1 with a 30 s lease.
pub fn kind(name: &str) -> ClaimKind {
    ClaimKind {
        kind: name.to_owned(),
        max_version: 1,
        lease: Duration::from_secs(30),
    }
}

/// A claim of up to `limit` jobs of `kinds` from the `default` queue.
pub fn request(kinds: &[&str], limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: "default".to_owned(),
        kinds: kinds.iter().map(|k| kind(k)).collect(),
        limit,
        worker_id: "worker-1".to_owned(),
    }
}

/// A due job of `kind` on the `default` queue.
pub fn new_job(kind: &str) -> NewJob {
    NewJob {
        kind: kind.to_owned(),
        queue: "default".to_owned(),
        priority: 0,
        payload: r#"{"n":1}"#.to_owned(),
        payload_version: 1,
        max_attempts: 25,
        run_at: RunAt::Now,
    }
}

/// Claims exactly one job of `kind`, panicking when there is not exactly one to claim.
pub async fn claim_one(store: &PgStore, kind: &str) -> ClaimedJob {
    let mut claimed = store.claim(&request(&[kind], 10)).await.unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "expected one claimed job, got {claimed:?}"
    );
    claimed.pop().unwrap()
}

/// The database's clock.
pub async fn db_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Polls `check` every 10 ms until it holds, failing after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < limit,
            "gave up after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the database's clock has passed job `id`'s lease.
pub async fn until_lease_expired(pool: &PgPool, id: i64) {
    eventually(Duration::from_secs(10), "the lease expired", || async {
        sqlx::query_scalar::<_, bool>("SELECT locked_until < now() FROM job.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap()
    })
    .await;
}
