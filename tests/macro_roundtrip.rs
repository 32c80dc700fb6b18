//! `#[job]` jobs against PostgreSQL: the generated helpers enqueue inside the caller's
//! transaction, and a worker runs, upgrades or leaves alone what was stored.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use job::{job, Job, JobContext, JobError, JobId, JobRow, JobState, PgStore, Store, Worker};
use job_testkit::TestDb;
use serde_json::{json, Value};

/// What the jobs did, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Greets someone a few times.
#[job(queue = "roundtrip", retry = 2, backoff(base = "10ms", cap = "50ms"))]
async fn greet(ctx: JobContext, name: String, times: u32) -> Result<(), JobError> {
    ctx.state::<Seen>()?.push(format!("greet {name} x{times}"));
    Ok(())
}

/// Version 2 of a welcome: version 1 called `name` `who`, and had no `polite`.
#[job(
    kind = "roundtrip.welcome",
    version = 2,
    upgrade = upgrade_welcome,
    queue = "roundtrip",
)]
async fn welcome(ctx: JobContext, name: String, polite: bool) -> Result<(), JobError> {
    ctx.state::<Seen>()?
        .push(format!("welcome {name} polite={polite}"));
    Ok(())
}

fn upgrade_welcome(from_version: i32, mut payload: Value) -> Result<Value, JobError> {
    match from_version {
        1 => Ok(json!({ "name": payload["who"].take(), "polite": true })),
        v => Err(JobError::terminal(format!("no upgrade from version {v}"))),
    }
}

/// Fails every attempt with an I/O error: `retry = 1` is two attempts, then the dead letter.
#[job(queue = "roundtrip", retry = 1, backoff(base = "10ms", cap = "20ms"))]
async fn always_fails(ctx: JobContext) -> std::io::Result<()> {
    if let Ok(seen) = ctx.state::<Seen>() {
        seen.push(format!("always_fails attempt {}", ctx.attempt()));
    }
    Err(std::io::Error::other("the printer is on fire"))
}

/// What a charge returns: stored as its job's result.
#[derive(Debug, serde::Serialize)]
struct Receipt {
    charge_id: String,
    cents: i64,
}

/// Charges a card and returns the receipt; `cents` of -1 returns more than a result may hold.
#[job(queue = "roundtrip", retry = 3, backoff(base = "10ms", cap = "20ms"))]
async fn charge(_ctx: JobContext, cents: i64) -> Result<Receipt, JobError> {
    Ok(Receipt {
        charge_id: if cents < 0 {
            "x".repeat(job::MAX_RESULT)
        } else {
            format!("ch_{cents}")
        },
        cents,
    })
}

fn worker(db: &TestDb, seen: &Seen) -> Worker<PgStore> {
    Worker::builder(db.store())
        .register::<Charge>()
        .register::<Greet>()
        .register::<Welcome>()
        .register::<AlwaysFails>()
        .queue("roundtrip", 4)
        .poll_interval(Duration::from_millis(20))
        .state(seen.clone())
        .build()
        .expect("a valid worker")
}

async fn row(store: &PgStore, id: JobId) -> Option<JobRow> {
    store.get(id).await.expect("get")
}

/// Polls every 10 ms until `check` gives `Some`; fails with `what` after 30 s.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after 30s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn reaches(store: &PgStore, id: JobId, state: JobState) -> JobRow {
    eventually(&format!("job {id} to be {state}"), || async {
        row(store, id).await.filter(|r| r.state == state)
    })
    .await
}

/// Stores a job by hand, the way another program or an older release would.
async fn enqueue_sql(db: &TestDb, kind: &str, payload: Value, version: i32) -> JobId {
    sqlx::query_scalar("SELECT job.enqueue($1, $2, queue => 'roundtrip', payload_version => $3)")
        .bind(kind)
        .bind(payload)
        .bind(version)
        .fetch_one(&db.pool())
        .await
        .expect("job.enqueue")
}

#[tokio::test]
async fn a_job_enqueued_through_its_payload_runs_when_the_transaction_commits() {
    let db = TestDb::new().await;
    let store = db.store();
    let seen = Seen::default();
    let running = worker(&db, &seen).start();

    let mut tx = db.pool().begin().await.unwrap();
    let id = Greet {
        name: "ada".into(),
        times: 2,
    }
    .enqueue(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let done = reaches(&store, id, JobState::Completed).await;
    running.shutdown().await;
    assert_eq!(done.kind, "greet");
    assert_eq!(done.queue, "roundtrip");
    assert_eq!(done.max_attempts, 3, "retry = 2 is three attempts");
    assert_eq!(done.payload, json!({ "name": "ada", "times": 2 }));
    assert_eq!(done.payload_version, 1);
    assert_eq!(seen.all(), ["greet ada x2"]);
    db.close().await;
}

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_never_runs() {
    let db = TestDb::new().await;
    let store = db.store();
    let seen = Seen::default();

    let mut tx = db.pool().begin().await.unwrap();
    let ghost = Greet {
        name: "ghost".into(),
        times: 1,
    }
    .enqueue(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let witness = Greet {
        name: "witness".into(),
        times: 1,
    }
    .enqueue(&db.pool())
    .await
    .unwrap();

    let running = worker(&db, &seen).start();
    reaches(&store, witness, JobState::Completed).await;
    running.shutdown().await;
    assert!(
        row(&store, ghost).await.is_none(),
        "the rolled-back job was never stored"
    );
    assert_eq!(seen.all(), ["greet witness x1"]);
    db.close().await;
}

#[tokio::test]
async fn the_generated_helpers_override_the_kinds_defaults() {
    let db = TestDb::new().await;
    let store = db.store();
    let greet = || Greet {
        name: "grace".into(),
        times: 1,
    };

    let later = greet()
        .schedule_in(Duration::from_secs(3600))
        .queue("elsewhere")
        .priority(5)
        .max_attempts(9)
        .enqueue(&db.pool())
        .await
        .unwrap();
    let at = Utc::now() + chrono::Duration::days(1);
    let dated = greet().run_at(at).enqueue(&db.pool()).await.unwrap();
    let plain = greet().priority(1).enqueue(&db.pool()).await.unwrap();

    let later = row(&store, later).await.unwrap();
    assert_eq!(later.state, JobState::Scheduled);
    assert_eq!(
        (later.queue.as_str(), later.priority, later.max_attempts),
        ("elsewhere", 5, 9)
    );
    assert!(later.run_at > Utc::now() + chrono::Duration::minutes(59));
    let dated = row(&store, dated).await.unwrap();
    assert_eq!(dated.state, JobState::Scheduled);
    assert_eq!(dated.run_at.timestamp_millis(), at.timestamp_millis());
    let plain = row(&store, plain).await.unwrap();
    assert_eq!(plain.state, JobState::Available);
    assert_eq!(
        (plain.queue.as_str(), plain.priority, plain.max_attempts),
        ("roundtrip", 1, 3)
    );
    db.close().await;
}

#[tokio::test]
async fn an_older_payload_is_upgraded_and_a_newer_one_is_left_alone() {
    let db = TestDb::new().await;
    let store = db.store();
    let seen = Seen::default();
    assert_eq!(Welcome::VERSION, 2);

    // The newer row first: were it claimable, the claim order would take it first.
    let newer = enqueue_sql(&db, Welcome::KIND, json!({ "name": "x", "shout": true }), 3).await;
    let older = enqueue_sql(&db, Welcome::KIND, json!({ "who": "grace" }), 1).await;
    let current = Welcome {
        name: "ada".into(),
        polite: false,
    }
    .enqueue(&db.pool())
    .await
    .unwrap();

    let running = worker(&db, &seen).start();
    reaches(&store, older, JobState::Completed).await;
    reaches(&store, current, JobState::Completed).await;
    // A few more polls, in which the newer row could be claimed were it claimable.
    tokio::time::sleep(Duration::from_millis(200)).await;
    running.shutdown().await;

    let mut ran = seen.all();
    ran.sort();
    assert_eq!(
        ran,
        ["welcome ada polite=false", "welcome grace polite=true"]
    );
    let newer = row(&store, newer).await.unwrap();
    assert_eq!(
        newer.state,
        JobState::Available,
        "a version-3 row waits for a newer worker"
    );
    assert_eq!((newer.attempt, newer.payload_version), (0, 3));
    assert!(newer.errors.is_empty());
    assert_eq!(newer.payload, json!({ "name": "x", "shout": true }));
    db.close().await;
}

#[tokio::test]
async fn retry_counts_the_attempts_after_the_first() {
    let db = TestDb::new().await;
    let store = db.store();
    let seen = Seen::default();
    let running = worker(&db, &seen).start();

    let id = AlwaysFails {}.enqueue(&db.pool()).await.unwrap();
    let dead = reaches(&store, id, JobState::Discarded).await;
    running.shutdown().await;
    assert_eq!((dead.attempt, dead.max_attempts), (2, 2));
    assert_eq!(dead.errors.len(), 2);
    assert!(
        dead.errors[0].message.contains("the printer is on fire"),
        "{:?}",
        dead.errors
    );
    assert_eq!(
        seen.all(),
        ["always_fails attempt 1", "always_fails attempt 2"]
    );
    db.close().await;
}

#[tokio::test]
async fn what_a_job_function_returns_is_stored_as_its_result() {
    let db = TestDb::new().await;
    let store = db.store();
    let running = worker(&db, &Seen::default()).start();

    let paid = Charge { cents: 1250 }.enqueue(&db.pool()).await.unwrap();
    let unit = Greet {
        name: "ada".into(),
        times: 1,
    }
    .enqueue(&db.pool())
    .await
    .unwrap();
    // Over MAX_RESULT: refused when set, so the job is a dead letter saying why, at once
    // (a terminal error: its effects happened, a retry would repeat them).
    let huge = Charge { cents: -1 }.enqueue(&db.pool()).await.unwrap();

    let done = reaches(&store, paid, JobState::Completed).await;
    assert_eq!(
        done.result,
        Some(json!({ "charge_id": "ch_1250", "cents": 1250 }))
    );
    assert_eq!(
        reaches(&store, unit, JobState::Completed).await.result,
        None
    );
    let dead = reaches(&store, huge, JobState::Discarded).await;
    running.shutdown().await;
    assert_eq!(dead.attempt, 1, "not retried");
    assert_eq!(dead.result, None);
    assert_eq!(dead.errors[0].class, "terminal");
    assert!(
        dead.errors[0].message.starts_with("result: 65")
            && dead.errors[0].message.contains("over the limit of 65536"),
        "{:?}",
        dead.errors
    );
    db.close().await;
}
