//! Enqueueing, PostgreSQL specifics: the store's payload limit, any sqlx executor (inside the
//! caller's transaction), the typed builders, and the `job.enqueue` SQL function. The
//! enqueue contract is in `job_testkit::conformance::enqueue`.

mod store_support;

use std::time::Duration;

use job::{Enqueue, EnqueueMany};
use job_core::{EnqueueError, Job, JobContext, JobError, JobState, Store};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::Connection;
use store_support::{claim_one, new_job};

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
async fn the_store_refuses_payloads_over_its_limit() {
    let db = TestDb::new().await;
    let store = db.store().with_payload_limit(4);
    let err = store.enqueue(new_job("noop")).await.unwrap_err();
    assert!(
        matches!(err, EnqueueError::PayloadTooLarge { limit: 4, .. }),
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
        (
            "SELECT job.enqueue('noop', '{}', ordering_key => '')",
            "`ordering_key`",
        ),
        (
            "SELECT job.enqueue('noop', '{}', rate_key => repeat('k', 513))",
            "`rate_key`",
        ),
        (
            "SELECT job.enqueue('noop', '{}', unique_key => 'u', ordering_key => repeat('k', 513))",
            "`ordering_key`",
        ),
        (
            "SELECT * FROM job.enqueue_many('[{\"kind\": \"noop\", \"payload\": {}, \"rate_key\": \"\"}]')",
            "`jobs[0].rate_key`",
        ),
        (
            "SELECT * FROM job.enqueue_many('[{\"kind\": \"noop\", \"payload\": {}, \"ordering_key\": 7}]')",
            "`jobs[0].ordering_key`",
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

/// The SQL functions give a job its ordering and rate keys as the Rust builder does: the second
/// job of a key waits (pending) behind the first, with a unique key too, and a duplicate's keys
/// change nothing.
#[tokio::test]
async fn the_sql_functions_take_ordering_and_rate_keys() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let one = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let head =
        one("SELECT job.enqueue('noop', '{}', ordering_key => 'acct:1', rate_key => 't:1')").await;
    let behind = one(
        "SELECT job.enqueue('noop', '{}', unique_key => 'u:1', ordering_key => 'acct:1', \
         rate_key => 't:2')",
    )
    .await;
    let duplicate = one(
        "SELECT job.enqueue('noop', '{}', unique_key => 'u:1', on_duplicate => 'existing', \
         ordering_key => 'acct:9', rate_key => 't:9')",
    )
    .await;
    assert_eq!(duplicate, behind);
    let many: Vec<i64> = sqlx::query_scalar(
        "SELECT * FROM job.enqueue_many('[{\"kind\": \"noop\", \"payload\": {}, \
         \"ordering_key\": \"acct:2\", \"rate_key\": \"t:3\"}, {\"kind\": \"noop\", \
         \"payload\": {}, \"ordering_key\": \"acct:2\"}]')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let rows: Vec<(i64, String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT id, state::text, ordering_key, rate_key FROM job.jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let key = |s: &str| Some(s.to_owned());
    assert_eq!(
        rows,
        [
            (head, "available".into(), key("acct:1"), key("t:1")),
            (behind, "pending".into(), key("acct:1"), key("t:2")),
            (many[0], "available".into(), key("acct:2"), key("t:3")),
            (many[1], "pending".into(), key("acct:2"), None),
        ]
    );
    db.close().await;
}

/// An application's transaction that enqueues jobs waiting for others holds those (so that
/// the pruner cannot delete them before it commits), as a foreign key would, and holds up none
/// of the writes a worker makes to them: a claim, a heartbeat, a finalize.
#[tokio::test]
async fn an_open_enqueue_of_dependents_holds_up_no_claim_heartbeat_or_finalize() {
    use job_core::{Dependency, DependencyMode, DependsOn, Finalize, Finalized, Outcome, Renewal};
    let db = TestDb::new().await;
    let store = db.store();
    store.enqueue(new_job("noop")).await.unwrap();
    let running = claim_one(&store, "noop").await;
    let waiting = store.enqueue(new_job("noop")).await.unwrap();
    let dependent = |on| job_core::NewJob {
        depends_on: vec![Dependency {
            on: DependsOn::Job(on),
            mode: DependencyMode::Completed,
        }],
        ..new_job("later")
    };
    let mut tx = store.pool().begin().await.unwrap();
    job_postgres::enqueue_with_dependencies(
        &mut *tx,
        &[dependent(running.lease.id), dependent(waiting)],
    )
    .await
    .unwrap();
    let within = Duration::from_secs(10);
    let claimed = tokio::time::timeout(within, store.claim(&store_support::request(&["noop"], 10)))
        .await
        .expect("the claim waited for the enqueue's transaction")
        .unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(),
        [waiting],
        "the job waited for was skipped while the enqueue was open"
    );
    let renewal = Renewal {
        lease: running.lease,
        extend_by: Duration::from_secs(30),
        stuck: false,
    };
    let report = tokio::time::timeout(within, store.heartbeat(&[renewal]))
        .await
        .expect("the heartbeat waited for the enqueue's transaction")
        .unwrap();
    assert_eq!(report, Default::default());
    let done = tokio::time::timeout(
        within,
        store.finalize(&[Finalize {
            lease: running.lease,
            outcome: Outcome::Complete,
            result: None,
        }]),
    )
    .await
    .expect("the finalize waited for the enqueue's transaction")
    .unwrap();
    assert_eq!(done, [Finalized::Applied]);
    tx.commit().await.unwrap();
    db.close().await;
}

/// A payload nested deeper than a handler can read back (serde_json stops at 128 levels) is
/// refused at the Rust door, naming it; one stored through SQL reads back as its text.
#[tokio::test]
async fn a_payload_nested_too_deep_is_refused_and_one_stored_by_sql_still_reads() {
    #[derive(Serialize, Deserialize)]
    struct Deep {
        v: serde_json::Value,
    }
    impl Job for Deep {
        const KIND: &'static str = "deep";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
    let nested = |levels: usize| -> serde_json::Value {
        serde_json::from_str(&format!("{}1{}", "[".repeat(levels), "]".repeat(levels))).unwrap()
    };
    let db = TestDb::new().await;
    let pool = db.pool();
    Enqueue::new(Deep {
        v: nested(job::MAX_JSON_DEPTH - 1),
    })
    .enqueue(&pool)
    .await
    .unwrap();
    let err = Enqueue::new(Deep { v: nested(120) })
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EnqueueError::InvalidOption { option: "payload", reason }
            if reason.contains("nests 121 levels")),
        "{err:?}"
    );
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('deep', $1::jsonb)")
        .bind(&deep)
        .fetch_one(&pool)
        .await
        .unwrap();
    let row = db.store().get(id).await.unwrap().expect("the job");
    assert!(
        matches!(&row.payload, serde_json::Value::String(text) if text.starts_with(r#"{"a": [[[["#)),
        "{:?}",
        row.payload
    );
    db.close().await;
}
