//! A trace crosses the queue: a job enqueued inside a span carries that span's W3C
//! traceparent, and its attempt runs in a span of the same trace, a child of the enqueuing
//! span (through the `opentelemetry` feature and `tracing-opentelemetry`).

use std::sync::{Arc, Mutex, OnceLock};

use job::prelude::*;
use job_testkit::prelude::*;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use crate::support::finished_row;

/// The spans this test binary finished, from an OpenTelemetry pipeline installed once.
fn spans() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("job-tests"));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other subscriber in this test binary");
        exporter
    })
}

/// The traceparent the handler saw as its own.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Option<String>>>);

#[job(kind = "tt.traced", queue = "tt")]
async fn tt_traced(ctx: JobContext) -> Result<(), JobError> {
    *ctx.state::<Seen>()?.0.lock().unwrap() = job::current_traceparent();
    Ok(())
}

#[tokio::test]
async fn a_job_enqueued_inside_a_span_runs_in_a_span_of_the_same_trace() {
    let exporter = spans();
    let db = TestDb::new().await;
    let store = db.store();
    let pool = db.pool();

    let request = tracing::info_span!("request");
    let id = async { TtTraced {}.enqueue(&pool).await.unwrap() }
        .instrument(request.clone())
        .await;
    let parent = request.context().span().span_context().clone();
    drop(request);
    assert!(parent.is_valid());
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        row.traceparent,
        Some(format!(
            "00-{:032x}-{:016x}-01",
            parent.trace_id(),
            parent.span_id()
        )),
        "the enqueue stored the request's trace context"
    );

    let seen = Seen::default();
    let worker = Worker::builder(store.clone())
        .register::<TtTraced>()
        .state(seen.clone())
        .queue("tt", 1)
        .for_tests()
        .build()
        .unwrap()
        .start();
    assert_eq!(finished_row(&store, id).await.state, JobState::Completed);
    worker.shutdown().await;

    let finished = exporter.get_finished_spans().unwrap();
    let attempt = finished
        .iter()
        .find(|s| {
            s.name == "job"
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "id" && kv.value == Value::I64(id))
        })
        .expect("the attempt's span was exported");
    assert_eq!(
        attempt.span_context.trace_id(),
        parent.trace_id(),
        "same trace"
    );
    assert_eq!(
        attempt.parent_span_id,
        parent.span_id(),
        "a child of the enqueuing span"
    );
    // The handler runs inside it: what it enqueues joins the trace too.
    let inside = seen
        .0
        .lock()
        .unwrap()
        .clone()
        .expect("the handler had a trace");
    assert!(
        inside.starts_with(&format!("00-{:032x}-", parent.trace_id())),
        "{inside}"
    );
    assert!(inside.contains(&format!("-{:016x}-", attempt.span_context.span_id())));
    db.close().await;
}

/// The traceparents the handler and its blocking closure saw.
#[derive(Clone, Default)]
struct SeenTwice(Arc<Mutex<Vec<Option<String>>>>);

#[job(kind = "tt.blocking", queue = "tt_blocking")]
async fn tt_blocking(ctx: JobContext) -> Result<(), JobError> {
    let seen = ctx.state::<SeenTwice>()?.clone();
    seen.0.lock().unwrap().push(job::current_traceparent());
    let inner = seen.clone();
    ctx.blocking(move || inner.0.lock().unwrap().push(job::current_traceparent()))
        .await;
    Ok(())
}

/// `ctx.blocking` runs its closure in the attempt's span: what it logs carries the job's
/// fields, and what it enqueues joins the job's trace.
#[tokio::test]
async fn blocking_work_runs_in_the_attempts_span() {
    let _exporter = spans();
    let db = TestDb::new().await;
    let store = db.store();
    let id = TtBlocking {}.enqueue(&db.pool()).await.unwrap();
    let seen = SeenTwice::default();
    let worker = Worker::builder(store.clone())
        .register::<TtBlocking>()
        .state(seen.clone())
        .queue("tt_blocking", 1)
        .for_tests()
        .build()
        .unwrap()
        .start();
    assert_eq!(finished_row(&store, id).await.state, JobState::Completed);
    worker.shutdown().await;
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].is_some(), "the handler runs in a trace");
    assert_eq!(
        seen[1], seen[0],
        "and its blocking closure in the same span"
    );
    db.close().await;
}

#[tokio::test]
async fn an_enqueue_outside_any_trace_stores_none_and_a_bad_traceparent_is_refused() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let id = TtTraced {}.enqueue(&pool).await.unwrap();
    let row = db.store().get(id).await.unwrap().unwrap();
    assert_eq!(row.traceparent, None);

    let bad = job::NewJob {
        traceparent: Some("00-not-a-trace".into()),
        ..job::NewJob::new("tt.traced", "{}")
    };
    let err = db.store().enqueue(bad).await.unwrap_err();
    assert!(err.to_string().contains("traceparent"), "{err}");
    // The database refuses one too, whatever wrote it.
    let raw = sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, trace_context) VALUES ('tt.traced', 'tt', '{}', 'x')",
    )
    .execute(&pool)
    .await;
    assert!(raw.is_err());
    db.close().await;
}

#[tokio::test]
async fn every_rust_enqueue_stores_the_trace_unique_and_bulk_alike() {
    spans();
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    let request = tracing::info_span!("request");
    let (unique, many) = async {
        let unique = Enqueue::new(TtTraced {})
            .unique_key("k")
            .enqueue(&pool)
            .await
            .unwrap();
        let many = Enqueue::many(&pool, [TtTraced {}, TtTraced {}])
            .await
            .unwrap();
        (unique, many)
    }
    .instrument(request.clone())
    .await;
    let parent = request.context().span().span_context().clone();
    let expected = format!("00-{:032x}-{:016x}-01", parent.trace_id(), parent.span_id());
    for id in std::iter::once(unique).chain(many) {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(
            row.traceparent.as_deref(),
            Some(expected.as_str()),
            "job {id}"
        );
    }
    // A duplicate changes nothing of the job it found.
    let other = tracing::info_span!("another request");
    let duplicate = Enqueue::new(TtTraced {})
        .unique_key("k")
        .enqueue(&pool)
        .instrument(other)
        .await;
    assert!(matches!(
        duplicate,
        Err(job::EnqueueError::Duplicate { .. })
    ));
    let row = store.get(unique).await.unwrap().unwrap();
    assert_eq!(row.traceparent.as_deref(), Some(expected.as_str()));
    db.close().await;
}
