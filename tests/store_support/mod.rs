//! Helpers shared by the `store_*` tests of what is specific to PostgreSQL. The store
//! contract itself is tested by `job_testkit::conformance` (`tests/conformance_pg.rs`).
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::{Duration, Instant};

use job_core::{ClaimKind, ClaimRequest, ClaimedJob, NewJob, Store};
use job_postgres::PgStore;

/// A kind this worker runs at payload version 1 with a 30 s lease.
pub fn kind(name: &str) -> ClaimKind {
    ClaimKind {
        kind: name.to_owned(),
        max_version: 1,
        lease: Duration::from_secs(30),
        concurrency: None,
        rate: None,
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
    NewJob::new(kind, r#"{"n":1}"#)
}

/// Claims exactly one job of `kind`, panicking when there is not exactly one to claim.
pub async fn claim_one(store: &PgStore, kind: &str) -> ClaimedJob {
    // Due scheduled and retryable jobs first become available, as a worker's stager does.
    store.stage_due(1000).await.unwrap();
    let mut claimed = store.claim(&request(&[kind], 10)).await.unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "expected one claimed job, got {claimed:?}"
    );
    claimed.pop().unwrap()
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

/// Rows every scan of `job.jobs` in an `EXPLAIN (ANALYZE, FORMAT JSON)` plan read: those it
/// returned (times its loops) and those its filter or index recheck removed. What a statement
/// reads, measured by its plan rather than by a clock.
pub fn rows_read(plan: &serde_json::Value) -> f64 {
    let mut total = 0.0;
    let scan = plan["Node Type"]
        .as_str()
        .is_some_and(|node| node.contains("Scan"));
    if scan && plan["Relation Name"] == "jobs" {
        let loops = plan["Actual Loops"].as_f64().unwrap_or(1.0);
        total += plan["Actual Rows"].as_f64().unwrap_or(0.0) * loops;
        total += plan["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
        total += plan["Rows Removed by Index Recheck"]
            .as_f64()
            .unwrap_or(0.0);
    }
    if let Some(children) = plan["Plans"].as_array() {
        total += children.iter().map(rows_read).sum::<f64>();
    }
    total
}
