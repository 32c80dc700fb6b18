//! Guarded finalize: each outcome's row, and nothing written without the lease.

mod store_support;

use std::time::Duration;

use job_core::{
    ClaimedJob, ErrorClass, Failure, Finalize, Finalized, JobRow, JobState, Lease, Outcome, Store,
};
use job_postgres::PgStore;
use job_testkit::TestDb;
use store_support::{claim_one, db_now, new_job, request};
use uuid::Uuid;

async fn running(store: &PgStore) -> ClaimedJob {
    store.enqueue(new_job("noop")).await.unwrap();
    claim_one(store, "noop").await
}

async fn finalize_one(store: &PgStore, lease: Lease, outcome: Outcome) -> JobRow {
    let result = store
        .finalize(&[Finalize { lease, outcome }])
        .await
        .unwrap();
    assert_eq!(result, vec![Finalized::Applied]);
    store.get(lease.id).await.unwrap().unwrap()
}

fn failure(attempt: i32, class: ErrorClass, message: &str) -> Failure {
    Failure {
        attempt,
        class,
        message: message.into(),
    }
}

fn assert_lease_cleared(row: &JobRow) {
    assert_eq!(
        (row.lock_token, row.locked_until, row.locked_by.as_deref()),
        (None, None, None),
        "lease of job {} not cleared",
        row.id
    );
}

async fn snoozes(store: &PgStore, id: i64) -> i32 {
    sqlx::query_scalar("SELECT snoozes FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn complete_marks_the_job_completed_and_finalized() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let row = finalize_one(&store, job.lease, Outcome::Complete).await;
    assert_eq!(row.state, JobState::Completed);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.attempt, 1);
    assert_eq!(row.errors, vec![]);
    assert_lease_cleared(&row);
    db.close().await;
}

#[tokio::test]
async fn retry_moves_run_at_keeps_the_attempt_and_appends_the_failure() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let retry = Outcome::Retry {
        delay: Duration::from_secs(3600),
        failure: failure(1, ErrorClass::Error, "smtp refused"),
    };
    let row = finalize_one(&store, job.lease, retry).await;
    assert_eq!(row.state, JobState::Retryable);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.finalized_at, None);
    assert!(row.run_at > db_now(store.pool()).await + chrono::Duration::minutes(59));
    assert_eq!(row.errors.len(), 1);
    let error = &row.errors[0];
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "error", "smtp refused")
    );
    assert_lease_cleared(&row);
    assert_eq!(store.claim(&request(&["noop"], 10)).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test]
async fn retries_accumulate_errors_and_count_attempts() {
    let db = TestDb::new().await;
    let store = db.store();
    let first = running(&store).await;
    let retry = |attempt, class| Outcome::Retry {
        delay: Duration::ZERO,
        failure: failure(attempt, class, "failed"),
    };
    finalize_one(&store, first.lease, retry(1, ErrorClass::Timeout)).await;
    let second = claim_one(&store, "noop").await;
    assert_eq!(second.attempt, 2);
    assert_ne!(second.lease.token, first.lease.token);
    let row = finalize_one(&store, second.lease, retry(2, ErrorClass::Panic)).await;
    let history: Vec<(i32, &str)> = row
        .errors
        .iter()
        .map(|e| (e.attempt, e.class.as_str()))
        .collect();
    assert_eq!(history, vec![(1, "timeout"), (2, "panic")]);
    assert!(row.errors[0].at <= row.errors[1].at);
    db.close().await;
}

#[tokio::test]
async fn cancel_marks_the_job_cancelled_with_its_reason() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let cancel = Outcome::Cancel {
        reason: "customer deleted".into(),
    };
    let row = finalize_one(&store, job.lease, cancel).await;
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.finalized_at.is_some());
    let error = &row.errors[0];
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "cancelled", "customer deleted")
    );
    assert_lease_cleared(&row);
    db.close().await;
}

#[tokio::test]
async fn snooze_reschedules_and_refunds_the_attempt() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let snooze = Outcome::Snooze {
        delay: Duration::from_secs(600),
    };
    let row = finalize_one(&store, job.lease, snooze).await;
    assert_eq!(row.state, JobState::Scheduled);
    assert_eq!(row.attempt, 0);
    assert_eq!(snoozes(&store, job.lease.id).await, 1);
    assert!(row.run_at > db_now(store.pool()).await + chrono::Duration::minutes(9));
    assert_eq!(row.errors, vec![]);
    assert_eq!(row.finalized_at, None);
    assert_lease_cleared(&row);
    assert_eq!(store.claim(&request(&["noop"], 10)).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test]
async fn a_snoozed_job_runs_again_with_the_same_attempt_number() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let snooze = Outcome::Snooze {
        delay: Duration::ZERO,
    };
    finalize_one(&store, job.lease, snooze).await;
    let again = claim_one(&store, "noop").await;
    assert_eq!(again.attempt, 1);
    db.close().await;
}

#[tokio::test]
async fn discard_dead_letters_the_job_with_its_failure() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let discard = Outcome::Discard {
        failure: failure(1, ErrorClass::Poison, "payload does not decode"),
    };
    let row = finalize_one(&store, job.lease, discard).await;
    assert_eq!(row.state, JobState::Discarded);
    assert!(row.finalized_at.is_some());
    let error = &row.errors[0];
    assert_eq!(
        (error.class.as_str(), error.message.as_str()),
        ("poison", "payload does not decode")
    );
    assert_lease_cleared(&row);
    db.close().await;
}

#[tokio::test]
async fn finalize_with_a_stale_token_returns_lease_lost_and_changes_nothing() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let before = store.get(job.lease.id).await.unwrap().unwrap();
    let stale = Lease {
        id: job.lease.id,
        token: Uuid::new_v4(),
    };
    let outcomes = [
        Outcome::Complete,
        Outcome::Cancel { reason: "x".into() },
        Outcome::Snooze {
            delay: Duration::ZERO,
        },
        Outcome::Retry {
            delay: Duration::ZERO,
            failure: failure(1, ErrorClass::Error, "x"),
        },
        Outcome::Discard {
            failure: failure(1, ErrorClass::Terminal, "x"),
        },
    ];
    for outcome in outcomes {
        let result = store
            .finalize(&[Finalize {
                lease: stale,
                outcome,
            }])
            .await
            .unwrap();
        assert_eq!(result, vec![Finalized::LeaseLost]);
    }
    assert_eq!(store.get(job.lease.id).await.unwrap().unwrap(), before);
    db.close().await;
}

#[tokio::test]
async fn a_finished_job_cannot_be_finalized_again() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    finalize_one(&store, job.lease, Outcome::Complete).await;
    let before = store.get(job.lease.id).await.unwrap().unwrap();
    let again = Finalize {
        lease: job.lease,
        outcome: Outcome::Cancel {
            reason: "late".into(),
        },
    };
    assert_eq!(
        store.finalize(&[again]).await.unwrap(),
        vec![Finalized::LeaseLost]
    );
    assert_eq!(store.get(job.lease.id).await.unwrap().unwrap(), before);
    db.close().await;
}

#[tokio::test]
async fn a_batch_reports_each_item_in_order() {
    let db = TestDb::new().await;
    let store = db.store();
    let a = running(&store).await;
    let b = running(&store).await;
    let c = running(&store).await;
    let lost = Lease {
        id: b.lease.id,
        token: Uuid::new_v4(),
    };
    let missing = Lease {
        id: i64::MAX,
        token: Uuid::new_v4(),
    };
    let batch = [
        Finalize {
            lease: a.lease,
            outcome: Outcome::Complete,
        },
        Finalize {
            lease: lost,
            outcome: Outcome::Complete,
        },
        Finalize {
            lease: missing,
            outcome: Outcome::Complete,
        },
        Finalize {
            lease: c.lease,
            outcome: Outcome::Discard {
                failure: failure(1, ErrorClass::Terminal, "no"),
            },
        },
    ];
    let result = store.finalize(&batch).await.unwrap();
    use Finalized::{Applied, LeaseLost};
    assert_eq!(result, vec![Applied, LeaseLost, LeaseLost, Applied]);
    assert_eq!(
        store.get(b.lease.id).await.unwrap().unwrap().state,
        JobState::Running
    );
    assert_eq!(
        store.get(c.lease.id).await.unwrap().unwrap().state,
        JobState::Discarded
    );
    assert_eq!(store.finalize(&[]).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test]
async fn a_duplicate_id_in_one_batch_is_applied_once_without_error() {
    let db = TestDb::new().await;
    let store = db.store();
    let job = running(&store).await;
    let batch = [
        Finalize {
            lease: job.lease,
            outcome: Outcome::Complete,
        },
        Finalize {
            lease: job.lease,
            outcome: Outcome::Complete,
        },
    ];
    let result = store.finalize(&batch).await.unwrap();
    assert_eq!(
        result.iter().filter(|r| **r == Finalized::Applied).count(),
        1,
        "{result:?}"
    );
    assert_eq!(
        store.get(job.lease.id).await.unwrap().unwrap().state,
        JobState::Completed
    );
    db.close().await;
}
