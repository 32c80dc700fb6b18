//! A job records at most `MAX_STEPS` durable steps, on both stores: a new step past them is
//! refused at the store's door (`StepLimit`, inside a refused `StoreError`, naming the job and
//! the limit), and a handler that loops over one item more ends its job discarded as
//! `step_unstorable` without running the step past the limit. The job's steps are written
//! with one SQL statement first: ten thousand saves through the store take a minute on SQLite.
//! The bytes limit, `MAX_STEPS_TOTAL`, is in the conformance suite at the store's door; here,
//! end to end on PostgreSQL, a job whose steps hold more than the attempt keeps in memory.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    ClaimKind, ClaimRequest, Finalized, Job, JobContext, JobError, JobId, JobOptions, JobState,
    NewJob, Release, StepLimit, Store, Worker, MAX_STEPS,
};
use job_testkit::{wait_for, TestDb, TestSqlite, TestWorker};
use serde::{Deserialize, Serialize};

/// The names of the steps whose effect ran.
#[derive(Debug, Clone, Default)]
struct Ran(Arc<Mutex<Vec<String>>>);

/// A step per item, one item more than a job may record.
#[derive(Debug, Serialize, Deserialize)]
struct Looping {}

impl Job for Looping {
    const KIND: &'static str = "limits.looping";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 3,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let ran = ctx.state::<Ran>()?;
        for i in 0..=MAX_STEPS {
            let item = format!("item-{i}");
            ctx.step(&item, || async {
                ran.0.lock().unwrap().push(item.clone());
                Ok(i)
            })
            .await?;
        }
        Ok(())
    }
}

/// Fills job `id` with `MAX_STEPS` steps `item-<i>`, output `<i>`, in one statement.
type Fill = Box<dyn Fn(JobId) -> Pin<Box<dyn Future<Output = ()> + Send>>>;

async fn a_job_at_its_step_count_records_no_new_step_and_its_handler_ends_it<S: Store>(
    store: S,
    fill: Fill,
) {
    let id = store
        .enqueue(NewJob {
            max_attempts: 3,
            ..NewJob::new(Looping::KIND, "{}")
        })
        .await
        .unwrap();
    fill(id).await;
    let claimed = store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: Looping::KIND.into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 1,
            worker_id: "limits".into(),
        })
        .await
        .unwrap();
    let lease = claimed[0].lease;

    let past = format!("item-{MAX_STEPS}");
    let refused = store
        .save_step(&lease, &past, "1")
        .await
        .expect_err("a new step past the limit is refused");
    assert!(refused.is_refused(), "refused, not passing: {refused}");
    let limit = refused
        .inner()
        .downcast_ref::<StepLimit>()
        .unwrap_or_else(|| panic!("a StepLimit: {refused}"));
    assert_eq!(
        (limit.job, limit.step.as_str(), limit.steps),
        (id, past.as_str(), MAX_STEPS as u64)
    );
    let text = refused.to_string();
    assert!(
        text.contains(&format!("job {id}")) && text.contains("job::MAX_STEPS"),
        "{text}"
    );
    let again = store.save_step(&lease, "item-0", "7").await.unwrap();
    assert_eq!(again, Finalized::Applied, "a name already recorded");
    assert_eq!(store.load_step(&lease, &past).await.unwrap(), None);
    assert_eq!(
        store.release(&[Release::unstarted(lease)]).await.unwrap(),
        1
    );

    let ran = Ran::default();
    let worker = Worker::builder(store.clone())
        .poll_interval(Duration::from_millis(20))
        .register::<Looping>()
        .queue("default", 1)
        .state(ran.clone())
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 1, "not retried");
    let last = row.errors.last().expect("an error");
    assert_eq!(last.class, "step_unstorable");
    assert!(
        last.message.contains(&format!("job {id}"))
            && last.message.contains("job::MAX_STEPS")
            && last.message.contains(&format!("`{past}`")),
        "{}",
        last.message
    );
    assert_eq!(
        *ran.0.lock().unwrap(),
        Vec::<String>::new(),
        "no step's effect ran: the recorded ones came back, the one past the limit was refused"
    );
}

#[tokio::test]
async fn postgres_refuses_a_new_step_past_the_jobs_step_count() {
    let db = TestDb::new().await;
    let pool = db.store().pool().clone();
    let fill: Fill = Box::new(move |id| {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
                 SELECT $1, 'item-' || i, to_jsonb(i), 1, length(i::text)
                 FROM generate_series(0, $2 - 1) i",
            )
            .bind(id)
            .bind(MAX_STEPS as i32)
            .execute(&pool)
            .await
            .unwrap();
        })
    });
    a_job_at_its_step_count_records_no_new_step_and_its_handler_ends_it(db.store(), fill).await;
    db.close().await;
}

/// Rows of `job.steps` the server has read for the session of `pool` (one connection): the
/// heap's rows read by scans and the index entries read, counted once the session's statistics
/// are flushed (`pg_stat_force_next_flush`, PostgreSQL 15).
async fn step_rows_read(pool: &sqlx::PgPool) -> i64 {
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::integer")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(
        version >= 150_000,
        "this test reads a session's statistics after pg_stat_force_next_flush(), which \
         PostgreSQL 15 added (server_version_num {version}): run it against 15 or later"
    );
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT coalesce(t.seq_tup_read, 0)
                + coalesce((SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i
                            WHERE i.relid = t.relid), 0)::bigint
         FROM pg_stat_user_tables t WHERE t.relid = 'job.steps'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A step's save reads its job's row of `job.step_totals` (migration 0062) and probes the
/// primary key for its name: the same few rows however many steps the job has. It counted and
/// summed all of them on every save (a job that reached `MAX_STEPS` had read about 50 million
/// rows), and a worker's step saves share one connection, so one such job slowed the steps of
/// every other job on the worker.
#[tokio::test]
async fn a_steps_save_reads_the_same_rows_however_many_steps_its_job_has() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store
        .enqueue(NewJob::new(Looping::KIND, "{}"))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
         SELECT $1, 'item-' || i, to_jsonb(i), 1, length(i::text)
         FROM generate_series(0, 4999) i",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE job.steps")
        .execute(&db.pool())
        .await
        .unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: Looping::KIND.into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 1,
            worker_id: "limits".into(),
        })
        .await
        .unwrap();
    let lease = claimed[0].lease;
    // One connection: the saves run on the session whose statistics are read.
    let pool = job::pool_options()
        .max_connections(1)
        .connect_with(db.connect_options())
        .await
        .unwrap();
    let one = job::PgStore::new(pool.clone());
    for name in ["next-1", "next-2", "item-7"] {
        let before = step_rows_read(&pool).await;
        let saved = one.save_step(&lease, name, "1").await.unwrap();
        let read = step_rows_read(&pool).await - before;
        assert_eq!(saved, Finalized::Applied, "{name}");
        assert!(
            read < 10,
            "the save of step {name} of a job with 5,000 steps read {read} rows of job.steps"
        );
    }
    let totals: (i32, i64) =
        sqlx::query_as("SELECT steps, bytes FROM job.step_totals WHERE job_id = $1")
            .bind(id)
            .fetch_one(&db.pool())
            .await
            .unwrap();
    let counted: (i64, i64) = sqlx::query_as(
        "SELECT count(*), sum(output_bytes)::bigint FROM job.steps WHERE job_id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool())
    .await
    .unwrap();
    assert_eq!((i64::from(totals.0), totals.1), counted);
    assert_eq!(
        counted.0, 5002,
        "two new steps; item-7 kept its first output"
    );

    // The totals follow every writer: an operator's DELETE and UPDATE of steps, and the
    // deletion of the job, whose steps go with it (migration 0057's trigger).
    let totals_now = || async {
        sqlx::query_as::<_, (i32, i64)>(
            "SELECT steps, bytes FROM job.step_totals WHERE job_id = $1",
        )
        .bind(id)
        .fetch_optional(&db.pool())
        .await
        .unwrap()
    };
    sqlx::raw_sql(&format!(
        "DELETE FROM job.steps WHERE job_id = {id} AND name LIKE 'item-1%';
         UPDATE job.steps SET output = '\"longer\"', output_bytes = 8
         WHERE job_id = {id} AND name = 'item-2'"
    ))
    .execute(&db.pool())
    .await
    .unwrap();
    let counted: (i64, i64) = sqlx::query_as(
        "SELECT count(*), sum(output_bytes)::bigint FROM job.steps WHERE job_id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool())
    .await
    .unwrap();
    assert_eq!(counted.0, 5002 - 1111);
    assert_eq!(
        totals_now().await.map(|(n, b)| (i64::from(n), b)),
        Some(counted)
    );

    // A writer of the job's steps whose transaction is still open holds the job's totals row
    // (its trigger wrote it): a save is skipped as busy, as for its job's row, rather than
    // wait for that transaction (it waited, and could deadlock with it).
    let mut open = db.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
         VALUES ($1, 'by-hand', '1', 1, 1)",
    )
    .bind(id)
    .execute(&mut *open)
    .await
    .unwrap();
    let save = tokio::time::timeout(
        Duration::from_secs(10),
        one.save_step(&lease, "next-3", "1"),
    )
    .await
    .expect("the save waited for the open transaction");
    assert_eq!(save.unwrap(), Finalized::Busy);
    open.rollback().await.unwrap();
    assert_eq!(
        one.save_step(&lease, "next-3", "1").await.unwrap(),
        Finalized::Applied
    );
    // A row written without output_bytes (a worker before migration 0049, an operator) counts
    // its JSON text's length, alike on the way in and out: PostgreSQL compresses this one.
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         VALUES ($1, 'legacy', to_jsonb(repeat('abcdefgh', 5000)), 1)",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let with_legacy = totals_now().await.unwrap();
    assert_eq!(i64::from(with_legacy.0), counted.0 + 2);
    assert_eq!(with_legacy.1, counted.1 + 1 + 40_002);
    sqlx::query("DELETE FROM job.steps WHERE job_id = $1 AND name IN ('legacy', 'next-3')")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    assert_eq!(
        totals_now().await.map(|(n, b)| (i64::from(n), b)),
        Some(counted)
    );

    // `job check` tells totals that drifted (here by hand; a data-only restore with the
    // triggers on, say), and its message's statement counts them again.
    let check = store.check(Duration::from_secs(30)).await.unwrap();
    assert_eq!(check.step_totals_off, 0);
    sqlx::query("UPDATE job.step_totals SET steps = steps + 1 WHERE job_id = $1")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    let check = store.check(Duration::from_secs(30)).await.unwrap();
    assert_eq!(check.step_totals_off, 1);
    let problem = check
        .problems()
        .into_iter()
        .find(|p| p.contains("job.step_totals"))
        .expect("a problem naming the totals");
    let repair = problem
        .split('`')
        .nth(1)
        .expect("the statement, between backquotes");
    sqlx::raw_sql(repair).execute(&db.pool()).await.unwrap();
    let check = store.check(Duration::from_secs(30)).await.unwrap();
    assert_eq!(check.step_totals_off, 0, "{:?}", check.problems());
    assert_eq!(
        totals_now().await.map(|(n, b)| (i64::from(n), b)),
        Some(counted)
    );

    sqlx::query("DELETE FROM job.jobs WHERE id = $1")
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    assert_eq!(totals_now().await, None, "gone with the job's last step");
    pool.close().await;
    db.close().await;
}

#[tokio::test]
async fn sqlite_refuses_a_new_step_past_the_jobs_step_count() {
    let db = TestSqlite::new().await;
    let pool = db.pool();
    let fill: Fill = Box::new(move |id| {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query(
                "WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < ?2)
                 INSERT INTO job_steps (job_id, name, output, attempt, recorded_at)
                 SELECT ?1, 'item-' || n, CAST(n AS TEXT), 1, 0 FROM i",
            )
            .bind(id)
            .bind(MAX_STEPS as i64)
            .execute(&pool)
            .await
            .unwrap();
        })
    });
    a_job_at_its_step_count_records_no_new_step_and_its_handler_ends_it(db.store(), fill).await;
}

/// One step more over a job whose steps hold almost `MAX_STEPS_TOTAL` of output.
#[derive(Debug, Serialize, Deserialize)]
struct Heavy {}

impl Job for Heavy {
    const KIND: &'static str = "limits.heavy";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let ran = ctx.state::<Ran>()?;
        ctx.step("one-more", || async {
            ran.0.lock().unwrap().push("one-more".into());
            Ok("y".repeat(40_000))
        })
        .await?;
        Ok(())
    }
}

/// A job whose steps hold more output than an attempt keeps in memory, and within 40,000 bytes
/// of `MAX_STEPS_TOTAL`: a new step's closure runs (the attempt cannot know the job's total),
/// the store refuses its output, and the job ends `step_unstorable` with the advice that fits
/// a limit (split the work), not a redrive, which would meet the same limit after running the
/// step once more.
#[tokio::test]
async fn a_step_past_the_jobs_output_bytes_ends_it_saying_to_split_the_work() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(NewJob::new(Heavy::KIND, "{}")).await.unwrap();
    // 64 outputs of 1,048,002 bytes of text each: 36,736 bytes short of the limit.
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
         SELECT $1, 'part-' || lpad(i::text, 2, '0'), to_jsonb(repeat('x', 1048000)), 1, 1048002
         FROM generate_series(1, 64) i",
    )
    .bind(id)
    .execute(store.pool())
    .await
    .unwrap();
    let ran = Ran::default();
    let worker = Worker::builder(store.clone())
        .register::<Heavy>()
        .queue("default", 1)
        .state(ran.clone())
        .for_tests()
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Discarded).await;
    worker.shutdown().await;
    let last = row.errors.last().expect("an error");
    assert_eq!(last.class, "step_unstorable");
    assert!(
        last.message.contains("MAX_STEPS_TOTAL")
            && last
                .message
                .contains("split work over more items into several jobs")
            && !last.message.contains("redrive"),
        "{}",
        last.message
    );
    assert_eq!(
        *ran.0.lock().unwrap(),
        ["one-more"],
        "the step's closure ran once: the attempt could not know the job's total"
    );
    db.close().await;
}
