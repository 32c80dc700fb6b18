//! The error history of a job: a JSON array of `{attempt, at, class, message}`, kept bounded
//! as job-postgres's `job.push_error` keeps it: the first entry and the latest ones,
//! [`MAX_ERROR_HISTORY`] in all. Written inside the immediate transaction that read it, so no
//! other writer comes between the read and the write.

use job_core::{storable_text, AttemptError, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE};

use crate::time::{to_time, Micros};

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
        let cut = entries.len() - MAX_ERROR_HISTORY;
        entries.drain(1..=cut);
    }
    serde_json::Value::Array(entries).to_string()
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
}
