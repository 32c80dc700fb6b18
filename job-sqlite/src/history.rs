//! The error history of a job: a JSON array of `{attempt, at, class, message}`, kept bounded
//! as job-postgres's `job.push_error` keeps it: the first entry and the latest ones,
//! [`MAX_ERROR_HISTORY`] in all, each under [`MAX_ENTRY`] bytes. Written inside the immediate
//! transaction that read it, so no other writer comes between the read and the write.

use job_core::{storable_text, AttemptError, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE};

use crate::time::{to_time, Micros};

/// The most bytes of JSON an entry kept in a history may take (migration 0008 refuses a
/// history over 20 entries or 2 MiB; the store's own entries are under 50 KiB). An entry over
/// it, which only a raw write or a row stored before could hold, is cut (see [`cut`]).
pub(crate) const MAX_ENTRY: usize = 64 * 1024;

/// `entry` bounded: under [`MAX_ENTRY`] bytes as it is, else rebuilt from what it holds of an
/// [`AttemptError`] (attempt and time when they are a number and a string, class and message
/// cut to [`MAX_ERROR_MESSAGE`]).
fn cut(entry: serde_json::Value) -> serde_json::Value {
    if entry.to_string().len() <= MAX_ENTRY {
        return entry;
    }
    let text = |key: &str| {
        entry
            .get(key)
            .and_then(serde_json::Value::as_str)
            .map(|s| storable_text(s, MAX_ERROR_MESSAGE).into_owned())
    };
    serde_json::json!({
        "attempt": entry.get("attempt").filter(|a| a.is_number()),
        "at": entry.get("at").filter(|a| a.is_string()),
        "class": text("class"),
        "message": text("message"),
    })
}

/// `history` (JSON text) with one more entry, bounded. A history that does not parse (a raw
/// write put something else there) restarts with the entry.
pub(crate) fn push(history: &str, attempt: i32, at: Micros, class: &str, message: &str) -> String {
    let mut entries: Vec<serde_json::Value> = serde_json::from_str(history).unwrap_or_default();
    let entry = AttemptError {
        attempt,
        at: to_time(at),
        class: class.to_owned(),
        message: storable_text(message, MAX_ERROR_MESSAGE).into_owned(),
    };
    entries.push(serde_json::to_value(entry).unwrap_or(serde_json::Value::Null));
    if entries.len() > MAX_ERROR_HISTORY {
        let over = entries.len() - MAX_ERROR_HISTORY;
        entries.drain(1..=over);
    }
    serde_json::Value::Array(entries.into_iter().map(cut).collect()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_and_latest_entries() {
        let mut history = "[]".to_owned();
        for attempt in 1..=30 {
            history = push(&history, attempt, 0, "error", "boom");
        }
        let entries: Vec<AttemptError> = serde_json::from_str(&history).unwrap();
        let attempts: Vec<i32> = entries.iter().map(|e| e.attempt).collect();
        let mut expected = vec![1];
        expected.extend(12..=30);
        assert_eq!(attempts, expected);
    }

    #[test]
    fn cuts_an_entry_over_the_bound_and_keeps_what_it_holds() {
        let huge = serde_json::json!([{
            "attempt": 1, "at": "2026-01-01T00:00:00Z", "class": "error",
            "message": "m".repeat(3_000_000)
        }, "x".repeat(100_000)])
        .to_string();
        let history = push(&huge, 2, 0, "error", "boom");
        assert!(history.len() < 3 * MAX_ENTRY, "{} bytes", history.len());
        let entries: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0]["attempt"], 1);
        assert_eq!(entries[0]["class"], "error");
        let message = entries[0]["message"].as_str().unwrap();
        assert!(message.len() <= MAX_ERROR_MESSAGE && message.starts_with("mmm"));
        assert_eq!(entries[2]["message"], "boom");
    }
}
