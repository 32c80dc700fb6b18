//! Raw JSON text (a `serde_json::value::RawValue`) may hold an escaped lone surrogate, which
//! serde_json never writes and PostgreSQL's `jsonb` refuses. `JobContext::set_result` refuses
//! exactly what `jsonb` refuses, at once: accepted, a completed job became an `unstorable`
//! dead letter when its outcome was written.

use job::{Job, JobContext, JobError, Outcome};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Sets its raw text as its result.
#[derive(Debug, Serialize, Deserialize)]
struct SetsRaw {
    text: String,
}

impl Job for SetsRaw {
    const KIND: &'static str = "doors.sets_raw";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let raw = RawValue::from_string(self.text).expect("raw JSON text");
        ctx.set_result(&raw)
    }
}

#[tokio::test]
async fn set_result_refuses_the_surrogate_escapes_jsonb_refuses() {
    let db = TestDb::new().await;
    let pool = db.pool();
    for text in [
        r#""\ud83d\ude00""#,
        r#""\uD83D\uDE00""#,
        r#""\u00e9\u4e2d""#,
        r#""\\ud800""#,
        r#""\ud800""#,
        r#""\udbff""#,
        r#""\udc00""#,
        r#""\udfff""#,
        r#""\ud800\ud800""#,
        r#""\ude00\ud83d""#,
        r#""\ud800x""#,
        r#""\ud800\n""#,
        r#"{"\ud800":1}"#,
        r#"{"k":["ok","\udc00"]}"#,
    ] {
        let refused_here = match job_testkit::perform(SetsRaw { text: text.into() }).await {
            Outcome::Complete => None,
            Outcome::Discard { failure } => Some(failure.message),
            other => panic!("{text}: {other:?}"),
        };
        let refused_by_jsonb = sqlx::query("SELECT $1::text::jsonb")
            .bind(text)
            .execute(&pool)
            .await
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            refused_here.is_some(),
            refused_by_jsonb.is_some(),
            "{text}: set_result said {refused_here:?}, jsonb said {refused_by_jsonb:?}"
        );
        if let Some(refused) = refused_here {
            assert!(
                refused.contains("lone surrogate escape"),
                "{text}: {refused}"
            );
        }
    }
    db.close().await;
}
