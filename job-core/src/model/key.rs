//! Filling in a key template (`#[job(unique = "..", ordering = "..", rate_key = "..")]`) so that
//! two payloads with different values never share a key.
//!
//! A template of one placeholder writes its value as it is: the key is the literal text around
//! one value, which the value alone decides. A template of several placeholders joins values
//! with the text between them, so a value holding that text could pass for two others:
//! `"{a}:{b}"` gave `x:y:z` both for `a = "x:y", b = "z"` and for `a = "x", b = "y:z"`, and a
//! unique job was refused as the duplicate of a job it is not. There, in each value, `%` and
//! the first character of each text between two placeholders are written as `%` and two
//! upper-case hex digits per UTF-8 byte (`:` as `%3A`). A value then holds no character that
//! starts the text after it, so each value ends where that text starts, and is read back
//! whole. Values without such characters keep the key they had before. (Adjacent
//! placeholders, `"{a}{b}"`, could never be told apart, and the macro refuses them.)

use std::fmt::{Display, Write};

/// Builds one key from a template's pieces, in order. Used by `#[job]`'s generated code;
/// not a public API.
#[doc(hidden)]
pub struct KeyWriter {
    key: String,
    /// The characters written escaped in values (empty: values written as they are).
    escaped: &'static str,
    value: String,
}

impl KeyWriter {
    /// `ends`: the first character of each text between two placeholders (empty for a
    /// template of one placeholder).
    pub fn new(ends: &'static str) -> KeyWriter {
        KeyWriter {
            key: String::new(),
            escaped: ends,
            value: String::new(),
        }
    }

    /// Literal text of the template.
    pub fn text(&mut self, text: &str) {
        self.key.push_str(text);
    }

    /// A placeholder's value, formatted with `Display`.
    pub fn value(&mut self, value: &dyn Display) {
        if self.escaped.is_empty() {
            // Infallible: writing to a String.
            let _ = write!(self.key, "{value}");
            return;
        }
        self.value.clear();
        let _ = write!(self.value, "{value}");
        for c in self.value.chars() {
            if c == '%' || self.escaped.contains(c) {
                let mut bytes = [0; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    let _ = write!(self.key, "%{b:02X}");
                }
            } else {
                self.key.push(c);
            }
        }
    }

    /// The key.
    pub fn finish(self) -> String {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use super::KeyWriter;

    fn key(ends: &'static str, pieces: &[(&str, bool)]) -> String {
        let mut key = KeyWriter::new(ends);
        for (piece, is_value) in pieces {
            if *is_value {
                key.value(piece);
            } else {
                key.text(piece);
            }
        }
        key.finish()
    }

    /// `"{a}:{b}"`
    fn two(a: &str, b: &str) -> String {
        key(":", &[(a, true), (":", false), (b, true)])
    }

    #[test]
    fn values_holding_the_separator_no_longer_share_a_key() {
        assert_ne!(two("x:y", "z"), two("x", "y:z"));
        assert_eq!(two("x:y", "z"), "x%3Ay:z");
        assert_eq!(two("x", "y:z"), "x:y%3Az");
        // The escape character itself, so that `%3A` written by a value stays its own.
        assert_ne!(two("%3A", "z"), two(":", "z"));
        assert_eq!(two("100%", "z"), "100%25:z");
        // A separator beyond ASCII is escaped byte by byte.
        let arrow = key("→", &[("a→b", true), ("→", false), ("c", true)]);
        assert_eq!(arrow, "a%E2%86%92b→c");
    }

    #[test]
    fn ordinary_values_keep_their_keys() {
        assert_eq!(two("x", "z"), "x:z");
        // Text around one placeholder is not escaped in its value: the key is unchanged.
        let one = key("", &[("invoice:", false), ("a:b%", true)]);
        assert_eq!(one, "invoice:a:b%");
        let prefixed = key(
            "-",
            &[("tenant:", false), ("t:1", true), ("-", false), ("7", true)],
        );
        assert_eq!(prefixed, "tenant:t:1-7");
    }
}
