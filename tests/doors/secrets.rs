//! Payload values never reach the logs or the stored error history through decode errors:
//! the path and the expected type are enough.

use std::sync::{Arc, Mutex, OnceLock};
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

/// Every event logged in this process, as text: its target, level and fields.
fn captured() -> &'static Arc<Mutex<Vec<String>>> {
    static LINES: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::set_global_default(Capture(lines.clone()))
            .expect("no other subscriber in this test binary");
        lines
    })
}

/// A subscriber that keeps each event's text (no maintained crate of this workspace does, and
/// tracing-subscriber would be a dependency for this one test).
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = Fields(String::new());
        span.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push(format!("span {}{}", span.metadata().name(), fields.0));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut fields = Fields(String::new());
        values.record(&mut fields);
        self.0.lock().unwrap().push(format!("record{}", fields.0));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let m = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}{}", m.level(), m.target(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_discarded_without_its_values_in_logs_or_history() {
    let lines = captured();
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
