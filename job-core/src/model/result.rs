//! A job's result: the value a completed attempt leaves for the application and for
//! `Admin`, stored as compact JSON.

use serde::Serialize;

/// The largest result stored, in bytes of compact JSON with its numbers written out in full
/// (as the database stores them: `1e300` counts 301 bytes). A larger one is refused when the
/// handler sets it (the attempt fails with a terminal error naming the size), so a job's row
/// stays small however much its handler returns: keep large outputs in your own tables and
/// return their ids.
pub const MAX_RESULT: usize = 64 * 1024;

/// The stored form of `value`: its compact JSON, or why it cannot be stored (it does not
/// serialize, it is over [`MAX_RESULT`] bytes, or it holds a NUL character or, in raw JSON
/// text, a lone surrogate escape, which PostgreSQL's `jsonb` refuses).
pub(crate) fn result_json<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    let json = serde_json::to_string(value)
        .map_err(|e| format!("result: the value does not serialize to JSON: {e}"))?;
    if let Some((path, value)) = crate::model::finite::non_finite(value) {
        return Err(format!(
            "result: {}",
            crate::model::finite::describe(&path, value)
        ));
    }
    let stored = crate::model::json_size::stored_len(&json);
    if stored > MAX_RESULT {
        return Err(format!(
            "result: {stored} bytes of JSON (numbers written out in full, as stored), over the \
             limit of {MAX_RESULT}; store large outputs in your own tables and return their ids"
        ));
    }
    if crate::model::new_job::has_nul_escape(&json) {
        return Err("result: holds a NUL character (\\u0000), which cannot be stored".into());
    }
    if let Some(problem) = crate::model::json_size::lone_surrogate(&json) {
        return Err(format!("result: {problem}"));
    }
    if let Some(problem) = crate::model::json_size::depth_problem(&json) {
        return Err(format!("result: {problem}"));
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_json_with_a_lone_surrogate_escape_is_refused() {
        let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
        for (text, escape) in [
            (r#""\ud800""#, r"\ud800"),
            (r#"{"\ud800":1}"#, r"\ud800"),
            (r#"["ok","\udc00x"]"#, r"\udc00"),
        ] {
            let refused = result_json(&raw(text)).unwrap_err();
            assert_eq!(
                refused,
                format!(
                    "result: holds the lone surrogate escape `{escape}`, which is not Unicode: \
                     PostgreSQL's jsonb refuses it"
                ),
                "{text}"
            );
        }
        assert_eq!(
            result_json(&raw(r#""\ud83d\ude00""#)).unwrap(),
            r#""\ud83d\ude00""#
        );
    }

    #[test]
    fn results_are_compact_json_within_the_limit() {
        let deep = (0..150).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
        assert!(result_json(&deep).unwrap_err().contains("nests 150 levels"));
        assert_eq!(
            result_json(&json!({"a": [1, 2]})).unwrap(),
            r#"{"a":[1,2]}"#
        );
        assert_eq!(result_json(&7u32).unwrap(), "7");
        let big = "x".repeat(MAX_RESULT);
        let refused = result_json(&big).unwrap_err();
        assert!(refused.starts_with("result: 65538 bytes"), "{refused}");
        let fits = "x".repeat(MAX_RESULT - 2);
        assert_eq!(result_json(&fits).unwrap().len(), MAX_RESULT);
    }

    #[test]
    fn a_result_float_json_cannot_hold_is_refused() {
        let refused = result_json(&f64::NAN).unwrap_err();
        assert!(refused.starts_with("result: it is NaN"), "{refused}");
        let refused = result_json(&vec![Some(1.0), Some(f64::INFINITY)]).unwrap_err();
        assert!(refused.contains("`[1]` is an infinity"), "{refused}");
        assert_eq!(result_json(&vec![Some(1.5), None]).unwrap(), "[1.5,null]");
    }

    #[test]
    fn numbers_count_as_the_database_stores_them() {
        // 10,000 × 1e300: 60,001 bytes as serde_json writes it, over 3 MB as jsonb stores it
        // (the table's CHECK refused it after the job had run).
        let refused = result_json(&vec![1e300f64; 10_000]).unwrap_err();
        assert!(refused.starts_with("result: 3020001 bytes"), "{refused}");
        assert!(result_json(&vec![1.5f64; 10_000]).is_ok());
    }

    #[test]
    fn a_nul_is_refused_but_an_escaped_backslash_before_u0000_is_not() {
        assert!(result_json(&json!({"k": "a\u{0}b"})).is_err());
        assert!(result_json(&json!({"a\u{0}": 1})).is_err());
        assert_eq!(
            result_json(&json!("\\u0000")).unwrap(),
            r#""\\u0000""#,
            "a backslash followed by u0000 is text, not a NUL"
        );
    }

    #[test]
    fn a_value_that_does_not_serialize_is_refused_naming_the_result() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 1);
        let refused = result_json(&map).unwrap_err();
        assert!(
            refused.starts_with("result: the value does not serialize"),
            "{refused}"
        );
    }
}
