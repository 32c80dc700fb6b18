//! Times as the tables store them: INTEGER microseconds since the Unix epoch, UTC. "Now" is
//! always the database's (`sql/now.sql`), read once per transaction so that every statement
//! of it agrees.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::SqliteConnection;

use crate::error::Error;
use crate::sql;

/// Microseconds since the Unix epoch.
pub(crate) type Micros = i64;

/// The database's now.
pub(crate) async fn now(conn: &mut SqliteConnection) -> Result<Micros, Error> {
    sqlx::query_scalar(sql::NOW)
        .fetch_one(conn)
        .await
        .map_err(Error::query("now"))
}

/// `d` in microseconds, saturating.
pub(crate) fn micros(d: Duration) -> Micros {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// An instant as stored.
pub(crate) fn from_time(at: DateTime<Utc>) -> Micros {
    at.timestamp_micros()
}

/// A stored instant back as a time (out of range: the nearest representable).
pub(crate) fn to_time(us: Micros) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or(if us < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

/// `now + d`, saturating.
pub(crate) fn after(now: Micros, d: Duration) -> Micros {
    now.saturating_add(micros(d))
}
