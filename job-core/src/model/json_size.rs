//! How long JSON text is once the database has stored it as `jsonb`.
//!
//! `jsonb` keeps numbers as `numeric`, which prints them in full: serde_json's `1e300` (5
//! bytes) comes back as a 1 followed by 300 zeros. Limits counted on serde_json's text would
//! let a small value through that the database's CHECK on the stored text then refuses, after
//! the work it records was done. So results, progress and step outputs are measured here, on
//! the text with every number written as `numeric` writes it. Hand-written: serde_json has no
//! such length, and a second parse to `numeric`'s rules is all it takes.

/// The length of `json` (compact JSON as serde_json writes it) with every number written out
/// in full, as PostgreSQL's `numeric` prints it: no exponent, as many decimals as the number
/// has after its exponent is applied.
pub(crate) fn stored_len(json: &str) -> usize {
    let bytes = json.as_bytes();
    let mut len = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // A string, escapes included, is stored as written.
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                len += i - start;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                len = len.saturating_add(number_len(&json[start..i]));
            }
            _ => {
                len += 1;
                i += 1;
            }
        }
    }
    len
}

/// The deepest a stored JSON value may nest (arrays and objects within one another): under
/// serde_json's own limit of 128 levels, past which nothing written with it reads the value
/// back (a handler its payload, an operator's listing its result).
pub const MAX_JSON_DEPTH: usize = 100;

/// How deep the arrays and objects of `json` (valid JSON text) nest: 0 for a scalar, 1 for
/// `{}` or `[1]`. Hand-written for the reason above: serde_json says only that it gave up.
pub(crate) fn depth(json: &str) -> usize {
    let bytes = json.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// Why `json` nests too deep to be stored, or `None`.
pub(crate) fn depth_problem(json: &str) -> Option<String> {
    let depth = depth(json);
    (depth > MAX_JSON_DEPTH).then(|| {
        format!(
            "nests {depth} levels deep, over the limit of {MAX_JSON_DEPTH}: serde_json reads \
             128 at most, so it could not be read back"
        )
    })
}

/// Why `json` (text already known to nest at most [`MAX_JSON_DEPTH`] levels) is not JSON that
/// every reader of the payload reads the same way, or `None`: a syntax error, a string that is
/// not Unicode (a lone surrogate escape such as `\ud800`), a number beyond an `f64` (`1e400`),
/// or an object with a key twice. PostgreSQL's `jsonb` keeps a repeated key's last value and
/// SQLite keeps the text, whose handler then fails on the duplicate field, so the same payload
/// would run on one backend and be discarded as poison on the other; serde_json, which every
/// handler reads with, refuses the rest. The key is named, cut to 64 bytes.
pub(crate) fn json_problem(json: &str) -> Option<String> {
    use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess};

    /// Accepts any JSON value whose objects hold each key once.
    struct Unique;

    impl<'de> DeserializeSeed<'de> for Unique {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Unique)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if !seen.insert(key.clone()) {
                    let end = (0..=64.min(key.len()))
                        .rev()
                        .find(|&i| key.is_char_boundary(i))
                        .unwrap_or(0);
                    let more = if end < key.len() { "…" } else { "" };
                    return Err(A::Error::custom(format!(
                        "holds the key `{}{more}` twice in one object",
                        &key[..end]
                    )));
                }
                map.next_value_seed(Unique)?;
            }
            Ok(())
        }
    }

    let mut de = serde_json::Deserializer::from_str(json);
    let checked = Unique.deserialize(&mut de).and_then(|()| de.end());
    checked
        .err()
        .map(|e| format!("is not JSON every reader reads alike: {e}"))
}

/// Why `json` (valid JSON text) holds a string that is not Unicode, or `None`: an escaped
/// lone surrogate, a `\uD800`-`\uDBFF` not followed by a `\uDC00`-`\uDFFF` escape, or a
/// `\uDC00`-`\uDFFF` not preceded by one, in a string or a key. PostgreSQL's `jsonb` refuses
/// it (`invalid input syntax for type json`), and serde_json reads it back into no string.
/// Only raw text carries one (a `serde_json::value::RawValue`): serde_json writes every
/// Rust string as Unicode.
pub(crate) fn lone_surrogate(json: &str) -> Option<String> {
    let bytes = json.as_bytes();
    let unit = |at: usize| -> Option<u16> {
        let hex = bytes.get(at..at + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) if matches!(unit(i + 6), Some(0xDC00..=0xDFFF)) => i += 12,
            Some(0xD800..=0xDFFF) => {
                return Some(format!(
                    "holds the lone surrogate escape `{}`, which is not Unicode: PostgreSQL's \
                     jsonb refuses it",
                    &json[i..i + 6]
                ))
            }
            Some(_) => i += 6,
            // Any other escape: the backslash and the character it escapes.
            None => i += 2,
        }
    }
    None
}

/// The length of the JSON number `n` as `numeric` prints it.
fn number_len(n: &str) -> usize {
    let (negative, n) = match n.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, n),
    };
    let (mantissa, exponent) = match n.find(['e', 'E']) {
        Some(at) => (&n[..at], n[at + 1..].parse::<i64>().unwrap_or(0)),
        None => (n, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // `numeric` keeps the decimals the text had, less the exponent: 1.5e-10 has 11.
    let scale = (frac.len() as i64).saturating_sub(exponent).max(0);
    // Integer digits: those of the mantissa moved by the exponent, without leading zeros.
    let point = (int.len() as i64).saturating_add(exponent);
    let significant_from = int
        .bytes()
        .chain(frac.bytes())
        .position(|c| c != b'0')
        .map_or(i64::MAX, |z| z as i64);
    let int_len = (point - significant_from).max(1);
    let total = i64::from(negative) + int_len + if scale > 0 { 1 + scale } else { 0 };
    usize::try_from(total).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::lone_surrogate;

    #[test]
    fn lone_surrogate_escapes_are_found_in_strings_and_keys() {
        for json in [
            r#""\ud83d\ude00""#,
            r#""\uD83D\uDE00 and \u00e9""#,
            r#""\\ud800""#,
            r#"{"a\\":"\\udc00"}"#,
            r#""😀 \n \"""#,
        ] {
            assert_eq!(lone_surrogate(json), None, "{json}");
        }
        for (json, escape) in [
            (r#""\ud800""#, r"\ud800"),
            (r#"{"\ud800":1}"#, r"\ud800"),
            (r#""\udc00""#, r"\udc00"),
            (r#""x\uDBFFy""#, r"\uDBFF"),
            (r#""\ud800\ud800""#, r"\ud800"),
            (r#""\ude00\ud83d""#, r"\ude00"),
            (r#""\\\ud800""#, r"\ud800"),
            (r#""\ud800\n""#, r"\ud800"),
        ] {
            let problem = lone_surrogate(json).unwrap_or_default();
            assert!(
                problem.contains(&format!("lone surrogate escape `{escape}`")),
                "{json}: {problem}"
            );
        }
    }

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_containers_not_brackets_in_strings() {
        assert_eq!(depth("1"), 0);
        assert_eq!(depth(r#"{"a":[1,{"b":[]}]}"#), 4);
        assert_eq!(depth(r#"{"a":"[[[{{\"]]"}"#), 1);
        assert_eq!(depth(&nested(300)), 300);
        assert!(depth_problem(&nested(MAX_JSON_DEPTH)).is_none());
        assert!(depth_problem(&nested(MAX_JSON_DEPTH + 1)).is_some());
    }

    #[test]
    fn what_the_depth_bound_lets_through_serde_json_reads_back() {
        assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_JSON_DEPTH)).is_ok());
        // And the bound is there for a reason: serde_json gives up not far above it.
        assert!(serde_json::from_str::<serde_json::Value>(&nested(129)).is_err());
    }

    use super::*;

    #[test]
    fn numbers_are_measured_as_numeric_prints_them() {
        // (serde_json's text, PostgreSQL's `SELECT 'n'::jsonb::text`)
        for (json, stored) in [
            ("0", "0"),
            ("7", "7"),
            ("-12", "-12"),
            ("1.5", "1.5"),
            ("1.0", "1.0"),
            ("0.25", "0.25"),
            ("1e3", "1000"),
            ("1.5e2", "150"),
            ("1.234e2", "123.4"),
            ("1.5e-10", "0.00000000015"),
            ("-2.5e-3", "-0.0025"),
            ("0.5e3", "500"),
        ] {
            assert_eq!(number_len(json), stored.len(), "{json}");
        }
        assert_eq!(number_len("1e300"), 301);
        assert_eq!(number_len("1.7976931348623157e308"), 309);
        assert_eq!(number_len("5e-324"), 2 + 324);
    }

    #[test]
    fn strings_and_structure_count_as_written() {
        assert_eq!(stored_len(r#"{"a":[1,2]}"#), r#"{"a":[1,2]}"#.len());
        assert_eq!(
            stored_len(r#"["1e300","x\"1e9"]"#),
            r#"["1e300","x\"1e9"]"#.len()
        );
        assert_eq!(stored_len("[1e3,true,null]"), "[1000,true,null]".len());
        assert_eq!(
            stored_len(&serde_json::to_string(&[1e300f64; 2]).unwrap()),
            2 * 301 + 3
        );
    }
}
