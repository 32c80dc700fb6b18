//! What a job's parameters and return type may be.
#![deny(warnings)]

use std::collections::BTreeMap;

use job::__private::serde_json;
use job::{job, Job, JobContext};

/// An application's own error: any `std::error::Error` converts into a retryable `JobError`.
#[derive(Debug)]
struct SmtpDown;

impl std::fmt::Display for SmtpDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("smtp down")
    }
}

impl std::error::Error for SmtpDown {}

/// Parameters with `mut`, doc comments and serde attributes; an error of the application's own.
#[job]
async fn send_digest(
    _context: job::JobContext,
    /// Who gets the digest.
    mut to: String,
    /// Added in a later release: older payloads decode without it.
    #[serde(default)]
    cc: Vec<String>,
    #[serde(rename = "n")] count: u32,
    headers: BTreeMap<String, String>,
) -> Result<(), SmtpDown> {
    to.push('!');
    if to.is_empty() && cc.is_empty() && count == 0 && headers.is_empty() {
        return Err(SmtpDown);
    }
    Ok(())
}

/// `std::io::Result<()>` is a `Result` too.
#[job]
async fn write_file(_ctx: JobContext, r#type: String) -> std::io::Result<()> {
    let _ = r#type;
    Ok(())
}

/// A payload field may be called `ctx`: the generated code's own names never clash with it.
#[job]
async fn clash(_context: JobContext, ctx: u32, this: u32) -> Result<(), job::JobError> {
    let _ = (ctx, this);
    Ok(())
}

#[cfg(any())]
#[job]
async fn compiled_out(_ctx: JobContext) -> Result<(), job::JobError> {
    Ok(())
}

fn main() {
    let old: SendDigest =
        serde_json::from_str(r#"{ "to": "ada", "n": 2, "headers": {} }"#).unwrap();
    assert!(old.cc.is_empty());
    assert_eq!(old.count, 2);
    assert_eq!(WriteFile::KIND, "write_file");
    let json = serde_json::to_value(WriteFile {
        r#type: "csv".into(),
    })
    .unwrap();
    assert_eq!(json, serde_json::json!({ "type": "csv" }));
    let _ = old.queue("digests");
    let _ = Clash { ctx: 1, this: 2 }.priority(1);
}
