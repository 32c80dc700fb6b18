//! A handler's progress (`JobContext::progress`): a fraction and a short message, or a small
//! JSON value, kept in memory and written with the lease keeper's next heartbeat, so that a
//! handler may report as often as it likes at the cost of a mutex and a small allocation.

use crate::model::text::storable_text;

/// The longest progress stored, in bytes of compact JSON with its numbers written out in full
/// (as the database stores them); a larger value is not stored (the previous one stays), and
/// a warning is logged.
pub const MAX_PROGRESS: usize = 1024;

/// The longest progress message stored, in bytes (cut there, without NUL characters).
pub const MAX_PROGRESS_MESSAGE: usize = 256;

/// The stored form of a progress report: `{"fraction": f, "message": m}`, the fraction
/// clamped to 0..=1 (a NaN is left out), the message made storable and cut to
/// [`MAX_PROGRESS_MESSAGE`].
pub(crate) fn fraction_json(fraction: f64, message: &str) -> String {
    let mut object = serde_json::Map::new();
    if !fraction.is_nan() {
        object.insert(
            "fraction".into(),
            serde_json::json!(fraction.clamp(0.0, 1.0)),
        );
    }
    if !message.is_empty() {
        let message = storable_text(message, MAX_PROGRESS_MESSAGE);
        object.insert("message".into(), serde_json::json!(message));
    }
    serde_json::Value::Object(object).to_string()
}

/// The stored form of a progress value: its compact JSON, or why it is not stored: over
/// [`MAX_PROGRESS`] bytes, holding a NUL character (which PostgreSQL's `jsonb` refuses), or
/// nested deeper than [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) levels (which no operator's
/// read could take back).
pub(crate) fn value_json(value: &serde_json::Value) -> Result<String, String> {
    let text = value.to_string();
    let stored = crate::model::json_size::stored_len(&text);
    if stored > MAX_PROGRESS {
        return Err(format!(
            "it is {stored} bytes of JSON (numbers written out in full, as stored), over the \
             limit of {MAX_PROGRESS} bytes"
        ));
    }
    if crate::model::new_job::has_nul_escape(&text) {
        return Err("it holds a NUL character (\\u0000), which cannot be stored".into());
    }
    if let Some(problem) = crate::model::json_size::depth_problem(&text) {
        return Err(format!("it {problem}"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_bounded_and_storable() {
        assert_eq!(
            fraction_json(0.5, "half"),
            r#"{"fraction":0.5,"message":"half"}"#
        );
        assert_eq!(fraction_json(7.0, ""), r#"{"fraction":1.0}"#);
        assert_eq!(fraction_json(f64::NAN, "x"), r#"{"message":"x"}"#);
        let long = fraction_json(0.1, &"é\0".repeat(1000));
        assert!(long.len() <= MAX_PROGRESS_MESSAGE + 40, "{}", long.len());
        assert!(!long.contains("\\u0000"));
        assert!(value_json(&serde_json::json!({ "rows": 10 })).is_ok());
        assert!(value_json(&serde_json::json!("x".repeat(MAX_PROGRESS)))
            .unwrap_err()
            .contains("over the limit of 1024"));
        assert!(value_json(&serde_json::json!("a\0b"))
            .unwrap_err()
            .contains("NUL"));
        // A backslash followed by `u0000` is text, not a NUL.
        assert!(value_json(&serde_json::json!(r"C:\u0000")).is_ok());
        // 300 bytes, within the size limit, but nested past what serde_json reads back.
        let deep = (0..150).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
        assert!(
            value_json(&deep).unwrap_err().contains("nests 150 levels"),
            "nested past what serde_json reads back"
        );
        // 43 bytes as serde_json writes it, 2,115 with its numbers written out (2,121 as jsonb
        // prints it): over the table's CHECK, which refused the heartbeat's whole progress
        // batch with it.
        assert!(value_json(&serde_json::json!([
            1e300, 1e300, 1e300, 1e300, 1e300, 1e300, 1e300
        ]))
        .is_err());
    }
}
