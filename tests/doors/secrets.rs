//! Payload values never reach the logs or the stored error history through decode errors:
//! the path and the expected type are enough.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobState, Store, Worker};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};

const SECRET: &str = "sk_live_51HxSECRETvalue";

#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    invoice_id: i64,
}

impl Job for Charge {
    const KIND: &'static str = "doors.charge";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_discarded_without_its_values_in_logs_or_history() {
    let lines = crate::support::captured();
    let db = TestDb::new().await;
    let store = db.store();
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.charge', $1::jsonb)")
        .bind(serde_json::json!({ "invoice_id": SECRET }))
        .fetch_one(store.pool())
        .await
        .unwrap();
    let worker = Worker::builder(store.clone())
        .register::<Charge>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let row = crate::common::reaches(&store, id, JobState::Discarded).await;
    worker.shutdown().await;

    let error = &row.errors[0];
    assert_eq!(error.class, "poison");
    assert_eq!(
        error.message,
        "payload of `doors.charge` (version 1) does not decode: at `invoice_id`: invalid type: \
         a string, expected i64"
    );
    let logged = lines.lock().unwrap().join("\n");
    assert!(
        logged.contains("poison payload"),
        "the discard is logged:\n{logged}"
    );
    assert!(logged.contains("expected i64"), "{logged}");
    assert!(
        !logged.contains(SECRET),
        "the secret reached the log:\n{logged}"
    );
    let stored = serde_json::to_string(&store.get(id).await.unwrap().unwrap().errors).unwrap();
    assert!(!stored.contains(SECRET), "{stored}");
    db.close().await;
}
