//! What a bulk enqueue refuses, whichever path its list takes (one statement, or two when a
//! job of it waits for others, as a batch's callback does): a unique key, a job waited for
//! with two modes, and a payload over the database's limit, each with the error a single
//! enqueue or the other bulk paths give; and SQLite's answer where it has the same door.

use job::{
    Batch, Dependency, DependencyMode, DependsOn, Enqueue, EnqueueError, Job, JobContext, JobError,
    JobId, NewJob, PgStore, Store,
};
use job_testkit::TestSqlite;
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::{count, SendInvoice};

/// A job whose payload is as long as its text makes it.
#[derive(Debug, Serialize, Deserialize)]
struct Note {
    text: String,
}

impl Job for Note {
    const KIND: &'static str = "test.bulk_note";

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

async fn jobs(store: &PgStore) -> i64 {
    count(store, "SELECT count(*) FROM job.jobs").await
}

/// The error of `result`, which must be one.
fn refusal<T: std::fmt::Debug>(result: Result<T, EnqueueError>, what: &str) -> EnqueueError {
    match result {
        Err(e) => e,
        Ok(v) => panic!("{what}: expected a refusal, got {v:?}"),
    }
}

fn option_of(e: &EnqueueError) -> Option<&'static str> {
    match e {
        EnqueueError::InvalidOption { option, .. } => Some(option),
        _ => None,
    }
}

/// A batch whose member has a unique key.
fn batch_with_a_unique_member() -> Batch {
    Batch::new()
        .member(Enqueue::new(Noop { n: 1 }).unique_key("charge:7"))
        .callback(Enqueue::new(Noop { n: 2 }))
}

#[tokio::test]
async fn a_unique_key_in_a_list_with_dependencies_is_refused_as_in_any_bulk_enqueue() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let mut unique = NewJob::new(Noop::KIND, r#"{"n":1}"#);
    unique.unique = Enqueue::new(Noop { n: 1 })
        .unique_key("charge:7")
        .build()
        .unwrap()
        .unique;
    // The answer of the bulk path without dependencies.
    let expected = refusal(
        h.store.enqueue_many(vec![unique.clone()]).await,
        "plain bulk",
    );
    assert_eq!(option_of(&expected), Some("unique_key"), "{expected:?}");
    let expected = expected.to_string();

    // A batch, twice: never two jobs holding one key, never a job without the key it was given.
    for _ in 0..2 {
        let e = refusal(batch_with_a_unique_member().enqueue(pool).await, "a batch");
        assert_eq!(e.to_string(), expected);
    }
    // A kind deriving its key (`#[job(unique = ..)]`), in the caller's transaction.
    let mut tx = pool.begin().await.unwrap();
    let derived = Batch::new()
        .member(Enqueue::new(SendInvoice {
            invoice_id: 7,
            note: "first".into(),
        }))
        .callback(Enqueue::new(Noop { n: 2 }))
        .enqueue(&mut *tx)
        .await;
    assert_eq!(refusal(derived, "a derived key").to_string(), expected);
    tx.rollback().await.unwrap();
    assert_eq!(jobs(&h.store).await, 0, "nothing written");

    // The store's bulk enqueue, the unique job beside another that waits for a job.
    let first = enqueue(&h.store, Noop { n: 0 }).await;
    let mut waiting = NewJob::new(Noop::KIND, r#"{"n":3}"#);
    waiting.depends_on = vec![Dependency {
        on: DependsOn::Job(first),
        mode: DependencyMode::Completed,
    }];
    let e = refusal(
        h.store
            .enqueue_many(vec![unique.clone(), waiting.clone()])
            .await,
        "the store",
    );
    assert_eq!(e.to_string(), expected);
    let e = refusal(
        job_postgres::enqueue_with_dependencies(pool, &[waiting, unique]).await,
        "enqueue_with_dependencies",
    );
    assert_eq!(e.to_string(), expected);
    assert_eq!(jobs(&h.store).await, 1, "only the job enqueued alone");

    // SQLite refuses the same batch with the same words.
    let lite = TestSqlite::new().await;
    let store = lite.store();
    let e = refusal(
        batch_with_a_unique_member().enqueue(store.pool()).await,
        "SQLite",
    );
    assert_eq!(e.to_string(), expected);
    lite.close().await;
}

#[tokio::test]
async fn a_job_waited_for_with_two_modes_is_refused_naming_it_and_both_modes() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let a = enqueue(&h.store, Noop { n: 1 }).await;

    let both = Enqueue::new(Noop { n: 2 }).depends_on([a]).after_all([a]);
    let e = refusal(both.enqueue(pool).await, "depends_on and after_all");
    let EnqueueError::InvalidOption { option, reason } = &e else {
        panic!("expected depends_on refused, got {e:?}");
    };
    assert_eq!(*option, "depends_on");
    assert!(
        reason.contains(&format!("job {a} is waited for with two modes"))
            && reason.contains("`depends_on` (run once it has completed)")
            && reason.contains("`after_all` (run once it has finished, however it ended)"),
        "{reason}"
    );
    // The other order, and a row built by hand through the store's bulk enqueue.
    let other = Enqueue::new(Noop { n: 2 }).after_all([a]).depends_on([a]);
    assert_eq!(
        option_of(&refusal(other.enqueue(pool).await, "after_all first")),
        Some("depends_on")
    );
    let mut row = NewJob::new(Noop::KIND, r#"{"n":2}"#);
    row.depends_on = [DependencyMode::Finished, DependencyMode::Completed]
        .map(|mode| Dependency {
            on: DependsOn::Job(a),
            mode,
        })
        .into();
    let e = refusal(h.store.enqueue_many(vec![row]).await, "the store");
    assert!(
        e.to_string()
            .contains(&format!("job {a} is waited for with two modes")),
        "{e}"
    );
    assert_eq!(jobs(&h.store).await, 1, "nothing written");

    // The same job named twice with one mode is waited for once.
    let twice: JobId = Enqueue::new(Noop { n: 3 })
        .depends_on([a, a])
        .enqueue(pool)
        .await
        .unwrap();
    let edges = sqlx::query_as::<_, (JobId, String)>(
        "SELECT depends_on, mode FROM job.dependencies WHERE job_id = $1",
    )
    .bind(twice)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(edges, [(a, "completed".to_owned())]);
}

#[tokio::test]
async fn a_payload_over_the_limit_in_bulk_is_payload_too_large_as_alone() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    sqlx::query("UPDATE job.settings SET payload_limit = 64")
        .execute(pool)
        .await
        .unwrap();
    let small = || Note { text: "ok".into() };
    let big = || Note {
        text: "x".repeat(80),
    };
    let alone = refusal(Enqueue::new(big()).enqueue(pool).await, "alone");
    let EnqueueError::PayloadTooLarge { kind, size, limit } = &alone else {
        panic!("expected PayloadTooLarge, got {alone:?}");
    };
    assert_eq!((kind.as_str(), *limit), (Note::KIND, 64));
    let size = *size;
    let expected = alone.to_string();

    let e = refusal(Enqueue::many(pool, [small(), big()]).await, "Enqueue::many");
    assert_eq!(e.to_string(), expected, "{e:?}");
    let e = refusal(
        h.store
            .enqueue_many(vec![
                Enqueue::new(small()).build().unwrap(),
                Enqueue::new(big()).build().unwrap(),
            ])
            .await,
        "the store",
    );
    assert_eq!(e.to_string(), expected, "{e:?}");
    // Through the statement of jobs with dependencies: a batch's member.
    let batch = Batch::new()
        .member(Enqueue::new(small()))
        .member(Enqueue::new(big()))
        .callback(Enqueue::new(small()));
    let e = refusal(batch.enqueue(pool).await, "a batch");
    assert_eq!(e.to_string(), expected, "{e:?}");
    // Several kinds: the one refused is named, with the size the database measured.
    let nested = r#"{"a":[1,2,{"b":"c, d: e"}],"f":"\"quoted\"","g":{},"h":"yyyyyyyyyyyyyyyyyyy"}"#;
    let e = refusal(
        h.store
            .enqueue_many(vec![
                NewJob::new("test.first", r#"{"n":1}"#),
                NewJob::new("test.nested", nested),
                NewJob::new("test.last", r#"{"n":1}"#),
            ])
            .await,
        "several kinds",
    );
    let measured: i32 = sqlx::query_scalar("SELECT octet_length($1::jsonb::text)")
        .bind(nested)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(
        matches!(&e, EnqueueError::PayloadTooLarge { kind, size, limit: 64 }
            if kind == "test.nested" && *size == measured as usize),
        "{e:?}"
    );
    assert!(size > 64);
    assert_eq!(jobs(&h.store).await, 0, "nothing written");

    // SQLite's bulk paths answer the same error kind.
    let lite = TestSqlite::new().await;
    let store = lite.store();
    sqlx::query("UPDATE job_settings SET payload_limit = 64")
        .execute(store.pool())
        .await
        .unwrap();
    let e = refusal(
        Enqueue::many(store.pool(), [small(), big()]).await,
        "SQLite",
    );
    assert!(
        matches!(&e, EnqueueError::PayloadTooLarge { kind, limit: 64, .. } if kind == Note::KIND),
        "{e:?}"
    );
    lite.close().await;
}
