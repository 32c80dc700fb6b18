//! Guarded finalize: the row each outcome writes, and nothing written without the lease.

use std::time::Duration;

use job_core::{
    Admin, ErrorClass, Finalize, Finalized, JobFilter, JobState, Lease, Outcome, Store,
};
use uuid::Uuid;

use super::support::{
    assert_lease_cleared, assert_nothing_to_claim, claim_one, failure, finalize_one, row, running,
    NOOP,
};

/// `Complete` makes the job `completed` and finalized, the lease cleared, no error recorded.
pub async fn complete_marks_the_job_completed_and_finalized<S: Store>(store: S) {
    let job = running(&store).await;
    let row = finalize_one(&store, job.lease, Outcome::Complete).await;
    assert_eq!(row.state, JobState::Completed);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.attempt, 1);
    assert_eq!(row.errors, vec![]);
    assert_lease_cleared(&row);
}

/// `Retry` makes the job `retryable` after its delay, the attempt kept and the failure appended
/// with its class.
pub async fn retry_moves_run_at_keeps_the_attempt_and_appends_the_failure<S: Store>(store: S) {
    let job = running(&store).await;
    let retry = Outcome::Retry {
        delay: Duration::from_secs(3600),
        failure: failure(1, ErrorClass::Error, "smtp refused"),
    };
    let row = finalize_one(&store, job.lease, retry).await;
    assert_eq!(row.state, JobState::Retryable);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.finalized_at, None);
    assert!(
        row.run_at > row.created_at + chrono::Duration::minutes(59),
        "retry in 1 h runs at {}, created at {}",
        row.run_at,
        row.created_at
    );
    assert_eq!(row.errors.len(), 1);
    let error = &row.errors[0];
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "error", "smtp refused")
    );
    assert_lease_cleared(&row);
    assert_nothing_to_claim(&store, NOOP).await;
}

/// Each retry appends to the history in order, and the next claim counts the next attempt
/// under a new token.
pub async fn retries_accumulate_errors_and_count_attempts<S: Store>(store: S) {
    let first = running(&store).await;
    let retry = |attempt, class| Outcome::Retry {
        delay: Duration::ZERO,
        failure: failure(attempt, class, "failed"),
    };
    finalize_one(&store, first.lease, retry(1, ErrorClass::Timeout)).await;
    let second = claim_one(&store, NOOP).await;
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
}

/// `Cancel` makes the job `cancelled` and finalized, its reason recorded as class `cancelled`.
pub async fn cancel_marks_the_job_cancelled_with_its_reason<S: Store>(store: S) {
    let job = running(&store).await;
    let cancel = Outcome::Cancel {
        reason: "customer deleted".into(),
    };
    let row = finalize_one(&store, job.lease, cancel).await;
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.errors.len(), 1);
    let error = &row.errors[0];
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "cancelled", "customer deleted")
    );
    assert_lease_cleared(&row);
}

/// `Snooze` makes the job `scheduled` after its delay with the attempt refunded and no error.
pub async fn snooze_reschedules_and_refunds_the_attempt<S: Store>(store: S) {
    let job = running(&store).await;
    let snooze = Outcome::Snooze {
        delay: Duration::from_secs(600),
    };
    let row = finalize_one(&store, job.lease, snooze).await;
    assert_eq!(row.state, JobState::Scheduled);
    assert_eq!(row.attempt, 0);
    assert!(
        row.run_at > row.created_at + chrono::Duration::minutes(9),
        "snooze for 10 min runs at {}, created at {}",
        row.run_at,
        row.created_at
    );
    assert_eq!(row.errors, vec![]);
    assert_eq!(row.finalized_at, None);
    assert_lease_cleared(&row);
    assert_nothing_to_claim(&store, NOOP).await;
}

/// A snoozed job runs again with the same attempt number, and its snoozes are counted.
pub async fn a_snoozed_job_runs_again_with_the_same_attempt_number<S: Store>(store: S) {
    let job = running(&store).await;
    let snooze = Outcome::Snooze {
        delay: Duration::ZERO,
    };
    finalize_one(&store, job.lease, snooze).await;
    let again = claim_one(&store, NOOP).await;
    assert_eq!(
        (again.lease.id, again.attempt, again.snoozes),
        (job.lease.id, 1, 1)
    );
}

/// `Discard` dead-letters the job (`discarded`, finalized) with its failure and class.
pub async fn discard_dead_letters_the_job_with_its_failure<S: Store>(store: S) {
    let job = running(&store).await;
    let discard = Outcome::Discard {
        failure: failure(1, ErrorClass::Poison, "payload does not decode"),
    };
    let row = finalize_one(&store, job.lease, discard).await;
    assert_eq!(row.state, JobState::Discarded);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.errors.len(), 1);
    let error = &row.errors[0];
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "poison", "payload does not decode")
    );
    assert_lease_cleared(&row);
}

/// Any outcome under a stale token is `LeaseLost` and leaves the row exactly as it was.
pub async fn finalize_with_a_stale_token_returns_lease_lost_and_changes_nothing<S: Store>(
    store: S,
) {
    let job = running(&store).await;
    let before = row(&store, job.lease.id).await;
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
        let name = outcome.name();
        let result = store
            .finalize(&[Finalize {
                result: None,
                lease: stale,
                outcome,
            }])
            .await
            .unwrap();
        assert_eq!(
            result,
            vec![Finalized::LeaseLost],
            "{name} under a stale token"
        );
    }
    assert_eq!(row(&store, job.lease.id).await, before);
}

/// A finished job cannot be finalized again, even under the token it finished with.
pub async fn a_finished_job_cannot_be_finalized_again<S: Store>(store: S) {
    let job = running(&store).await;
    finalize_one(&store, job.lease, Outcome::Complete).await;
    let before = row(&store, job.lease.id).await;
    let again = Finalize {
        result: None,
        lease: job.lease,
        outcome: Outcome::Cancel {
            reason: "late".into(),
        },
    };
    assert_eq!(
        store.finalize(&[again]).await.unwrap(),
        vec![Finalized::LeaseLost]
    );
    assert_eq!(row(&store, job.lease.id).await, before);
}

/// A batch reports one result per item in order (held, stale, unknown id); an empty batch is
/// fine.
pub async fn a_batch_reports_each_item_in_order<S: Store>(store: S) {
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
    let item = |lease, outcome| Finalize::new(lease, outcome);
    let terminal = Outcome::Discard {
        failure: failure(1, ErrorClass::Terminal, "no"),
    };
    let batch = [
        item(a.lease, Outcome::Complete),
        item(lost, Outcome::Complete),
        item(missing, Outcome::Complete),
        item(c.lease, terminal),
    ];
    let result = store.finalize(&batch).await.unwrap();
    use Finalized::{Applied, LeaseLost};
    assert_eq!(result, vec![Applied, LeaseLost, LeaseLost, Applied]);
    assert_eq!(row(&store, a.lease.id).await.state, JobState::Completed);
    assert_eq!(row(&store, b.lease.id).await.state, JobState::Running);
    assert_eq!(row(&store, c.lease.id).await.state, JobState::Discarded);
    assert_eq!(store.finalize(&[]).await.unwrap(), vec![]);
}

/// The same lease twice in one batch is applied once, without an error.
pub async fn a_duplicate_id_in_one_batch_is_applied_once_without_error<S: Store>(store: S) {
    let job = running(&store).await;
    let complete = Finalize {
        result: None,
        lease: job.lease,
        outcome: Outcome::Complete,
    };
    let result = store.finalize(&[complete.clone(), complete]).await.unwrap();
    assert_eq!(result.len(), 2, "{result:?}");
    let applied = result.iter().filter(|r| **r == Finalized::Applied).count();
    assert_eq!(applied, 1, "{result:?}");
    assert_eq!(row(&store, job.lease.id).await.state, JobState::Completed);
}

/// A stale lease and the held one of the same job in one batch, in either order, and beside
/// outcomes of other jobs: only the held one applies, with its own outcome, whichever way the
/// store writes the batch (SQLite writes the completions of a batch in one statement and the
/// rest one by one).
pub async fn a_stale_and_a_held_lease_of_one_job_in_a_batch_apply_only_the_held_one<S: Store>(
    store: S,
) {
    let a = running(&store).await;
    let b = running(&store).await;
    let c = running(&store).await;
    let stale = |lease: Lease| Lease {
        id: lease.id,
        token: Uuid::new_v4(),
    };
    let retry = Outcome::Retry {
        delay: Duration::from_secs(3600),
        failure: failure(1, ErrorClass::Error, "held"),
    };
    let batch = [
        Finalize::new(stale(a.lease), Outcome::Complete),
        Finalize::new(a.lease, retry),
        Finalize::new(b.lease, Outcome::Complete),
        Finalize::new(stale(b.lease), Outcome::Complete),
        Finalize::new(c.lease, Outcome::Complete),
    ];
    let result = store.finalize(&batch).await.unwrap();
    use Finalized::{Applied, LeaseLost};
    assert_eq!(
        result,
        vec![LeaseLost, Applied, Applied, LeaseLost, Applied]
    );
    let a_row = row(&store, a.lease.id).await;
    assert_eq!(a_row.state, JobState::Retryable);
    assert_eq!(a_row.errors.len(), 1);
    assert_eq!(row(&store, b.lease.id).await.state, JobState::Completed);
    assert_eq!(row(&store, c.lease.id).await.state, JobState::Completed);
}

/// Messages are stored as `storable_text` makes them: without NUL characters and cut to
/// `MAX_ERROR_MESSAGE` bytes, so that no handler's message can make an outcome unwritable.
pub async fn error_messages_are_stored_without_nul_and_cut_to_the_limit<S: Store>(store: S) {
    let nul = running(&store).await;
    let row = finalize_one(
        &store,
        nul.lease,
        Outcome::Retry {
            delay: Duration::from_secs(3600),
            failure: failure(1, ErrorClass::Error, "bad\0byte"),
        },
    )
    .await;
    assert_eq!(row.errors[0].message, "badbyte");

    let huge = running(&store).await;
    let message = "x".repeat(12 * 1024 * 1024);
    let row = finalize_one(
        &store,
        huge.lease,
        Outcome::Discard {
            failure: failure(1, ErrorClass::Panic, &message),
        },
    )
    .await;
    let stored = &row.errors[0].message;
    assert!(
        stored.len() <= job_core::MAX_ERROR_MESSAGE,
        "{}",
        stored.len()
    );
    assert_eq!(
        stored,
        &job_core::storable_text(&message, job_core::MAX_ERROR_MESSAGE)
    );

    let cancelled = running(&store).await;
    let row = finalize_one(
        &store,
        cancelled.lease,
        Outcome::Cancel {
            reason: "stop\0".into(),
        },
    )
    .await;
    assert_eq!(row.errors[0].message, "stop");
}

/// The history keeps its first entry and the latest ones, `MAX_ERROR_HISTORY` in all, however
/// often a job fails.
pub async fn the_error_history_keeps_the_first_and_latest_entries<S: Store>(store: S) {
    let first = running(&store).await;
    let id = first.lease.id;
    let mut lease = first.lease;
    let attempts = job_core::MAX_ERROR_HISTORY as i32 + 7;
    for attempt in 1..=attempts {
        let retry = Outcome::Retry {
            delay: Duration::ZERO,
            failure: failure(attempt, ErrorClass::Error, &format!("failure {attempt}")),
        };
        finalize_one(&store, lease, retry).await;
        if attempt < attempts {
            lease = claim_one(&store, NOOP).await.lease;
        }
    }
    let row = row(&store, id).await;
    let kept: Vec<i32> = row.errors.iter().map(|e| e.attempt).collect();
    let mut expected = vec![1];
    expected.extend(attempts - job_core::MAX_ERROR_HISTORY as i32 + 2..=attempts);
    assert_eq!(kept, expected);
    assert_eq!(row.errors.len(), job_core::MAX_ERROR_HISTORY);
}

/// A completion stores the job's result as given, readable through `get` and `Admin::list`;
/// any other outcome stores none, even when the item carries one, and a job that completes
/// without one has none.
pub async fn a_completion_stores_its_result_and_no_other_outcome_does<S: Store + Admin>(store: S) {
    let result = serde_json::json!({
        "charge": "ch_1",
        "cents": 1250,
        "big": 12345678901234567890u64,
        "text": "zürich 東京 \"quoted\" \\u0000 as text",
        "nested": [1, null, true, {"k": []}],
    });
    let done = running(&store).await;
    let item = Finalize {
        result: Some(result.to_string()),
        ..Finalize::new(done.lease, Outcome::Complete)
    };
    assert_eq!(
        store.finalize(&[item]).await.unwrap(),
        vec![Finalized::Applied]
    );
    let stored = row(&store, done.lease.id).await;
    assert_eq!(stored.state, JobState::Completed);
    assert_eq!(stored.result.as_ref(), Some(&result));
    let listed = store.list(&JobFilter::default()).await.unwrap();
    let listed = listed.iter().find(|r| r.id == done.lease.id).unwrap();
    assert_eq!(listed.result.as_ref(), Some(&result));

    let retried = running(&store).await;
    let item = Finalize {
        result: Some("{\"not\":\"stored\"}".into()),
        ..Finalize::new(
            retried.lease,
            Outcome::Retry {
                delay: Duration::from_secs(3600),
                failure: failure(1, ErrorClass::Error, "later"),
            },
        )
    };
    store.finalize(&[item]).await.unwrap();
    let stored = row(&store, retried.lease.id).await;
    assert_eq!(stored.state, JobState::Retryable);
    assert_eq!(stored.result, None, "a retry stores no result");

    let plain = running(&store).await;
    let stored = finalize_one(&store, plain.lease, Outcome::Complete).await;
    assert_eq!(stored.result, None);
}
