//! Claiming: order, kinds, versions, queues, limits and concurrency.

mod store_support;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use job_core::{ClaimKind, ClaimRequest, JobState, NewJob, RunAt, Store};
use job_testkit::TestDb;
use store_support::{claim_one, kind, new_job, request};

#[tokio::test]
async fn claim_order_is_priority_then_run_at_then_id() {
    let db = TestDb::new().await;
    let store = db.store();
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    let at = |minutes: i64| RunAt::At(hour_ago + chrono::Duration::minutes(minutes));
    // (label, priority, run_at), enqueued out of order.
    let specs = [
        ("p1-late", 1, at(30)),
        ("p0-late", 0, at(20)),
        ("p1-early", 1, at(10)),
        ("p0-early-a", 0, at(5)),
        ("p0-early-b", 0, at(5)),
        ("p2", 2, at(0)),
    ];
    let mut ids = Vec::new();
    for (label, priority, run_at) in specs {
        let job = NewJob {
            priority,
            run_at,
            payload: format!(r#"{{"label":"{label}"}}"#),
            ..new_job("noop")
        };
        ids.push((label, store.enqueue(job).await.unwrap()));
    }
    let id_of = |label: &str| ids.iter().find(|(l, _)| *l == label).unwrap().1;
    let expected: Vec<i64> = [
        "p0-early-a",
        "p0-early-b",
        "p0-late",
        "p1-early",
        "p1-late",
        "p2",
    ]
    .into_iter()
    .map(id_of)
    .collect();

    // One batch comes back in claim order...
    let claimed = store.claim(&request(&["noop"], 4)).await.unwrap();
    let got: Vec<i64> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(got, expected[..4]);
    // ...and the next batch continues where it stopped.
    let claimed = store.claim(&request(&["noop"], 4)).await.unwrap();
    let got: Vec<i64> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(got, expected[4..]);
    db.close().await;
}

#[tokio::test]
async fn claim_takes_at_most_the_limit_and_only_from_its_queue() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut jobs: Vec<NewJob> = (0..5).map(|_| new_job("noop")).collect();
    jobs.push(NewJob {
        queue: "other".into(),
        ..new_job("noop")
    });
    let ids = store.enqueue_many(jobs).await.unwrap();
    assert_eq!(store.claim(&request(&["noop"], 3)).await.unwrap().len(), 3);
    assert_eq!(store.claim(&request(&["noop"], 3)).await.unwrap().len(), 2);
    assert_eq!(store.claim(&request(&["noop"], 3)).await.unwrap().len(), 0);
    let other = store.get(ids[5]).await.unwrap().unwrap();
    assert_eq!(other.state, JobState::Available);
    assert_eq!(store.claim(&request(&["noop"], 0)).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test]
async fn unknown_kinds_are_never_claimed_and_stay_untouched() {
    let db = TestDb::new().await;
    let store = db.store();
    let unknown = store.enqueue(new_job("unknown")).await.unwrap();
    let known = store.enqueue(new_job("known")).await.unwrap();
    let before = store.get(unknown).await.unwrap().unwrap();

    let claimed = store.claim(&request(&["known"], 10)).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(),
        vec![known]
    );
    assert_eq!(store.claim(&request(&["known"], 10)).await.unwrap(), vec![]);
    assert_eq!(store.claim(&request(&[], 10)).await.unwrap(), vec![]);
    assert_eq!(store.get(unknown).await.unwrap().unwrap(), before);
    db.close().await;
}

#[tokio::test]
async fn a_row_with_a_payload_version_above_the_workers_max_is_never_claimed() {
    let db = TestDb::new().await;
    let store = db.store();
    let v1 = store.enqueue(new_job("evolving")).await.unwrap();
    let v2 = store
        .enqueue(NewJob {
            payload_version: 2,
            ..new_job("evolving")
        })
        .await
        .unwrap();
    let v3 = store
        .enqueue(NewJob {
            payload_version: 3,
            ..new_job("evolving")
        })
        .await
        .unwrap();
    let before = store.get(v3).await.unwrap().unwrap();
    let old_worker = ClaimRequest {
        kinds: vec![ClaimKind {
            max_version: 2,
            ..kind("evolving")
        }],
        ..request(&[], 10)
    };
    let claimed: Vec<(i64, i32)> = store
        .claim(&old_worker)
        .await
        .unwrap()
        .iter()
        .map(|c| (c.lease.id, c.payload_version))
        .collect();
    assert_eq!(claimed, vec![(v1, 1), (v2, 2)]);
    assert_eq!(store.claim(&old_worker).await.unwrap(), vec![]);
    assert_eq!(store.get(v3).await.unwrap().unwrap(), before);
    db.close().await;
}

#[tokio::test]
async fn each_kind_is_claimed_with_its_own_lease_and_max_version() {
    let db = TestDb::new().await;
    let store = db.store();
    let short = store.enqueue(new_job("short")).await.unwrap();
    let long = store
        .enqueue(NewJob {
            payload_version: 5,
            ..new_job("long")
        })
        .await
        .unwrap();
    let both = ClaimRequest {
        kinds: vec![
            ClaimKind {
                lease: Duration::from_secs(10),
                ..kind("short")
            },
            ClaimKind {
                kind: "long".into(),
                max_version: 5,
                lease: Duration::from_secs(3600),
            },
        ],
        ..request(&[], 10)
    };
    assert_eq!(store.claim(&both).await.unwrap().len(), 2);
    let short = store
        .get(short)
        .await
        .unwrap()
        .unwrap()
        .locked_until
        .unwrap();
    let long = store
        .get(long)
        .await
        .unwrap()
        .unwrap()
        .locked_until
        .unwrap();
    let gap = long - short;
    assert!(
        gap > chrono::Duration::minutes(59) && gap < chrono::Duration::minutes(61),
        "leases differ by {gap}"
    );
    db.close().await;
}

#[tokio::test]
async fn a_claimed_job_is_not_claimed_again() {
    let db = TestDb::new().await;
    let store = db.store();
    store.enqueue(new_job("noop")).await.unwrap();
    claim_one(&store, "noop").await;
    assert_eq!(store.claim(&request(&["noop"], 10)).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_by_8_concurrent_tasks_never_hand_one_job_to_two_claimers() {
    let db = TestDb::new().await;
    let store = db.store();
    let jobs: Vec<NewJob> = (0..500).map(|_| new_job("noop")).collect();
    let enqueued: HashSet<i64> = store
        .enqueue_many(jobs)
        .await
        .unwrap()
        .into_iter()
        .collect();

    // Open the connections up front and start the claimers together, so they contend.
    let mut warm = Vec::new();
    for _ in 0..8 {
        warm.push(store.pool().acquire().await.unwrap());
    }
    drop(warm);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let claimers: Vec<_> = (0..8)
        .map(|n| {
            let store = store.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let request = job_core::ClaimRequest {
                    worker_id: format!("worker-{n}"),
                    ..request(&["noop"], 7)
                };
                let mut mine = Vec::new();
                loop {
                    let batch = store.claim(&request).await.unwrap();
                    if batch.is_empty() {
                        return mine;
                    }
                    mine.extend(batch.into_iter().map(|c| (c.lease.id, c.attempt)));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for claimer in claimers {
        let mine = claimer.await.unwrap();
        for (id, attempt) in mine {
            assert_eq!(attempt, 1, "job {id} was claimed more than once");
            assert!(seen.insert(id), "job {id} was handed to two claimers");
        }
    }
    assert_eq!(seen, enqueued);
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job.jobs WHERE state = 'running' AND attempt = 1")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(running, 500);
    db.close().await;
}
