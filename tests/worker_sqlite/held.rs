//! On SQLite as on PostgreSQL (`tests/steps/held.rs`): a handler's own transaction that holds
//! the job (after `complete_in`) past two thirds of the lease has its execution stopped, and the
//! attempt counts, so the job ends in a dead letter instead of running again for ever. Here
//! that transaction holds the file's write lock, so no heartbeat gets through meanwhile.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::*;

#[derive(Clone, Default)]
struct Runs(Arc<AtomicU32>);

/// Completes itself in its transaction, then waits 2.5 s (past two thirds of its 1.5 s
/// lease) before committing.
#[derive(Debug, Serialize, Deserialize)]
struct HoldFile {}

impl Job for HoldFile {
    const KIND: &'static str = "sqlite.hold_file";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(1500),
        max_attempts: 2,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Runs>()?.0.fetch_add(1, Ordering::SeqCst);
        let pool = ctx.state::<sqlx::SqlitePool>()?;
        let mut tx = pool.begin().await?;
        job_sqlite::complete_in(&mut tx, &ctx).await?;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        tx.commit().await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_complete_in_transaction_held_past_its_lease_counts_its_attempts_to_a_dead_letter() {
    let h = Harness::new().await;
    let runs = Runs::default();
    let id = enqueue(&h.store, HoldFile {}).await;
    let worker = h
        .worker()
        .register::<HoldFile>()
        .state(runs.clone())
        .state(h.db.pool())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(
        runs.0.load(Ordering::SeqCst),
        2,
        "one execution per attempt"
    );
    let classes: Vec<&str> = row.errors.iter().map(|e| e.class.as_str()).collect();
    assert!(
        classes.len() == 2
            && classes
                .iter()
                .all(|c| *c == "lease_held" || *c == "lease_expired")
            && classes.contains(&"lease_held"),
        "{classes:?}"
    );
}
