//! Pruning finished jobs after their retention, in bounded batches; dead letters stay.

use std::time::Duration;

use job::JobState;
use job_core::maintenance::{Pruner, PrunerConfig};

use crate::common::*;
use crate::support::*;

#[tokio::test]
async fn completed_and_cancelled_jobs_are_pruned_after_their_retention_and_discarded_kept() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..7 {
        ids.push(enqueue(&h.store, Noop { n }).await);
    }
    let state = |i: usize| match i {
        0..=2 => "completed",
        3..=4 => "cancelled",
        _ => "discarded",
    };
    for (i, id) in ids.iter().enumerate() {
        sqlx::query(&format!(
            "UPDATE job.jobs SET state = '{}', finalized_at = now() - interval '2 hours'
             WHERE id = $1",
            state(i)
        ))
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    }
    // A fresh completion, inside its retention.
    let fresh = enqueue(&h.store, Noop { n: 99 }).await;
    exec(
        &h.store,
        "UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = $1",
        fresh,
    )
    .await;

    let pruner = Pruner::new(
        h.store.clone(),
        PrunerConfig {
            completed_retention: Duration::from_secs(3600),
            cancelled_retention: Duration::from_secs(3 * 3600),
            batch: 2,
            ..PrunerConfig::default()
        },
    );
    let pass = pruner.run_once().await.unwrap();
    assert_eq!(
        pass.deleted, 3,
        "the three old completions, in batches of two"
    );
    for (i, id) in ids.iter().enumerate() {
        let gone = h.store_row_gone(*id).await;
        assert_eq!(gone, state(i) == "completed", "job {i} ({})", state(i));
    }
    assert!(!h.store_row_gone(fresh).await);

    let strict = Pruner::new(
        h.store.clone(),
        PrunerConfig {
            completed_retention: Duration::ZERO,
            cancelled_retention: Duration::ZERO,
            ..PrunerConfig::default()
        },
    );
    assert_eq!(strict.run_once().await.unwrap().deleted, 3);
    assert_eq!(
        count_in(&h.store, JobState::Discarded).await,
        2,
        "dead letters stay"
    );
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 2);
}

trait Gone {
    async fn store_row_gone(&self, id: job::JobId) -> bool;
}

impl Gone for Harness {
    async fn store_row_gone(&self, id: job::JobId) -> bool {
        job::Store::get(&self.store, id).await.unwrap().is_none()
    }
}
