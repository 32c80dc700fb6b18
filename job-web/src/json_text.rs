//! JSON text laid out for people, from the text itself: a job's values as the database writes
//! them (`payload::text`) keep their numbers as stored, where a `serde_json::Value` keeps an
//! f64, an i64 or a u64. Written by hand because serde_json lays out only what it parsed into
//! its own numbers (exact numbers would need its `arbitrary_precision`, which changes how
//! every crate of the application that shares serde_json reads numbers); this only moves
//! whitespace, one character at a time, so it needs no stack however deep the value, and stops
//! at a bound.

/// `text`, JSON as PostgreSQL writes `jsonb` (valid, with a space after each `:` and `,`),
/// laid out with two spaces per level as serde_json's pretty printer does: at most about `max`
/// bytes, and whether all of it fit. The characters of strings are kept as they are.
pub fn pretty_json(text: &str, max: usize) -> (String, bool) {
    let mut out = String::with_capacity(text.len().min(max) + 64);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        if out.len() > max {
            return (out, false);
        }
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
                // An empty object or array stays on its line.
                if let Some(close) = chars.next_if(|&n| n == '}' || n == ']') {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::pretty_json;

    #[test]
    fn lays_out_as_serde_json_does_and_keeps_numbers_and_strings() {
        let text = r#"{"a": [1, 2.50, {}], "b": {"c": [], "d": "x, y: {z}\" ]"}, "n": 18446744073709551616}"#;
        let (pretty, whole) = pretty_json(text, usize::MAX);
        assert!(whole);
        assert_eq!(
            pretty,
            "{\n  \"a\": [\n    1,\n    2.50,\n    {}\n  ],\n  \"b\": {\n    \"c\": [],\n    \
             \"d\": \"x, y: {z}\\\" ]\"\n  },\n  \"n\": 18446744073709551616\n}"
        );
        // The same layout as serde_json's, where serde_json reads the numbers alike.
        let plain = r#"{"a": [1, {"b": null}], "c": "d"}"#;
        let value: serde_json::Value = serde_json::from_str(plain).unwrap();
        assert_eq!(
            pretty_json(plain, usize::MAX).0,
            serde_json::to_string_pretty(&value).unwrap()
        );
    }

    #[test]
    fn stops_at_its_bound() {
        let text = format!("[{}1]", "1, ".repeat(10_000));
        let (pretty, whole) = pretty_json(&text, 1000);
        assert!(!whole);
        assert!(pretty.len() <= 1000 + 16, "{}", pretty.len());
    }
}
