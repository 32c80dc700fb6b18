//! Compensation: a kind names a compensating job, enqueued in the same transaction that
//! discards a job of it, with the discarded job's id, kind, payload and last error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{Compensate, Discarded, Job, JobContext, JobError, JobOptions, JobState, PgStore};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::count;

/// Fails for good; compensated by [`Refund`].
#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    order_id: i64,
    note: String,
}

impl Job for Charge {
    const KIND: &'static str = "test.charge";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        compensate: Some(Compensate::of::<Refund>()),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Err(JobError::terminal("card declined"))
    }
}

/// What the compensations saw.
#[derive(Clone, Default)]
struct Refunds(Arc<Mutex<Vec<Discarded>>>);

#[derive(Debug, Serialize, Deserialize)]
struct Refund {
    discarded: Discarded,
}

impl Job for Refund {
    const KIND: &'static str = "test.refund";
    const OPTIONS: JobOptions = JobOptions {
        queue: "compensations",
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Refunds>()?
            .0
            .lock()
            .unwrap()
            .push(self.discarded);
        Ok(())
    }
}

fn worker(store: &PgStore, refunds: &Refunds) -> job::Worker<PgStore> {
    job::Worker::builder(store.clone())
        .register::<Charge>()
        .register::<Refund>()
        .queue("default", 2)
        .queue("compensations", 2)
        .poll_interval(Duration::from_millis(20))
        .state(refunds.clone())
        .build()
        .unwrap()
}

/// Waits until job `id` is discarded and its one refund has run; returns what the refund saw.
async fn discarded_then_refunded(h: &Harness, id: job::JobId, refunds: &Refunds) -> Discarded {
    h.reaches(id, JobState::Discarded).await;
    eventually("the refund to run", || async {
        refunds.0.lock().unwrap().first().cloned()
    })
    .await
}

async fn refund_count(h: &Harness) -> i64 {
    count(
        &h.store,
        "SELECT count(*) FROM job.jobs WHERE kind = 'test.refund'",
    )
    .await
}

#[tokio::test]
async fn a_discarded_job_enqueues_its_compensation_with_what_it_was() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    let id = enqueue(
        &h.store,
        Charge {
            order_id: 7,
            note: "first".into(),
        },
    )
    .await;
    let w = worker(&h.store, &refunds).start();
    let seen = discarded_then_refunded(&h, id, &refunds).await;
    w.shutdown().await;
    assert_eq!((seen.job_id, seen.kind.as_str()), (id, "test.charge"));
    assert_eq!(
        seen.payload,
        serde_json::json!({"order_id": 7, "note": "first"})
    );
    let error = seen.error.expect("the last error");
    assert_eq!(
        (error.attempt, error.class.as_str(), error.message.as_str()),
        (1, "terminal", "card declined")
    );
    assert_eq!(refund_count(&h).await, 1, "one compensation, once");
}

#[tokio::test]
async fn every_path_to_discarded_compensates_in_the_same_transaction() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    // Registering is what a worker does before it claims.
    let w = worker(&h.store, &refunds).start();
    w.shutdown().await;
    let id = enqueue(
        &h.store,
        Charge {
            order_id: 8,
            note: "expired".into(),
        },
    )
    .await;
    // A discard that rolls back leaves no compensation behind...
    let mut tx = h.store.pool().begin().await.unwrap();
    sqlx::query("UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(refund_count(&h).await, 0);
    // ...and the expirer's discard of a job past its deadline makes one.
    sqlx::query("UPDATE job.jobs SET deadline = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    job::Store::expire(&h.store, 100).await.unwrap();
    assert_eq!(h.row(id).await.state, JobState::Discarded);
    assert_eq!(refund_count(&h).await, 1);
    let payload: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM job.jobs WHERE kind = 'test.refund'")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    assert_eq!(payload["discarded"]["error"]["class"], "expired");
    assert_eq!(payload["discarded"]["job_id"], id);
}

#[tokio::test]
async fn a_payload_too_large_to_wrap_is_omitted_and_the_discard_still_commits() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    let w = worker(&h.store, &refunds).start();
    w.shutdown().await;
    sqlx::query("UPDATE job.settings SET payload_limit = 8192")
        .execute(h.store.pool())
        .await
        .unwrap();
    let id = enqueue(
        &h.store,
        Charge {
            order_id: 9,
            // Fits the limit alone (8,127 bytes), not with its wrapping.
            note: "x".repeat(8100),
        },
    )
    .await;
    let w = worker(&h.store, &refunds).start();
    let seen = discarded_then_refunded(&h, id, &refunds).await;
    w.shutdown().await;
    assert_eq!(seen.payload, serde_json::Value::Null);
    assert_eq!(seen.job_id, id);
}

#[tokio::test]
async fn a_kind_that_drops_its_compensation_no_longer_compensates() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    worker(&h.store, &refunds).start().shutdown().await;
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.compensations").await,
        1
    );
    job::Store::register_kinds(&h.store, &[("test.charge".into(), None)])
        .await
        .unwrap();
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.compensations").await,
        0
    );
}

#[tokio::test]
async fn a_payload_that_fits_alone_but_not_with_its_error_is_omitted_not_the_compensation() {
    // The wrapping's margin was a fixed 4 KiB, which an error message of up to 8 KiB
    // overran: the compensating job was refused and given up, with a WARNING only.
    let h = Harness::new().await;
    let pool = h.store.pool();
    let refunds = Refunds::default();
    worker(&h.store, &refunds).start().shutdown().await;
    sqlx::query("UPDATE job.settings SET payload_limit = 32768")
        .execute(pool)
        .await
        .unwrap();
    let payload = serde_json::json!({"order_id": 10, "note": "x".repeat(28_000)});
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO job.jobs (kind, payload, state, attempt, lock_token, locked_until, locked_by)
         VALUES ('test.charge', $1, 'running', 1, gen_random_uuid(),
                 now() + interval '1 minute', 'w')
         RETURNING id",
    )
    .bind(&payload)
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job.jobs
         SET state = 'discarded', finalized_at = now(), lock_token = NULL, locked_until = NULL,
             locked_by = NULL,
             errors = job.push_error(errors, jsonb_build_object(
                 'attempt', 1, 'at', now(), 'class', 'terminal', 'message', repeat('m', 8000)))
         WHERE id = $1",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    let wrapped: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM job.jobs WHERE kind = 'test.refund'")
            .fetch_one(pool)
            .await
            .expect("the compensating job");
    assert_eq!(wrapped["discarded"]["job_id"], id);
    assert_eq!(wrapped["discarded"]["payload_omitted"], true);
    assert_eq!(wrapped["discarded"]["payload"], serde_json::Value::Null);
    assert_eq!(wrapped["discarded"]["error"]["class"], "terminal");
}

/// A compensating job the server cannot insert for a passing reason (here an application's
/// trigger that finds a lock not available, 55P03) fails the discard's statement, which is
/// written again once it passes, with its compensation; one the rules refuse (23514) is still
/// left out, with a WARNING, and the discard commits. It used to be left out in both cases:
/// the discard committed without its compensation.
#[tokio::test]
async fn a_compensation_the_server_cannot_insert_for_now_fails_the_discard_for_now() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    worker(&h.store, &refunds).start().shutdown().await;
    sqlx::raw_sql(
        "CREATE TABLE public.refund_gate (code text);
         CREATE FUNCTION public.refund_gate() RETURNS trigger LANGUAGE plpgsql AS $$
         DECLARE code text;
         BEGIN
           SELECT g.code INTO code FROM public.refund_gate g;
           IF code IS NOT NULL THEN
             RAISE EXCEPTION 'refund gate' USING ERRCODE = code;
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refund_gate BEFORE INSERT ON job.jobs
           FOR EACH ROW WHEN (NEW.kind = 'test.refund')
           EXECUTE FUNCTION public.refund_gate();",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let gate = |code: Option<&'static str>| {
        let pool = h.store.pool().clone();
        async move {
            sqlx::query("DELETE FROM public.refund_gate")
                .execute(&pool)
                .await
                .unwrap();
            if let Some(code) = code {
                sqlx::query("INSERT INTO public.refund_gate VALUES ($1)")
                    .bind(code)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }
    };
    let discard = |id: job::JobId| {
        let pool = h.store.pool().clone();
        async move {
            sqlx::query(
                "UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1",
            )
            .bind(id)
            .execute(&pool)
            .await
        }
    };
    let charge = |order_id| Charge {
        order_id,
        note: String::new(),
    };
    let passing = enqueue(&h.store, charge(1)).await;
    gate(Some("55P03")).await;
    let failed = discard(passing)
        .await
        .expect_err("the discard fails for now");
    assert!(failed.to_string().contains("refund gate"), "{failed}");
    assert_eq!(h.row(passing).await.state, JobState::Available);
    gate(None).await;
    discard(passing).await.unwrap();
    assert_eq!(refund_count(&h).await, 1);
    let refused = enqueue(&h.store, charge(2)).await;
    gate(Some("23514")).await;
    discard(refused).await.unwrap();
    assert_eq!(h.row(refused).await.state, JobState::Discarded);
    assert_eq!(refund_count(&h).await, 1, "left out, with a WARNING");
}

/// Fails for good; compensated by [`VersionedRefund`].
#[derive(Debug, Serialize, Deserialize)]
struct Payout {
    order_id: i64,
}

impl Job for Payout {
    const KIND: &'static str = "test.payout";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        compensate: Some(Compensate::of::<VersionedRefund>()),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Err(JobError::terminal("payout refused"))
    }
}

/// A compensating kind with options of its own, at payload version 2.
#[derive(Debug, Serialize, Deserialize)]
struct VersionedRefund {
    discarded: Discarded,
}

impl Job for VersionedRefund {
    const KIND: &'static str = "test.versioned_refund";
    const VERSION: i32 = 2;
    const OPTIONS: JobOptions = JobOptions {
        queue: "compensations",
        priority: 7,
        max_attempts: 2,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Refunds>()?
            .0
            .lock()
            .unwrap()
            .push(self.discarded);
        Ok(())
    }
}

/// The compensating job is enqueued with its kind's priority, attempts and payload version:
/// the table's defaults (0, 25, 1) applied, and a compensating kind at version 2 had every
/// compensation discarded as poison.
#[tokio::test]
async fn a_compensating_job_takes_its_kinds_priority_attempts_and_version() {
    let h = Harness::new().await;
    let refunds = Refunds::default();
    let w = job::Worker::builder(h.store.clone())
        .register::<Payout>()
        .register::<VersionedRefund>()
        .queue("default", 2)
        .queue("compensations", 2)
        .poll_interval(Duration::from_millis(20))
        .state(refunds.clone())
        .build()
        .unwrap()
        .start();
    let id = enqueue(&h.store, Payout { order_id: 11 }).await;
    let seen = discarded_then_refunded(&h, id, &refunds).await;
    w.shutdown().await;
    assert_eq!((seen.job_id, seen.kind.as_str()), (id, "test.payout"));
    let (state, priority, max_attempts, version): (String, i16, i32, i32) = sqlx::query_as(
        "SELECT state::text, priority, max_attempts, payload_version FROM job.jobs
         WHERE kind = 'test.versioned_refund'",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(
        (state.as_str(), priority, max_attempts, version),
        ("completed", 7, 2, 2)
    );
}

/// A row recorded by an older worker (kind and queue only, as its statement still writes
/// them) compensates with the old defaults.
#[tokio::test]
async fn a_compensation_recorded_by_an_older_worker_keeps_the_defaults() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    sqlx::query(
        "INSERT INTO job.compensations AS c (kind, compensate_kind, compensate_queue)
         VALUES ('test.charge', 'test.refund', 'billing')
         ON CONFLICT (kind) DO UPDATE
         SET compensate_kind = excluded.compensate_kind,
             compensate_queue = excluded.compensate_queue, updated_at = now()",
    )
    .execute(pool)
    .await
    .expect("an older worker's statement");
    let id = enqueue(
        &h.store,
        Charge {
            order_id: 12,
            note: String::new(),
        },
    )
    .await;
    sqlx::query("UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    let row: (String, i16, i32, i32) = sqlx::query_as(
        "SELECT queue, priority, max_attempts, payload_version FROM job.jobs
         WHERE kind = 'test.refund'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(row, ("billing".to_owned(), 0, 25, 1));
}

/// A last error that does not fit the payload limit even without the payload: the
/// compensating job comes without either, flagged (`error_omitted`). It was refused, and
/// given up with a WARNING only.
#[tokio::test]
async fn a_last_error_over_the_limit_is_omitted_not_the_compensation() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let refunds = Refunds::default();
    worker(&h.store, &refunds).start().shutdown().await;
    sqlx::query("UPDATE job.settings SET payload_limit = 4096")
        .execute(pool)
        .await
        .unwrap();
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO job.jobs (kind, payload) VALUES ('test.charge', '{\"order\":7}') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', finalized_at = now(),
             errors = jsonb_build_array(jsonb_build_object(
                 'attempt', 1, 'at', now(), 'class', 'error', 'message', repeat('e', 5000)))
         WHERE id = $1",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    let wrapped: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM job.jobs WHERE kind = 'test.refund'")
            .fetch_one(pool)
            .await
            .expect("the compensating job");
    let discarded: Discarded = serde_json::from_value(wrapped["discarded"].clone()).unwrap();
    assert_eq!(discarded.job_id, id);
    assert_eq!(discarded.payload, serde_json::Value::Null);
    assert_eq!(wrapped["discarded"]["payload_omitted"], true);
    assert_eq!(discarded.error, None);
    assert!(discarded.error_omitted, "{wrapped}");
    // And the worker runs it.
    let w = worker(&h.store, &refunds).start();
    let seen = eventually("the refund to run", || async {
        refunds.0.lock().unwrap().first().cloned()
    })
    .await;
    w.shutdown().await;
    assert!(seen.error_omitted);
}
