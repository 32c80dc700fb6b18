//! The worker runtime over the store: unknown kinds, poison payloads and payload versions.

use std::time::Duration;

use job_core::{Job, JobState, NewJob, Store};
use job_core::{Worker, WorkerBuilder};

use super::jobs::{Greet, Person, Rated, Seen, Sleepy};
use super::support::{reaches, row};

fn worker<S: Store>(store: S, seen: &Seen) -> WorkerBuilder<S> {
    Worker::builder(store)
        .id("conformance-worker")
        .poll_interval(Duration::from_millis(20))
        .register::<Greet>()
        .register::<Person>()
        .register::<Sleepy>()
        .queue("default", 4)
        .state(seen.clone())
}

fn raw<J: Job>(payload: &str, version: i32) -> NewJob {
    NewJob {
        payload_version: version,
        max_attempts: 5,
        ..NewJob::new(J::KIND, payload)
    }
}

/// A worker runs the kinds it registered and leaves other kinds untouched for a worker that
/// knows them.
pub async fn a_worker_leaves_unknown_kinds_untouched<S: Store>(store: S) {
    let stranger = store
        .enqueue(NewJob::new("conformance.stranger", "{}"))
        .await
        .unwrap();
    let before = row(&store, stranger).await;
    let known = store
        .enqueue(raw::<Greet>(r#"{"name":"ada"}"#, 1))
        .await
        .unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    reaches(&store, known, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(seen.runs_of(known), ["ada"]);
    assert_eq!(row(&store, stranger).await, before);
}

/// A payload that does not decode is discarded at once with class `poison`, its payload kept
/// and the handler never run.
pub async fn a_payload_that_does_not_decode_is_discarded_as_poison<S: Store>(store: S) {
    let id = store
        .enqueue(raw::<Greet>(r#"{"name":42}"#, 1))
        .await
        .unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    let row = reaches(&store, id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(seen.runs_of(id), Vec::<String>::new(), "the handler ran");
    assert_eq!(row.attempt, 1, "discarded at once, not retried in a loop");
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    assert_eq!(row.errors[0].class, "poison");
    assert!(!row.errors[0].message.is_empty());
    assert_eq!(
        row.payload,
        serde_json::json!({ "name": 42 }),
        "payload kept"
    );
}

/// A row with a payload version newer than the worker's is never claimed: it stays as it was
/// for a newer worker.
pub async fn a_newer_payload_version_is_left_for_a_newer_worker<S: Store>(store: S) {
    let newer = store
        .enqueue(raw::<Greet>(r#"{"name":"from the future"}"#, 2))
        .await
        .unwrap();
    let before = row(&store, newer).await;
    let current = store
        .enqueue(raw::<Greet>(r#"{"name":"now"}"#, 1))
        .await
        .unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    reaches(&store, current, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(seen.runs_of(newer), Vec::<String>::new());
    assert_eq!(row(&store, newer).await, before);
}

/// A row with an older payload version is upgraded through `Job::upgrade` and runs; the
/// current version runs as it is.
pub async fn an_older_payload_version_is_upgraded_before_it_runs<S: Store>(store: S) {
    let old = store
        .enqueue(raw::<Person>(r#"{"name":"Ada Lovelace"}"#, 2))
        .await
        .unwrap();
    let current = store
        .enqueue(raw::<Person>(r#"{"first":"Alan","last":"Turing"}"#, 3))
        .await
        .unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    reaches(&store, old, JobState::Completed).await;
    reaches(&store, current, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(seen.runs_of(old), ["Ada/Lovelace"]);
    assert_eq!(seen.runs_of(current), ["Alan/Turing"]);
}

/// An older payload version the job cannot upgrade is discarded at once as `poison`.
pub async fn a_payload_version_that_does_not_upgrade_is_discarded_as_poison<S: Store>(store: S) {
    let id = store
        .enqueue(raw::<Person>(r#"{"name":"Ada Lovelace"}"#, 1))
        .await
        .unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    let row = reaches(&store, id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(seen.runs_of(id), Vec::<String>::new(), "the handler ran");
    assert_eq!(row.attempt, 1);
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    assert_eq!(row.errors[0].class, "poison");
    assert!(
        row.errors[0].message.contains("no longer supported"),
        "{}",
        row.errors[0].message
    );
}

/// A job that snoozes forever is discarded with class `snooze_limit` once it has snoozed
/// [`DEFAULT_MAX_SNOOZES`](job_core::DEFAULT_MAX_SNOOZES) times: the store's snooze count
/// reaches the runtime's limit, and the attempt was never counted.
pub async fn a_job_that_snoozes_forever_is_discarded_at_the_snooze_limit<S: Store>(store: S) {
    let id = store.enqueue(raw::<Sleepy>("{}", 1)).await.unwrap();
    let seen = Seen::default();
    let worker = worker(store.clone(), &seen).build().unwrap().start();
    let row = reaches(&store, id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 1, "snoozes do not count attempts");
    let last = row.errors.last().expect("a snooze_limit entry");
    assert_eq!(last.class, "snooze_limit");
    assert!(
        last.message
            .contains(&format!("snoozed {} times", job_core::DEFAULT_MAX_SNOOZES)),
        "{}",
        last.message
    );
}

/// A rate-limited kind whose window is full is claimed again once the window has room, not at
/// the next poll. The poll interval is an hour and no enqueue or release wakes the worker after
/// its first claim, so only the window can: six jobs at two starts per 200 ms all run.
pub async fn a_kind_at_its_rate_limit_is_claimed_again_when_its_window_has_room<S: Store>(
    store: S,
) {
    if !store.supports_flow_control() {
        return;
    }
    let ids = store
        .enqueue_many((0..6).map(|_| raw::<Rated>("{}", 1)).collect())
        .await
        .unwrap();
    let worker = Worker::builder(store.clone())
        .id("conformance-rated")
        .poll_interval(Duration::from_secs(3600))
        .register::<Rated>()
        .queue("default", 4)
        .build()
        .unwrap()
        .start();
    for id in ids {
        reaches(&store, id, JobState::Completed).await;
    }
    worker.shutdown().await;
}
