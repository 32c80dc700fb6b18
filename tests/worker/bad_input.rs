//! Bad input loses nothing: unknown kinds wait for a worker that knows them, poison payloads
//! are discarded with their reason, newer payload versions are left alone, and bad options
//! are refused at enqueue.

use std::time::Duration;

use job::{
    Backoff, EnqueueError, Job, JobContext, JobError, JobOptions, JobState, ReportRequest, Store,
};
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::durations::refused;

fn raw(kind: &str, payload: &str, version: i32) -> NewJob {
    NewJob {
        payload_version: version,
        max_attempts: 5,
        ..NewJob::new(kind, payload)
    }
}

#[tokio::test]
async fn unknown_kinds_stay_untouched() {
    let h = Harness::new().await;
    let stranger = h
        .store
        .enqueue(raw("billing.unknown", "{}", 1))
        .await
        .unwrap();
    let known = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(known, JobState::Completed).await;
    worker.shutdown().await;
    let row = h.row(stranger).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!(row.locked_by, None);
}

#[tokio::test]
async fn a_poison_payload_is_discarded_with_its_reason() {
    let h = Harness::new().await;
    let id = h
        .store
        .enqueue(raw("test.noop", r#"{"n":"not a number"}"#, 1))
        .await
        .unwrap();
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(
        h.ledger.runs(id),
        0,
        "the handler never sees a poison payload"
    );
    assert_eq!(row.attempt, 1, "discarded at once, not retried in a loop");
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "poison");
    assert!(
        row.errors[0].message.contains("does not decode"),
        "{}",
        row.errors[0].message
    );
    assert_eq!(
        row.payload["n"], "not a number",
        "the payload is kept for inspection"
    );
}

#[tokio::test]
async fn a_newer_payload_version_is_left_for_a_newer_worker() {
    let h = Harness::new().await;
    let newer = h
        .store
        .enqueue(raw("test.noop", r#"{"n":1}"#, 2))
        .await
        .unwrap();
    let current = enqueue(&h.store, Noop { n: 2 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(current, JobState::Completed).await;
    worker.shutdown().await;
    let row = h.row(newer).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
}

#[tokio::test]
async fn bad_options_are_refused_at_enqueue_and_nothing_is_written() {
    let h = Harness::new().await;
    let err = job::Enqueue::new(Noop { n: 1 })
        .queue("")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "queue",
                ..
            }
        ),
        "{err}"
    );
    let err = job::Enqueue::new(Noop { n: 1 })
        .priority(-3)
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "priority",
                ..
            }
        ),
        "{err}"
    );
    let huge = NewJob::build(
        &Noop { n: 1 },
        EnqueueOptions::default(),
        DEFAULT_PAYLOAD_LIMIT,
    )
    .map(|mut j| {
        j.payload = format!(r#"{{"n":1,"pad":"{}"}}"#, "x".repeat(DEFAULT_PAYLOAD_LIMIT));
        j
    })
    .unwrap();
    let err = h.store.enqueue(huge).await.unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

/// JSON nested `levels` deep: `[[..1..]]`, two bytes a level.
fn nested(levels: usize) -> serde_json::Value {
    (0..levels).fold(serde_json::json!(1), |v, _| serde_json::json!([v]))
}

/// Reports a progress value, then one nested 300 levels deep (600 bytes, within the size
/// limit), waits until a report is stored, then sets a result nested 200 levels deep.
#[derive(Debug, Serialize, Deserialize)]
struct DeepValues {}

impl Job for DeepValues {
    const KIND: &'static str = "test.deep_values";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(3),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let pool = ctx.state::<sqlx::PgPool>()?;
        ctx.progress_value(&serde_json::json!({"step": 1}));
        ctx.progress_value(&nested(300));
        // Until the lease keeper wrote a report (a heartbeat is a third of the lease).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let stored: Option<String> =
                sqlx::query_scalar("SELECT progress::text FROM job.jobs WHERE id = $1")
                    .bind(ctx.id())
                    .fetch_one(pool)
                    .await?;
            if stored.is_some() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(JobError::terminal("no progress report was ever stored"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ctx.set_result(&nested(200))?;
        Ok(())
    }
}

/// A handler's result or progress value nested deeper than serde_json reads back is not
/// stored: the result is refused with a terminal error naming it (the job a dead letter
/// saying why), the progress report is dropped (the previous one stays). Stored, either would
/// be a value no operator's read could take back.
#[tokio::test]
async fn a_result_or_progress_nested_too_deep_is_refused_naming_it() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, DeepValues {}).await;
    let worker = h
        .worker()
        .register::<DeepValues>()
        .state(h.store.pool().clone())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 1, "not retried");
    assert_eq!(row.result, None);
    assert_eq!(row.errors[0].class, "terminal");
    assert!(
        row.errors[0]
            .message
            .starts_with("result: nests 200 levels deep"),
        "{:?}",
        row.errors
    );
    assert_eq!(row.progress, Some(serde_json::json!({"step": 1})));
}

/// Holds any JSON value: decoding its payload reads the whole value.
#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    v: serde_json::Value,
}

impl Job for Holder {
    const KIND: &'static str = "test.holder";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<crate::common::Ledger>()?.record(&ctx);
        Ok(())
    }
}

/// A payload nested deeper than serde_json reads, which only SQL can store (the Rust doors
/// refuse it), is discarded at once as poison with serde_json's reason when its handler's type
/// reads the deep part: it stalls nothing. (A part the type ignores is skipped, at any depth.)
#[tokio::test]
async fn a_payload_stored_by_sql_too_deep_to_decode_is_discarded_as_poison() {
    let h = Harness::new().await;
    let deep = format!(r#"{{"v":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('test.holder', $1::jsonb)")
        .bind(&deep)
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    let after = enqueue(&h.store, Holder { v: nested(99) }).await;
    let worker = h.worker().register::<Holder>().build().unwrap().start();
    let row = h.reaches(id, JobState::Discarded).await;
    h.reaches(after, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(h.ledger.runs(id), 0, "the handler never sees it");
    assert_eq!((row.attempt, row.errors.len()), (1, 1));
    assert_eq!(row.errors[0].class, "poison");
    assert!(
        row.errors[0].message.contains("recursion limit"),
        "{}",
        row.errors[0].message
    );
}

/// A hand-written kind whose owner is empty: the store refuses to record it.
#[derive(Debug, Serialize, Deserialize)]
struct Unowned {}

impl Job for Unowned {
    const KIND: &'static str = "test.unowned";
    const OPTIONS: JobOptions = JobOptions {
        owner: Some(""),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hand_written_owner_the_store_cannot_record_is_refused_at_build() {
    let h = Harness::new().await;
    // What the reporter of a worker running `Unowned` sends on every pass: the store refuses
    // it, and with it the whole pass (no gauges, no reporter's role).
    let report = ReportRequest {
        holder: "w".into(),
        hold_for: Duration::from_secs(1),
        owners: vec![("test.unowned".into(), String::new())],
        read: true,
    };
    let answer = h.store.report(&report).await;
    assert!(answer.is_err(), "the store records no empty owner");
    let (option, message) = refused(h.worker().register::<Unowned>());
    assert_eq!(option, "owner", "{message}");
    assert!(message.contains("must be 1 to 128 bytes"), "{message}");
    assert!(message.contains("Unowned"), "{message}");
}

/// A hand-written kind whose backoff has no base: every retry would follow at once.
#[derive(Debug, Serialize, Deserialize)]
struct Hasty {}

impl Job for Hasty {
    const KIND: &'static str = "test.hasty";
    const OPTIONS: JobOptions = JobOptions {
        backoff: Backoff {
            base: Duration::ZERO,
            cap: Duration::ZERO,
        },
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hand_written_backoff_without_a_base_is_refused_at_build() {
    let h = Harness::new().await;
    let (option, message) = refused(h.worker().register::<Hasty>());
    assert_eq!(option, "backoff", "{message}");
    assert!(message.contains("`test.hasty`"), "{message}");
    assert!(message.contains("greater than zero"), "{message}");
}

/// A hand-written kind whose backoff cap is below its base: every delay is drawn from
/// `0..=cap`, so with a zero cap every retry follows at once.
#[derive(Debug, Serialize, Deserialize)]
struct Capped {}

impl Job for Capped {
    const KIND: &'static str = "test.capped";
    const OPTIONS: JobOptions = JobOptions {
        backoff: Backoff {
            base: Duration::from_secs(1),
            cap: Duration::ZERO,
        },
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hand_written_backoff_capped_below_its_base_is_refused_at_build() {
    let h = Harness::new().await;
    let backoff = Capped::OPTIONS.backoff;
    let mut rng = fastrand::Rng::with_seed(1);
    assert_eq!(
        backoff.delay(1, &mut rng),
        Duration::ZERO,
        "what such a kind would wait"
    );
    let (option, message) = refused(h.worker().register::<Capped>());
    assert_eq!(option, "backoff", "{message}");
    assert!(message.contains("`test.capped`"), "{message}");
    assert!(message.contains("below its base"), "{message}");
}

/// A hand-written kind with priority `P` and `A` attempts.
#[derive(Debug, Serialize, Deserialize)]
struct Numbered<const P: i16, const A: i32> {}

impl<const P: i16, const A: i32> Job for Numbered<P, A> {
    const KIND: &'static str = "test.numbered";
    const OPTIONS: JobOptions = JobOptions {
        priority: P,
        max_attempts: A,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hand_written_priority_or_attempts_every_enqueue_refuses_is_refused_at_build() {
    let h = Harness::new().await;
    // What every enqueue of such a kind meets, unless it overrides the option.
    let err = job::Enqueue::new(Numbered::<-1, 25> {})
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "priority",
                ..
            }
        ),
        "{err}"
    );
    let err = job::Enqueue::new(Numbered::<0, 0> {})
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "max_attempts",
                ..
            }
        ),
        "{err}"
    );
    let cases = [
        (
            h.worker().register::<Numbered<-1, 25>>(),
            "priority",
            "0 or more, got -1",
        ),
        (
            h.worker().register::<Numbered<{ i16::MIN }, 25>>(),
            "priority",
            "0 or more, got -32768",
        ),
        (
            h.worker().register::<Numbered<0, 0>>(),
            "max_attempts",
            "at least 1, got 0",
        ),
        (
            h.worker().register::<Numbered<0, { i32::MIN }>>(),
            "max_attempts",
            "at least 1, got -2147483648",
        ),
    ];
    for (builder, expected, words) in cases {
        let (option, message) = refused(builder);
        assert_eq!(option, expected, "{message}");
        assert!(message.contains("`test.numbered`"), "{message}");
        assert!(message.contains(words), "{message}");
    }
    // The bounds themselves are accepted.
    h.worker()
        .register::<Numbered<0, 1>>()
        .build()
        .expect("priority 0 and one attempt are allowed");
    h.worker()
        .register::<Numbered<{ i16::MAX }, { i32::MAX }>>()
        .build()
        .expect("the highest priority and attempts are allowed");
}

/// A hand-written kind of payload version 0, which no enqueue accepts.
#[derive(Debug, Serialize, Deserialize)]
struct Unversioned {}

impl Job for Unversioned {
    const KIND: &'static str = "test.unversioned";
    const VERSION: i32 = 0;

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hand_written_version_below_one_is_refused_at_build() {
    let h = Harness::new().await;
    let err = job::Enqueue::new(Unversioned {})
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "payload_version",
                ..
            }
        ),
        "{err}"
    );
    let (option, message) = refused(h.worker().register::<Unversioned>());
    assert_eq!(option, "version", "{message}");
    assert!(message.contains("`test.unversioned`"), "{message}");
    assert!(message.contains("at least 1, got 0"), "{message}");
}

/// Reports a progress value holding a backslash followed by `u0000` (text, not a NUL), and
/// waits until a report is stored.
#[derive(Debug, Serialize, Deserialize)]
struct WindowsPath {}

impl Job for WindowsPath {
    const KIND: &'static str = "test.windows_path";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(1),
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let pool = ctx.state::<sqlx::PgPool>()?;
        ctx.progress_value(&serde_json::json!({ "file": r"C:\u0000\report.csv" }));
        // Heartbeats come every third of the lease; a report refused is never stored.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stored: Option<String> =
                sqlx::query_scalar("SELECT progress::text FROM job.jobs WHERE id = $1")
                    .bind(ctx.id())
                    .fetch_one(pool)
                    .await?;
            if stored.is_some() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(JobError::terminal("no progress report was ever stored"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Only a NUL is refused in a progress value, not the text `\u0000` (an escaped backslash
/// before `u0000`), as in a result.
#[tokio::test]
async fn a_progress_value_with_a_backslash_before_u0000_is_stored() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, WindowsPath {}).await;
    let worker = h
        .worker()
        .register::<WindowsPath>()
        .state(h.store.pool().clone())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(
        row.progress,
        Some(serde_json::json!({ "file": r"C:\u0000\report.csv" }))
    );
}

/// Checked with a set (a scan of the queues before each took 8 s for 40,000 queues): a queue
/// listed twice is refused wherever the two are in the list, and thousands of distinct ones
/// are not.
#[tokio::test]
async fn a_queue_listed_twice_is_refused_at_build_however_far_apart() {
    let h = Harness::new().await;
    let queues = |n: usize| (0..n).fold(h.worker(), |w, i| w.queue(format!("q{i}"), 1));
    queues(4_000).build().expect("distinct queues are allowed");
    for twice in [
        queues(4_000).queue("q0", 1),
        queues(4_000).queue("q3999", 2),
        h.worker().queue("mail", 1).queue("mail", 1),
    ] {
        let (option, message) = refused(twice);
        assert_eq!(option, "queue", "{message}");
        assert!(message.contains("is listed twice"), "{message}");
    }
}
