//! What the door tests share: the three doors, and what each says when it refuses.
#![allow(dead_code)]

use job::{EnqueueError, Job, JobContext, JobError, JobId, PgStore, Store};
use job_core::NewJob;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgDatabaseError;
use sqlx::PgPool;

/// A job whose payload is whatever JSON value it holds: what a hand-written `Job` with any
/// `Serialize` can send.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct AnyPayload(pub(crate) serde_json::Value);

impl Job for AnyPayload {
    const KIND: &'static str = "doors.any";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Rows in `job.jobs`.
pub(crate) async fn rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The option an enqueue refusal names: `InvalidOption`'s, or `payload` for a payload too
/// large. Panics on success or on any other error.
pub(crate) fn named(result: Result<JobId, EnqueueError>) -> String {
    match result {
        Err(EnqueueError::InvalidOption { option, .. }) => option.to_owned(),
        Err(EnqueueError::PayloadTooLarge { .. }) => "payload".to_owned(),
        other => panic!("expected a refusal naming an option, got {other:?}"),
    }
}

/// The same, through `Store::enqueue` (a `StoreError` wrapping the `EnqueueError`).
pub(crate) async fn named_by_store(store: &PgStore, job: NewJob) -> String {
    match store.enqueue(job).await {
        Ok(id) => panic!("the store accepted job {id}"),
        Err(e) => match e.enqueue_error() {
            Some(EnqueueError::InvalidOption { option, .. }) => (*option).to_owned(),
            Some(EnqueueError::PayloadTooLarge { .. }) => "payload".to_owned(),
            _ => panic!("expected a refusal naming an option, got {e}"),
        },
    }
}

/// A database error: its SQLSTATE and message.
pub(crate) fn db_error(error: sqlx::Error) -> (String, String) {
    let db = error
        .as_database_error()
        .unwrap_or_else(|| panic!("expected a database error, got {error}"));
    let pg = db.downcast_ref::<PgDatabaseError>();
    (pg.code().to_owned(), pg.message().to_owned())
}

/// Asserts that `statement` fails with `code` and a message or constraint naming `argument`.
pub(crate) async fn refused_by_sql(pool: &PgPool, statement: &str, code: &str, argument: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let db = error.as_database_error().expect("a database error");
    let pg = db.downcast_ref::<PgDatabaseError>();
    let names = pg.message().contains(&format!("`{argument}`"))
        || pg.column() == Some(argument)
        || pg.constraint() == Some(&format!("jobs_{argument}_check"));
    assert_eq!(pg.code(), code, "{statement}: {}", pg.message());
    assert!(
        names,
        "{statement}: expected the error to name `{argument}`, got {:?} (column {:?}, constraint {:?})",
        pg.message(),
        pg.column(),
        pg.constraint()
    );
}

/// `text` as a SQL string literal (E'' with every character escaped that needs it).
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::from("E'");
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('\'');
    out
}
