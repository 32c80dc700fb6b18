//! Pausing and resuming queues and kinds at runtime.

use std::time::Duration;

use job::JobState;
use job_core::{Admin, Pause, Store};

use crate::common::*;

#[tokio::test]
async fn a_paused_kind_waits_while_others_run_and_runs_once_resumed() {
    let h = Harness::new().await;
    let worker = h.worker().build().unwrap().start();
    let kind = Pause::Kind("test.noop".into());
    assert!(h.store.pause(&kind).await.unwrap());
    assert!(!h.store.pause(&kind).await.unwrap(), "already paused");
    assert_eq!(h.store.paused().await.unwrap(), vec![kind.clone()]);

    let paused = enqueue(&h.store, Noop { n: 1 }).await;
    let other = enqueue(&h.store, Sleepy { ms: 1 }).await;
    h.reaches(other, JobState::Completed).await;
    // The other kind ran after the paused one was enqueued: several polls went by.
    let later = enqueue(&h.store, Sleepy { ms: 1 }).await;
    h.reaches(later, JobState::Completed).await;
    assert_eq!(h.row(paused).await.state, JobState::Available);
    assert_eq!(h.ledger.runs(paused), 0);

    assert!(h.store.resume(&kind).await.unwrap());
    assert!(!h.store.resume(&kind).await.unwrap(), "not paused any more");
    h.reaches(paused, JobState::Completed).await;
    worker.shutdown().await;
}

#[tokio::test]
async fn a_paused_queue_takes_nothing_until_resumed() {
    let h = Harness::new().await;
    let queue = Pause::Queue("default".into());
    h.store.pause(&queue).await.unwrap();
    let worker = h.worker().queue("other", 1).build().unwrap().start();
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let on_other = job_core::EnqueueOptions {
        queue: Some("other".into()),
        ..Default::default()
    };
    // Progress elsewhere, twice, after the paused queue's job was enqueued.
    for n in 0..2 {
        let other = enqueue_with(&h.store, Noop { n: 10 + n }, on_other.clone()).await;
        h.reaches(other, JobState::Completed).await;
    }
    assert_eq!(h.row(id).await.state, JobState::Available);
    h.store.resume(&queue).await.unwrap();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
}

/// `job.pauses` refuses, from any writer, a name no queue or kind can have (migration 0065):
/// such a pause matched nothing, was listed as in force, and neither `job resume` nor the
/// dashboard could resume it. One stored before the table refused it is still resumed by
/// `Admin::resume`; resuming it again, with no pause left, is refused as a pause is.
#[tokio::test]
async fn a_pause_name_no_queue_or_kind_can_have_is_refused_by_the_table_and_an_old_one_resumes() {
    let h = Harness::new().await;
    let pool = h.db.pool();
    let refused = sqlx::query("INSERT INTO job.pauses (scope, name) VALUES ('queue', 'emails ')")
        .execute(&pool)
        .await
        .unwrap_err();
    let db_error = refused.as_database_error().expect("the table refuses it");
    assert_eq!(db_error.code().as_deref(), Some("23514"), "{refused}");
    assert_eq!(
        db_error.message(),
        "pause refused: the queue name must not contain whitespace, control or format \
         characters (U+0020 at character 7)"
    );
    sqlx::query("INSERT INTO job.pauses (scope, name) VALUES ('kind', 'ok.kind')")
        .execute(&pool)
        .await
        .unwrap();
    let renamed =
        sqlx::query("UPDATE job.pauses SET name = 'bad\u{200b}kind' WHERE name = 'ok.kind'")
            .execute(&pool)
            .await
            .unwrap_err();
    assert!(
        renamed.to_string().contains("U+200B at character 4"),
        "{renamed}"
    );
    assert_eq!(
        h.store.paused().await.unwrap(),
        vec![Pause::Kind("ok.kind".into())]
    );

    // A pause written before migration 0065, as the trigger's absence lets one be written.
    sqlx::raw_sql(
        "ALTER TABLE job.pauses DISABLE TRIGGER pauses_names;
         INSERT INTO job.pauses (scope, name) VALUES ('queue', 'emails ');
         ALTER TABLE job.pauses ENABLE TRIGGER pauses_names;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let old = Pause::Queue("emails ".into());
    assert!(
        h.store.resume(&old).await.unwrap(),
        "the stored pause is resumed"
    );
    let again = h.store.resume(&old).await.unwrap_err();
    assert!(again.is_refused(), "{again}");
    assert!(
        again.to_string().contains("U+0020 at character 7"),
        "{again}"
    );
    assert_eq!(
        h.store.paused().await.unwrap(),
        vec![Pause::Kind("ok.kind".into())]
    );
}

/// Pause rows of other kinds and a concurrency limit change what a claim checks, not what it
/// takes: over 20,000 waiting jobs, with 50 other kinds paused and then with the kind limited,
/// every claim still takes its full 10, each job once. (What the checks cost is the
/// benchmark's: `job-bench backlog`.)
#[tokio::test]
async fn claims_take_their_full_count_past_pauses_of_other_kinds_and_a_limit() {
    let h = Harness::new().await;
    let jobs: Vec<_> = (0..20_000)
        .map(|i| {
            let mut j = job_core::NewJob::new("test.noop", format!(r#"{{"n":{i}}}"#));
            j.queue = "default".into();
            j
        })
        .collect();
    h.store.enqueue_many(jobs).await.unwrap();
    sqlx::query("ANALYZE job.jobs")
        .execute(h.store.pool())
        .await
        .unwrap();
    let request = |concurrency| job_core::ClaimRequest {
        queue: "default".into(),
        kinds: vec![
            job_core::ClaimKind {
                kind: "test.noop".into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency,
                rate: None,
            },
            job_core::ClaimKind {
                kind: "test.other".into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            },
        ],
        limit: 10,
        worker_id: "claims".into(),
    };
    let mut seen = std::collections::HashSet::new();
    let mut claim_20 = async |r: &job_core::ClaimRequest| {
        for _ in 0..20 {
            let claimed = h.store.claim(r).await.unwrap();
            assert_eq!(claimed.len(), 10);
            for job in claimed {
                assert!(
                    seen.insert(job.lease.id),
                    "job {} claimed twice",
                    job.lease.id
                );
            }
        }
    };
    claim_20(&request(None)).await;
    for i in 0..50 {
        h.store
            .pause(&Pause::Kind(format!("some.kind.{i}")))
            .await
            .unwrap();
    }
    claim_20(&request(None)).await;
    claim_20(&request(Some(1_000_000))).await;
    assert_eq!(seen.len(), 600);
}
