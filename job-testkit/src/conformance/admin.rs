//! Operator actions through [`Admin`]: listing, redriving and purging dead letters, stats.

use std::time::Duration;

use job_core::{
    Admin, ErrorClass, Failure, JobFilter, JobId, JobState, NewJob, OnDuplicate, Outcome, Store,
    Unique, UniqueScope,
};

use super::support::{claim_one, finalize_one, new_job, row, NOOP};

/// Enqueues `job` as a [`NOOP`], claims it and discards it: a dead letter.
async fn dead_letter<S: Store>(store: &S, job: NewJob) -> JobId {
    let id = store.enqueue(job).await.unwrap();
    let claimed = claim_one(store, NOOP).await;
    assert_eq!(claimed.lease.id, id);
    let discard = Outcome::Discard {
        failure: Failure {
            attempt: 1,
            class: ErrorClass::Terminal,
            message: "dead".into(),
        },
    };
    finalize_one(store, claimed.lease, discard).await;
    id
}

fn keyed(key: &str) -> NewJob {
    NewJob {
        unique: Some(Unique {
            key: key.into(),
            scope: UniqueScope::UntilFinished,
            on_duplicate: OnDuplicate::Keep,
        }),
        ..new_job(NOOP)
    }
}

fn ids(rows: &[job_core::JobRow]) -> Vec<JobId> {
    rows.iter().map(|r| r.id).collect()
}

/// `list` returns the jobs matching every field of the filter, lowest id first, at most its
/// limit, each with its whole history.
pub async fn list_matches_every_filter_field_oldest_first<S: Store + Admin>(store: S) {
    let mail = store
        .enqueue(NewJob {
            queue: "mail".into(),
            tags: vec!["eu".into()],
            tenant: Some("acme".into()),
            ..new_job("conformance.mail")
        })
        .await
        .unwrap();
    let plain = store.enqueue(new_job("conformance.plain")).await.unwrap();
    let dead = dead_letter(&store, new_job(NOOP)).await;
    let all = store.list(&JobFilter::default()).await.unwrap();
    assert_eq!(ids(&all), vec![mail, plain, dead]);
    let by = |filter: JobFilter| {
        let store = store.clone();
        async move { ids(&store.list(&filter).await.unwrap()) }
    };
    assert_eq!(by(JobFilter::dead_letters()).await, vec![dead]);
    assert_eq!(
        by(JobFilter {
            queue: Some("mail".into()),
            ..JobFilter::default()
        })
        .await,
        vec![mail]
    );
    assert_eq!(
        by(JobFilter {
            kind: Some("conformance.plain".into()),
            ..JobFilter::default()
        })
        .await,
        vec![plain]
    );
    assert_eq!(
        by(JobFilter {
            tag: Some("eu".into()),
            tenant: Some("acme".into()),
            ..JobFilter::default()
        })
        .await,
        vec![mail]
    );
    assert_eq!(by(JobFilter::ids([plain, dead])).await, vec![plain, dead]);
    assert_eq!(
        by(JobFilter {
            limit: Some(2),
            ..JobFilter::default()
        })
        .await,
        vec![mail, plain]
    );
    let listed = store.list(&JobFilter::ids([dead])).await.unwrap();
    assert_eq!(listed[0], row(&store, dead).await);
    assert_eq!(listed[0].errors.len(), 1);
}

/// `redrive` puts dead letters back to `available` with fresh attempts and their history
/// kept, skipping (and naming) one whose unique key an active job holds.
pub async fn redrive_restores_dead_letters_and_skips_held_keys<S: Store + Admin>(store: S) {
    let plain = dead_letter(&store, new_job(NOOP)).await;
    let held = dead_letter(&store, keyed("k")).await;
    let holder = store.enqueue(keyed("k")).await.unwrap();
    let redriven = store.redrive(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(redriven.redriven, vec![plain]);
    assert_eq!(redriven.skipped, vec![(held, holder)]);
    let row = row(&store, plain).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!((row.finalized_at, row.deadline), (None, None));
    assert_eq!(row.errors.len(), 1, "history kept");
    let again = store.redrive(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(again.redriven, Vec::<JobId>::new());
}

/// A redrive gives a dead letter fresh interruptions with its fresh attempts: one given back
/// uncounted [`MAX_REFUNDED_INTERRUPTIONS`](job_core::MAX_REFUNDED_INTERRUPTIONS) times before
/// it died is given back again after the redrive.
pub async fn a_redrive_gives_fresh_interruptions<S: Store + Admin>(store: S) {
    use job_core::Release;
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    for _ in 0..job_core::MAX_REFUNDED_INTERRUPTIONS {
        let job = claim_one(&store, NOOP).await;
        let release = Release::interrupted(job.lease, Duration::from_millis(10));
        assert_eq!(store.release(&[release]).await.unwrap(), 1);
    }
    let job = claim_one(&store, NOOP).await;
    let release = Release::interrupted(job.lease, Duration::from_millis(10));
    assert_eq!(
        store.release(&[release]).await.unwrap(),
        0,
        "the bound holds"
    );
    let discard = Outcome::Discard {
        failure: Failure {
            attempt: 1,
            class: ErrorClass::Terminal,
            message: "dead".into(),
        },
    };
    finalize_one(&store, job.lease, discard).await;
    let redriven = store.redrive(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(redriven.redriven, vec![id]);
    let job = claim_one(&store, NOOP).await;
    assert_eq!((job.lease.id, job.attempt), (id, 1));
    let release = Release::interrupted(job.lease, Duration::from_millis(10));
    assert_eq!(
        store.release(&[release]).await.unwrap(),
        1,
        "fresh after the redrive"
    );
}

/// `purge` deletes the matching dead letters, and only dead letters.
pub async fn purge_deletes_only_matching_dead_letters<S: Store + Admin>(store: S) {
    let first = dead_letter(&store, new_job(NOOP)).await;
    let second = dead_letter(&store, new_job(NOOP)).await;
    let waiting = store.enqueue(new_job("conformance.waiting")).await.unwrap();
    assert_eq!(
        store
            .purge(&JobFilter::ids([first, waiting]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.get(first).await.unwrap(), None);
    assert_eq!(row(&store, waiting).await.state, JobState::Available);
    assert_eq!(store.purge(&JobFilter::dead_letters()).await.unwrap(), 1);
    assert_eq!(store.get(second).await.unwrap(), None);
}

/// `stats` counts jobs per queue and state (by queue, then state), the dead letters, and how
/// long the oldest due job has waited.
pub async fn stats_count_per_queue_and_state_with_the_oldest_due_age<S: Store + Admin>(store: S) {
    let empty = store.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(empty.counts, vec![]);
    assert_eq!((empty.oldest_available_age, empty.dead_letters), (None, 0));

    dead_letter(&store, new_job(NOOP)).await;
    for queue in ["b", "a", "a"] {
        store
            .enqueue(NewJob {
                queue: queue.into(),
                ..new_job("conformance.waiting")
            })
            .await
            .unwrap();
    }
    store
        .enqueue(NewJob {
            queue: "a".into(),
            run_at: job_core::RunAt::In(Duration::from_secs(3600)),
            ..new_job("conformance.waiting")
        })
        .await
        .unwrap();
    super::support::outlive(Duration::from_millis(10)).await;
    let stats = store.stats(&JobFilter::default()).await.unwrap();
    let counts: Vec<(&str, JobState, u64)> = stats
        .counts
        .iter()
        .map(|c| (c.queue.as_str(), c.state, c.count))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("a", JobState::Scheduled, 1),
            ("a", JobState::Available, 2),
            ("b", JobState::Available, 1),
            ("default", JobState::Discarded, 1),
        ]
    );
    assert_eq!(stats.dead_letters, 1);
    assert_eq!(stats.stuck, 0);
    let age = stats.oldest_available_age.expect("due jobs wait");
    assert!(
        age > Duration::ZERO && age < Duration::from_secs(60),
        "{age:?}"
    );
    let only_b = store
        .stats(&JobFilter {
            queue: Some("b".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(only_b.in_state(JobState::Available), 1);
    assert_eq!(only_b.dead_letters, 0);
}

/// A filter whose kind, queue, tenant or tag holds a NUL character (which no name can hold,
/// and PostgreSQL cannot take as text) is refused by `list`, `redrive`, `purge` and `stats`,
/// naming the field, and changes nothing: not the database's encoding error.
pub async fn a_filter_field_holding_a_nul_is_refused_naming_it<S: Store + Admin>(store: S) {
    let dead = dead_letter(&store, new_job(NOOP)).await;
    for field in ["kind", "queue", "tenant", "tag"] {
        let mut filter = JobFilter::dead_letters();
        let nul = Some("a\0b".to_owned());
        match field {
            "kind" => filter.kind = nul,
            "queue" => filter.queue = nul,
            "tenant" => filter.tenant = nul,
            _ => filter.tag = nul,
        }
        let refusals = [
            store.list(&filter).await.map(drop).unwrap_err(),
            store.redrive(&filter).await.map(drop).unwrap_err(),
            store.purge(&filter).await.map(drop).unwrap_err(),
            store.stats(&filter).await.map(drop).unwrap_err(),
        ];
        for refused in refusals {
            assert!(refused.is_refused(), "{field}: {refused}");
            assert!(
                refused.to_string().contains(&format!("`{field}`"))
                    && refused.to_string().contains("NUL"),
                "{field}: {refused}"
            );
        }
    }
    assert_eq!(row(&store, dead).await.state, JobState::Discarded);
}
