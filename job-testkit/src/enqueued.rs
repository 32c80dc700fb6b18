//! Assertions on what an application enqueued, read straight from the `job.jobs` table.

use job_core::{Job, JobId};
use serde_json::Value;
use sqlx::PgPool;

/// A waiting job of kind `J` as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueuedJob<J> {
    /// Its id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// Its payload, decoded (through `Job::upgrade` for older versions).
    pub job: J,
    /// Its payload as stored.
    pub payload: Value,
}

/// Every job of kind `J` waiting to run (`scheduled`, `available` or `retryable`), oldest first.
///
/// # Panics
/// When the query fails or a payload does not decode: a test should hear about either.
pub async fn enqueued<J: Job>(pool: &PgPool) -> Vec<EnqueuedJob<J>> {
    let rows: Vec<(JobId, String, i16, String, i32)> = sqlx::query_as(
        "SELECT id, queue, priority, payload::text, payload_version FROM job.jobs \
         WHERE kind = $1 AND state IN ('scheduled', 'available', 'retryable') ORDER BY id",
    )
    .bind(J::KIND)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("cannot read enqueued `{}` jobs: {e}", J::KIND));
    rows.into_iter()
        .map(|(id, queue, priority, payload, version)| EnqueuedJob {
            id,
            queue,
            priority,
            job: job_core::decode::<J>(&payload, version)
                .unwrap_or_else(|e| panic!("enqueued job {id}: {e}")),
            payload: serde_json::from_str(&payload).expect("jsonb text is JSON"),
        })
        .collect()
}

/// Asserts that a job of kind `J` is waiting whose payload contains `fields` (every key of
/// `fields` present with an equal value; other keys are ignored). Returns its id.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) {
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
/// # impl job_core::Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: job_core::JobContext) -> Result<(), job_core::JobError> { Ok(()) } }
/// use job_testkit::{assert_enqueued, refute_enqueued};
/// use serde_json::json;
///
/// // ... the code under test enqueues SendInvoice { invoice_id: 42 } ...
/// let id = assert_enqueued::<SendInvoice>(&pool, json!({ "invoice_id": 42 })).await;
/// refute_enqueued::<SendInvoice>(&pool, json!({ "invoice_id": 43 })).await;
/// # let _ = id; }
/// ```
///
/// # Panics
/// When no such job waits; the message lists the payloads that do.
pub async fn assert_enqueued<J: Job>(pool: &PgPool, fields: Value) -> JobId {
    let jobs = enqueued::<J>(pool).await;
    match jobs.iter().find(|j| contains(&j.payload, &fields)) {
        Some(found) => found.id,
        None => panic!(
            "expected a `{}` job enqueued with {fields}, found {}",
            J::KIND,
            describe(&jobs)
        ),
    }
}

/// Asserts that no job of kind `J` waits whose payload contains `fields`.
///
/// # Panics
/// When one does; the message shows it.
pub async fn refute_enqueued<J: Job>(pool: &PgPool, fields: Value) {
    let jobs = enqueued::<J>(pool).await;
    if let Some(found) = jobs.iter().find(|j| contains(&j.payload, &fields)) {
        panic!(
            "expected no `{}` job enqueued with {fields}, found job {} with {}",
            J::KIND,
            found.id,
            found.payload
        );
    }
}

fn describe<J>(jobs: &[EnqueuedJob<J>]) -> String {
    if jobs.is_empty() {
        return "none".to_owned();
    }
    jobs.iter()
        .map(|j| format!("job {}: {}", j.id, j.payload))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether `actual` holds every key of `expected` (recursively for objects) with equal values.
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| contains(av, ev))),
        _ => actual == expected,
    }
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn a_partial_payload_matches_a_fuller_one() {
        let actual = json!({"invoice_id": 42, "resend": false, "to": {"name": "Ada", "id": 1}});
        assert!(contains(&actual, &json!({"invoice_id": 42})));
        assert!(contains(&actual, &json!({"to": {"name": "Ada"}})));
        assert!(contains(&actual, &json!({})));
        assert!(!contains(&actual, &json!({"invoice_id": 43})));
        assert!(!contains(&actual, &json!({"missing": 1})));
    }
}
