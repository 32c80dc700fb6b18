//! The SQLite backend's doors, probed as a careless application and as an attacker with the
//! file would: every rule of the README's "The rules of every door" holds through the Rust API
//! and through raw writes to the file (triggers), and what the store reads back or claims never
//! fails on a row a raw write could make.

use std::time::Duration;

use job::{
    ClaimKind, ClaimRequest, ClaimedJob, EnqueueError, ErrorClass, Failure, Finalize, Finalized,
    NewJob, Outcome, SqliteStore, Store, DEFAULT_PAYLOAD_LIMIT,
};
use job_testkit::TestSqlite;

/// A claim of up to 10 jobs of `kind` on `queue`.
fn request(kind: &str, queue: &str) -> ClaimRequest {
    ClaimRequest {
        queue: queue.into(),
        kinds: vec![ClaimKind {
            kind: kind.into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 10,
        worker_id: "probe-worker".into(),
    }
}

/// A JSON object of exactly `len` bytes.
fn payload_of(len: usize) -> String {
    format!("{{\"x\":\"{}\"}}", "a".repeat(len - 8))
}

/// Runs `sql` on the store's pool, as an application (or an attacker) with the file would.
async fn raw(store: &SqliteStore, sql: &str) -> Result<u64, sqlx::Error> {
    sqlx::query(sql)
        .execute(store.pool())
        .await
        .map(|r| r.rows_affected())
}

async fn claim(store: &SqliteStore, kind: &str, queue: &str) -> Vec<ClaimedJob> {
    store.claim(&request(kind, queue)).await.unwrap()
}

fn discard(job: &ClaimedJob, message: &str) -> Finalize {
    Finalize {
        lease: job.lease,
        outcome: Outcome::Discard {
            failure: Failure {
                attempt: job.attempt,
                class: ErrorClass::Terminal,
                message: message.into(),
            },
        },
        result: None,
    }
}

#[tokio::test]
async fn sqliteprobe_a_payload_over_the_limit_is_refused_at_every_door() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let over = payload_of(DEFAULT_PAYLOAD_LIMIT + 1);

    let err = store
        .enqueue(NewJob::new("k", over.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::PayloadTooLarge { size, limit, .. }
                if size == DEFAULT_PAYLOAD_LIMIT + 1 && limit == DEFAULT_PAYLOAD_LIMIT
        ),
        "the store's enqueue: {err:?}"
    );
    let mut conn = store.pool().acquire().await.unwrap();
    let err = job::sqlite::enqueue(&mut conn, &NewJob::new("k", over.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnqueueError::PayloadTooLarge { limit, .. } if limit == DEFAULT_PAYLOAD_LIMIT),
        "an enqueue through a connection: {err:?}"
    );
    drop(conn);
    let at_limit = store
        .enqueue(NewJob::new("k", payload_of(DEFAULT_PAYLOAD_LIMIT)))
        .await
        .expect("a payload at the limit is stored");

    let err = raw(
        &store,
        &format!(
            "INSERT INTO job_jobs (kind, queue, payload, run_at, state, created_at) \
             VALUES ('k', 'q', '{over}', 0, 'available', 0)"
        ),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("`payload`"), "a raw insert: {err}");
    let err = raw(
        &store,
        &format!("UPDATE job_jobs SET payload = '{over}' WHERE id = {at_limit}"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("`payload`"), "a raw update: {err}");

    raw(
        &store,
        &format!(
            "UPDATE job_settings SET payload_limit = {}",
            2 * DEFAULT_PAYLOAD_LIMIT
        ),
    )
    .await
    .unwrap();
    store
        .enqueue(NewJob::new("k", over))
        .await
        .expect("under a raised limit");
    db.close().await;
}

#[tokio::test]
async fn sqliteprobe_a_compensating_job_omits_a_payload_whose_wrapping_is_over_the_limit() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let undo = job::Compensate {
        kind: "probe.undo",
        queue: "undo",
    };
    store
        .register_kinds(&[("k".to_owned(), Some(undo))])
        .await
        .unwrap();
    // Fits alone; not with its id, kind and an error of 1,000 bytes around it.
    let id = store
        .enqueue(NewJob::new("k", payload_of(DEFAULT_PAYLOAD_LIMIT - 100)))
        .await
        .unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    let message = "m".repeat(1000);
    assert_eq!(
        store.finalize(&[discard(&job, &message)]).await.unwrap(),
        vec![Finalized::Applied]
    );
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 1, "one compensating job");
    let payload = &compensating[0].payload;
    assert!(
        payload.len() <= DEFAULT_PAYLOAD_LIMIT,
        "the compensating payload is {} bytes, over the limit of {DEFAULT_PAYLOAD_LIMIT}",
        payload.len()
    );
    let payload: serde_json::Value = serde_json::from_str(payload).unwrap();
    let discarded = &payload["discarded"];
    assert_eq!(discarded["job_id"], id);
    assert_eq!(discarded["payload_omitted"], true);
    assert_eq!(discarded["payload"], serde_json::Value::Null);
    assert_eq!(discarded["error"]["message"], message.as_str());

    // A small payload still travels with its compensation.
    store.enqueue(NewJob::new("k", "{\"n\":1}")).await.unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    store.finalize(&[discard(&job, "no")]).await.unwrap();
    let compensating = claim(&store, "probe.undo", "undo").await;
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["payload"], serde_json::json!({"n": 1}));
    assert_eq!(payload["discarded"]["payload_omitted"], false);
    db.close().await;
}
