//! `#[redact]` keeps a field's value out of the payload's `Debug`, and only out of that: the
//! value is still stored and decoded.
#![deny(warnings)]

use job::__private::serde_json;
use job::{job, JobContext, JobError};

/// Sends a receipt.
#[job]
async fn send_receipt(
    _ctx: JobContext,
    order_id: i64,
    /// Personal data: kept out of logs.
    #[redact]
    email: String,
    #[redact]
    #[serde(default)]
    r#type: Option<String>,
) -> Result<(), JobError> {
    let _ = (order_id, email, r#type);
    Ok(())
}

fn main() {
    let job = SendReceipt {
        order_id: 7,
        email: "ada@example.com".into(),
        r#type: Some("vip".into()),
    };
    assert_eq!(
        format!("{job:?}"),
        r#"SendReceipt { order_id: 7, email: <redacted>, type: <redacted> }"#
    );
    assert!(!format!("{job:#?}").contains("ada@example.com"));
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["email"], "ada@example.com");
}
