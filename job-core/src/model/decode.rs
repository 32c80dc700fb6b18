//! Why a payload does not decode, told without quoting it: the path of the offending field and
//! what was expected there, never the value found. A decode error is logged at ERROR and kept
//! in the job's error history, where a secret that slipped into a payload must not follow it
//! (`invalid type: string "sk_live_…", expected i64` is serde_json's own wording).
//!
//! serde_json's errors are plain text with the value inside, so the payload is decoded a
//! second time, only when the first decode failed, through [`ValueDe`]: a deserializer over the
//! parsed `serde_json::Value` whose error type keeps the *kind* of the unexpected value and
//! drops the value. `serde_path_to_error` adds the path. (No maintained crate offers a
//! deserializer over `serde_json::Value` with an error type of one's own; `ValueDe` is the
//! small part of one that the redaction needs.)

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, Expected, IntoDeserializer, Unexpected,
    VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// Why `payload` (JSON text that `serde_json` failed to decode into `T` with `error`) does not
/// decode, without any of its values: the JSON syntax error, or the path and the expected type.
pub(crate) fn explain<T: DeserializeOwned>(payload: &str, error: &serde_json::Error) -> String {
    if error.is_syntax() || error.is_eof() || error.is_io() {
        // serde_json's syntax errors name a position, never the text.
        return error.to_string();
    }
    match serde_json::from_str::<Value>(payload) {
        Ok(value) => explain_value::<T>(&value).unwrap_or_else(|| {
            format!(
                "a value does not fit its field (line {} column {})",
                error.line(),
                error.column()
            )
        }),
        Err(e) => e.to_string(),
    }
}

/// Why `value` does not decode into `T`, or `None` if it does here (where serde_json did not:
/// the caller then says less).
pub(crate) fn explain_value<T: DeserializeOwned>(value: &Value) -> Option<String> {
    match serde_path_to_error::deserialize::<_, T>(ValueDe(value)) {
        Ok(_) => None,
        Err(e) => {
            let mut segments: Vec<&serde_path_to_error::Segment> = e.path().iter().collect();
            let reason = &e.inner().0;
            // The path's last segment is then the unknown name itself (a key of the payload,
            // which may be a secret: `{"sk_live_…": 1}`), withheld as its value is.
            if reason.starts_with("unknown field")
                && matches!(
                    segments.last(),
                    Some(serde_path_to_error::Segment::Map { .. })
                )
            {
                segments.pop();
            }
            let path = shown_path(&segments);
            let reason = e.into_inner().0;
            Some(if path.is_empty() {
                reason
            } else {
                format!("at `{path}`: {reason}")
            })
        }
    }
}

/// `segments` written as `serde_path_to_error` writes a path (`a.b[2].c`), empty for none.
fn shown_path(segments: &[&serde_path_to_error::Segment]) -> String {
    let mut path = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 && !matches!(segment, serde_path_to_error::Segment::Seq { .. }) {
            path.push('.');
        }
        path.push_str(&segment.to_string());
    }
    path
}

/// A decode error that names what was expected and the kind of what was found, not its value.
#[derive(Debug)]
pub(crate) struct Redacted(String);

impl fmt::Display for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Redacted {}

/// What kind of value `unexpected` is, without the value.
fn kind(unexpected: Unexpected<'_>) -> &'static str {
    match unexpected {
        Unexpected::Bool(_) => "a boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) => "an integer",
        Unexpected::Float(_) => "a floating-point number",
        Unexpected::Char(_) => "a character",
        Unexpected::Str(_) => "a string",
        Unexpected::Bytes(_) => "bytes",
        Unexpected::Unit => "null",
        Unexpected::Option => "an optional value",
        Unexpected::NewtypeStruct => "a newtype struct",
        Unexpected::Seq => "an array",
        Unexpected::Map => "an object",
        Unexpected::Enum => "an enum",
        Unexpected::UnitVariant => "a unit variant",
        Unexpected::NewtypeVariant => "a newtype variant",
        Unexpected::TupleVariant => "a tuple variant",
        Unexpected::StructVariant => "a struct variant",
        Unexpected::Other(_) => "another value",
    }
}

impl de::Error for Redacted {
    fn custom<T: fmt::Display>(_message: T) -> Self {
        // A type's own message may quote the value (uuid and url parsers do): withheld.
        Redacted(
            "invalid value (the decoder's own message is withheld: it may quote the value)".into(),
        )
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Redacted(format!(
            "invalid type: {}, expected {expected}",
            kind(unexpected)
        ))
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Redacted(format!(
            "invalid value: {}, expected {expected}",
            kind(unexpected)
        ))
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> Self {
        Redacted(format!("invalid length {len}, expected {expected}"))
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        Redacted(format!(
            "unknown variant, expected one of {}",
            listed(expected)
        ))
    }

    fn unknown_field(_field: &str, expected: &'static [&'static str]) -> Self {
        Redacted(format!(
            "unknown field, expected one of {}",
            listed(expected)
        ))
    }

    fn missing_field(field: &'static str) -> Self {
        Redacted(format!("missing field `{field}`"))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Redacted(format!("duplicate field `{field}`"))
    }
}

fn listed(names: &[&str]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A deserializer over a parsed JSON value, with [`Redacted`] errors; it hands values to
/// visitors as `serde_json`'s own `Value` deserializer does.
#[derive(Clone, Copy)]
struct ValueDe<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, Redacted> for ValueDe<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = Redacted;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Redacted> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => {
                let mut seq = de::value::SeqDeserializer::new(items.iter().map(ValueDe));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(map) => {
                let mut map = de::value::MapDeserializer::new(
                    map.iter().map(|(k, v)| (k.as_str(), ValueDe(v))),
                );
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Redacted> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Redacted> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Redacted> {
        match self.0 {
            Value::String(variant) => visitor.visit_enum(Variant(variant, None)),
            Value::Object(map) if map.len() == 1 => {
                let (variant, value) = map.iter().next().expect("one entry");
                visitor.visit_enum(Variant(variant, Some(value)))
            }
            Value::Object(_) => Err(de::Error::invalid_value(
                Unexpected::Map,
                &"an object with a single key",
            )),
            other => Err(de::Error::invalid_type(unexpected(other), &"an enum")),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Redacted> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Redacted> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Redacted> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        seq tuple tuple_struct map struct identifier
    }
}

/// The kind of a JSON value, for errors (never its content).
fn unexpected(value: &Value) -> Unexpected<'static> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(_) => Unexpected::Bool(false),
        Value::Number(_) => Unexpected::Unsigned(0),
        Value::String(_) => Unexpected::Str(""),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// An externally tagged enum: the variant's name and, unless it is a unit variant, its value.
struct Variant<'de>(&'de str, Option<&'de Value>);

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Redacted;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Redacted> {
        let name = seed.deserialize(de::value::BorrowedStrDeserializer::<Redacted>::new(self.0))?;
        Ok((name, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de> {
    type Error = Redacted;

    fn unit_variant(self) -> Result<(), Redacted> {
        match self.1 {
            None | Some(Value::Null) => Ok(()),
            Some(other) => Err(de::Error::invalid_type(
                unexpected(other),
                &"a unit variant",
            )),
        }
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Redacted> {
        match self.1 {
            Some(value) => seed.deserialize(ValueDe(value)),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Redacted> {
        match self.1 {
            Some(value) => de::Deserializer::deserialize_seq(ValueDe(value), visitor),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Redacted> {
        match self.1 {
            Some(value) => de::Deserializer::deserialize_map(ValueDe(value), visitor),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a struct variant",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::HashMap;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Charge {
        invoice_id: i64,
        card: Card,
        items: Vec<Item>,
        mode: Mode,
        note: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Card {
        last4: u16,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Item {
        sku: String,
        qty: u8,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Live,
        Test { key: String },
    }

    fn why(json: &str) -> String {
        let error = serde_json::from_str::<Charge>(json).expect_err(json);
        explain::<Charge>(json, &error)
    }

    const GOOD: &str = r#"{"invoice_id": 1, "card": {"last4": 4242}, "items": [{"sku": "a", "qty": 1}], "mode": "Live", "note": null}"#;

    #[test]
    fn an_unknown_fields_name_is_withheld_as_a_value_is() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            amount: i64,
            inner: Inner,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            n: i64,
        }
        let secret = "sk_live_51HxSECRET";
        let top = format!(r#"{{"amount": 5, "inner": {{"n": 1}}, "{secret}": 1}}"#);
        let nested = format!(r#"{{"amount": 5, "inner": {{"n": 1, "{secret}": 1}}}}"#);
        for (json, expected) in [
            (top, "unknown field, expected one of `amount`, `inner`"),
            (nested, "at `inner`: unknown field, expected one of `n`"),
        ] {
            let e = serde_json::from_str::<Strict>(&json).unwrap_err();
            let message = explain::<Strict>(&json, &e);
            assert_eq!(message, expected, "{json}");
        }
    }

    #[test]
    fn names_the_path_and_the_expected_type_never_the_value() {
        let secret = "sk_live_51HxSECRET";
        let cases = [
            (
                GOOD.replace(
                    r#""invoice_id": 1"#,
                    &format!(r#""invoice_id": "{secret}""#),
                ),
                "at `invoice_id`: invalid type: a string, expected i64",
            ),
            (
                GOOD.replace("4242", &format!(r#""{secret}""#)),
                "at `card.last4`: invalid type: a string, expected u16",
            ),
            (
                GOOD.replace(r#""qty": 1"#, r#""qty": 4000"#),
                "at `items[0].qty`: invalid value: an integer, expected u8",
            ),
            (
                GOOD.replace(r#""Live""#, &format!(r#""{secret}""#)),
                "at `mode`: unknown variant, expected one of `Live`, `Test`",
            ),
            (
                GOOD.replace(r#""Live""#, r#"{"Test": {"key": 7}}"#),
                "at `mode.Test.key`: invalid type: an integer, expected a string",
            ),
            (
                GOOD.replace(r#""note": null"#, &format!(r#""note": ["{secret}"]"#)),
                "at `note`: invalid type: an array, expected a string",
            ),
            (
                GOOD.replace(r#""invoice_id": 1, "#, ""),
                "missing field `invoice_id`",
            ),
            (
                format!(r#"["{secret}", 1]"#),
                "at `[0]`: invalid type: a string, expected i64",
            ),
        ];
        for (json, expected) in cases {
            let message = why(&json);
            assert_eq!(message, expected, "{json}");
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[test]
    fn custom_messages_which_may_quote_the_value_are_withheld() {
        #[derive(Debug)]
        struct Picky;
        impl<'de> Deserialize<'de> for Picky {
            fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Err(de::Error::custom(format!("bad token {s}")))
            }
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Holder {
            token: Picky,
        }
        let json = r#"{"token": "sk_live_x"}"#;
        let error = serde_json::from_str::<Holder>(json).unwrap_err();
        assert!(
            error.to_string().contains("sk_live_x"),
            "serde_json quotes it"
        );
        let message = explain::<Holder>(json, &error);
        assert!(
            message.starts_with("at `token`: invalid value"),
            "{message}"
        );
        assert!(!message.contains("sk_live_x"));
    }

    #[test]
    fn syntax_errors_and_map_keys_are_told_as_serde_json_tells_them() {
        let error = serde_json::from_str::<Charge>("{").unwrap_err();
        assert_eq!(explain::<Charge>("{", &error), error.to_string());
        let json = r#"{"a": "x"}"#;
        let error = serde_json::from_str::<HashMap<String, i32>>(json).unwrap_err();
        assert_eq!(
            explain::<HashMap<String, i32>>(json, &error),
            "at `a`: invalid type: a string, expected i32"
        );
    }
}
