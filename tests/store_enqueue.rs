//! Enqueueing: through the store, through any executor, in bulk, and from SQL.

mod store_support;

use std::time::Duration;

use job_core::{EnqueueError, Job, JobContext, JobError, JobState, NewJob, RunAt, Store};
use job_postgres::{Enqueue, EnqueueMany};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::Connection;
use store_support::{claim_one, db_now, new_job, request};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SendMail {
    to: String,
}

impl Job for SendMail {
    const KIND: &'static str = "mail.send";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn mail() -> SendMail {
    SendMail {
        to: "a@example.com".into(),
    }
}

async fn count(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn enqueue_then_claim_returns_it_running_with_attempt_one_and_a_token() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(new_job("noop")).await.unwrap();
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);

    let claimed = claim_one(&store, "noop").await;
    assert_eq!(claimed.lease.id, id);
    assert_eq!(claimed.attempt, 1);
    assert_eq!(claimed.payload, r#"{"n": 1}"#);
    assert_eq!(claimed.payload_version, 1);
    assert_eq!(claimed.max_attempts, 25);

    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Running);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.lock_token, Some(claimed.lease.token));
    assert_eq!(row.locked_by.as_deref(), Some("worker-1"));
    let now = db_now(&db.pool()).await;
    let until = row.locked_until.unwrap();
    assert!(
        until > now + chrono::Duration::seconds(25),
        "lease ends at {until}, now {now}"
    );
    db.close().await;
}

#[tokio::test]
async fn a_scheduled_job_is_not_claimed() {
    let db = TestDb::new().await;
    let store = db.store();
    let later = NewJob {
        run_at: RunAt::In(Duration::from_secs(3600)),
        ..new_job("noop")
    };
    let id = store.enqueue(later).await.unwrap();
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Scheduled);
    assert!(row.run_at > db_now(&db.pool()).await + chrono::Duration::minutes(59));
    assert_eq!(store.claim(&request(&["noop"], 10)).await.unwrap(), vec![]);
    db.close().await;
}

#[tokio::test]
async fn a_job_at_a_past_instant_is_available_at_once() {
    let db = TestDb::new().await;
    let store = db.store();
    let past = NewJob {
        run_at: RunAt::At(chrono::Utc::now() - chrono::Duration::hours(1)),
        ..new_job("noop")
    };
    let id = store.enqueue(past).await.unwrap();
    assert_eq!(
        store.get(id).await.unwrap().unwrap().state,
        JobState::Available
    );
    assert_eq!(claim_one(&store, "noop").await.lease.id, id);
    db.close().await;
}

#[tokio::test]
async fn enqueue_many_keeps_input_order() {
    let db = TestDb::new().await;
    let store = db.store();
    let jobs: Vec<NewJob> = (0..1000)
        .map(|i| NewJob {
            payload: format!(r#"{{"i":{i}}}"#),
            queue: if i % 2 == 0 { "even" } else { "odd" }.to_owned(),
            run_at: if i % 3 == 0 {
                RunAt::In(Duration::from_secs(60))
            } else {
                RunAt::Now
            },
            ..new_job("noop")
        })
        .collect();
    let ids = store.enqueue_many(jobs).await.unwrap();
    assert_eq!(ids.len(), 1000);
    for (i, id) in ids.iter().enumerate() {
        let row = store.get(*id).await.unwrap().unwrap();
        assert_eq!(row.payload, serde_json::json!({ "i": i }));
        let expected = if i % 3 == 0 {
            JobState::Scheduled
        } else {
            JobState::Available
        };
        assert_eq!(row.state, expected, "job {i}");
    }
    assert_eq!(
        store.enqueue_many(Vec::new()).await.unwrap(),
        Vec::<i64>::new()
    );
    db.close().await;
}

#[tokio::test]
async fn enqueue_many_refuses_the_whole_batch_when_one_job_is_bad() {
    let db = TestDb::new().await;
    let store = db.store();
    let jobs = vec![
        new_job("noop"),
        NewJob {
            priority: -1,
            ..new_job("noop")
        },
    ];
    let err = store.enqueue_many(jobs).await.unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    assert_eq!(count(&db.pool()).await, 0);
    db.close().await;
}

#[tokio::test]
async fn the_store_refuses_payloads_over_its_limit() {
    let db = TestDb::new().await;
    let store = db.store().with_payload_limit(4);
    let err = store.enqueue(new_job("noop")).await.unwrap_err();
    let inner = err.inner().downcast_ref::<EnqueueError>();
    assert!(
        matches!(inner, Some(EnqueueError::PayloadTooLarge { limit: 4, .. })),
        "{err}"
    );
    assert_eq!(count(&db.pool()).await, 0);
    db.close().await;
}

#[tokio::test]
async fn an_enqueue_inside_a_transaction_that_rolls_back_leaves_no_row() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let mut tx = pool.begin().await.unwrap();
    let id = Enqueue::new(mail()).enqueue(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.store().get(id).await.unwrap(), None);
    assert_eq!(count(&pool).await, 0);
    db.close().await;
}

#[tokio::test]
async fn an_enqueue_inside_a_transaction_that_commits_persists() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let mut tx = pool.begin().await.unwrap();
    let id = Enqueue::new(mail()).enqueue(&mut *tx).await.unwrap();
    // Not visible to others before the commit.
    assert_eq!(db.store().get(id).await.unwrap(), None);
    tx.commit().await.unwrap();
    let row = db.store().get(id).await.unwrap().unwrap();
    assert_eq!(row.kind, "mail.send");
    assert_eq!(row.payload, serde_json::json!({ "to": "a@example.com" }));
    db.close().await;
}

#[tokio::test]
async fn the_builder_takes_a_pool_a_transaction_or_a_connection() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let a = Enqueue::new(mail()).enqueue(&pool).await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let b = Enqueue::new(mail()).enqueue(&mut *conn).await.unwrap();
    let c = job_postgres::enqueue(&mut *conn, &new_job("noop"))
        .await
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    let d = Enqueue::new(mail()).enqueue(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let mut plain = sqlx::PgConnection::connect_with(&db.connect_options())
        .await
        .unwrap();
    let e = Enqueue::new(mail()).enqueue(&mut plain).await.unwrap();
    plain.close().await.unwrap();
    drop(conn);
    let mut ids = vec![a, b, c, d, e];
    ids.dedup();
    assert_eq!(ids.len(), 5);
    assert_eq!(count(&pool).await, 5);
    db.close().await;
}

#[tokio::test]
async fn a_transactional_enqueue_can_run_on_a_spawned_task() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let task = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let id = Enqueue::new(mail()).enqueue(&mut *tx).await.unwrap();
        let ids = Enqueue::many(&mut *tx, vec![mail()]).await.unwrap();
        job_postgres::enqueue_many(&mut *tx, &[new_job("noop")])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        (id, ids)
    });
    let (id, _) = task.await.unwrap();
    assert!(db.store().get(id).await.unwrap().is_some());
    assert_eq!(count(&db.pool()).await, 3);
    db.close().await;
}

#[tokio::test]
async fn the_builder_applies_its_options() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = Enqueue::new(mail())
        .queue("mail")
        .priority(3)
        .max_attempts(2)
        .schedule_in(Duration::from_secs(600))
        .enqueue(store.pool())
        .await
        .unwrap();
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (
            row.queue.as_str(),
            row.priority,
            row.max_attempts,
            row.state
        ),
        ("mail", 3, 2, JobState::Scheduled)
    );
    let at = chrono::Utc::now() + chrono::Duration::days(1);
    let id = Enqueue::new(mail())
        .run_at(at)
        .enqueue(store.pool())
        .await
        .unwrap();
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.run_at.timestamp_micros(), at.timestamp_micros());
    db.close().await;
}

#[tokio::test]
async fn the_builder_rejects_bad_options_by_name_and_writes_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let option = |result: Result<i64, EnqueueError>| match result {
        Err(EnqueueError::InvalidOption { option, .. }) => option,
        other => panic!("expected an invalid option, got {other:?}"),
    };
    assert_eq!(
        option(Enqueue::new(mail()).queue("").enqueue(&pool).await),
        "queue"
    );
    assert_eq!(
        option(Enqueue::new(mail()).priority(-2).enqueue(&pool).await),
        "priority"
    );
    assert_eq!(
        option(Enqueue::new(mail()).max_attempts(0).enqueue(&pool).await),
        "max_attempts"
    );
    let too_big = Enqueue::new(mail()).payload_limit(3).enqueue(&pool).await;
    assert!(matches!(too_big, Err(EnqueueError::PayloadTooLarge { .. })));
    assert_eq!(count(&pool).await, 0);
    db.close().await;
}

#[tokio::test]
async fn the_bulk_builder_enqueues_many_jobs_of_one_kind_in_order() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let jobs = (0..50).map(|i| SendMail {
        to: format!("{i}@example.com"),
    });
    let ids = Enqueue::many(&pool, jobs).await.unwrap();
    assert_eq!(ids.len(), 50);
    let last = db.store().get(ids[49]).await.unwrap().unwrap();
    assert_eq!(last.payload, serde_json::json!({ "to": "49@example.com" }));

    let options = job_core::EnqueueOptions {
        queue: Some("bulk".into()),
        ..Default::default()
    };
    let mut tx = pool.begin().await.unwrap();
    let ids = EnqueueMany::new()
        .options(options)
        .enqueue(&mut *tx, vec![mail(), mail()])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.store().get(ids[0]).await.unwrap(), None);
    assert_eq!(count(&pool).await, 50);
    db.close().await;
}

#[tokio::test]
async fn the_sql_function_enqueues_a_claimable_job() {
    let db = TestDb::new().await;
    let store = db.store();
    let id: i64 = sqlx::query_scalar(
        "SELECT job.enqueue('noop', '{\"n\": 1}', priority => 2, max_attempts => 3)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.priority, row.max_attempts), (2, 3));
    assert_eq!(row.state, JobState::Available);
    let claimed = claim_one(&store, "noop").await;
    assert_eq!(claimed.lease.id, id);

    let later: i64 =
        sqlx::query_scalar("SELECT job.enqueue('noop', '{}', run_at => now() + interval '1 hour')")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        store.get(later).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    db.close().await;
}

#[tokio::test]
async fn the_sql_function_rejects_a_bad_argument_by_name() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let cases = [
        ("SELECT job.enqueue('', '{}')", "`kind`"),
        ("SELECT job.enqueue('has space', '{}')", "`kind`"),
        ("SELECT job.enqueue('noop', '{}', queue => '')", "`queue`"),
        ("SELECT job.enqueue('noop', NULL)", "`payload`"),
        (
            "SELECT job.enqueue('noop', '{}', priority => -1)",
            "`priority`",
        ),
        (
            "SELECT job.enqueue('noop', '{}', max_attempts => 0)",
            "`max_attempts`",
        ),
        (
            "SELECT job.enqueue('noop', '{}', payload_version => 0)",
            "`payload_version`",
        ),
        (
            "SELECT job.enqueue('noop', '{}', run_at => NULL)",
            "`run_at`",
        ),
    ];
    for (statement, argument) in cases {
        let err = sqlx::query(statement).execute(&pool).await.unwrap_err();
        let db_err = err.as_database_error().expect("a database error");
        assert_eq!(
            db_err.code().as_deref(),
            Some("22023"),
            "{statement}: {db_err}"
        );
        assert!(
            db_err.message().contains(argument),
            "{statement}: expected the message to name {argument}, got {:?}",
            db_err.message()
        );
    }
    assert_eq!(count(&pool).await, 0);
    db.close().await;
}
