//! Finds a float JSON cannot hold in a value about to be serialized.
//!
//! serde_json writes NaN and the infinities as `null` without a word, so a payload, a result
//! or a step output holding one would be stored as something else: a field of type `f64` then
//! no longer decodes (the job is discarded as poison), and an `Option<f64>` reads back as `None`
//! (the job runs on other data). [`non_finite`] walks the value through its `Serialize` impl,
//! the way serde_json will, and names the path of the first such float, so that the door
//! refuses it instead.
//!
//! Hand-written: serde_json offers no switch for it (its `Formatter` is told `null` for these
//! floats, as for `None`), and no maintained crate does this one check.

use std::fmt;

use serde::ser::{self, Serialize};

/// The path (`items[3].ratio`, `` (the value itself) ) and the value of the first NaN or
/// infinite float in `value`, as serde_json would serialize it; `None` when it has none (or
/// does not serialize: serde_json says why when it is serialized).
pub(crate) fn non_finite<T: Serialize + ?Sized>(value: &T) -> Option<(String, f64)> {
    match value.serialize(Probe) {
        Err(Found::NonFinite { path, value }) => Some((path.render(), value)),
        _ => None,
    }
}

/// How a non-finite float at `path` is said.
pub(crate) fn describe(path: &str, value: f64) -> String {
    let what = if value.is_nan() { "NaN" } else { "an infinity" };
    if path.is_empty() {
        format!("it is {what}, which JSON cannot hold (it would be stored as null)")
    } else {
        format!("`{path}` is {what}, which JSON cannot hold (it would be stored as null)")
    }
}

/// The path to the float, innermost segment first while it unwinds.
#[derive(Debug, Default)]
struct Path(Vec<Segment>);

#[derive(Debug)]
enum Segment {
    Field(&'static str),
    Index(usize),
    Key(String),
}

impl Path {
    fn render(&self) -> String {
        let mut out = String::new();
        for segment in self.0.iter().rev() {
            match segment {
                Segment::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
                Segment::Key(key) => out.push_str(&format!("[{key}]")),
            }
        }
        out
    }
}

/// Why the walk stopped.
#[derive(Debug)]
enum Found {
    NonFinite {
        path: Path,
        value: f64,
    },
    /// The value's own `Serialize` failed: serde_json will say so.
    Other,
}

impl Found {
    fn within(self, segment: Segment) -> Found {
        match self {
            Found::NonFinite { mut path, value } => {
                path.0.push(segment);
                Found::NonFinite { path, value }
            }
            other => other,
        }
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::NonFinite { path, value } => f.write_str(&describe(&path.render(), *value)),
            Found::Other => f.write_str("the value does not serialize"),
        }
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Found::Other
    }
}

/// The walk: every method accepts what it is given but a non-finite float.
#[derive(Clone, Copy)]
struct Probe;

fn float(value: f64) -> Result<(), Found> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(Found::NonFinite {
            path: Path::default(),
            value,
        })
    }
}

/// A compound value being walked: the index of its next element.
struct Compound {
    next: usize,
    /// A map's key as JSON text, for the path.
    key: Option<String>,
}

impl Compound {
    fn new() -> Compound {
        Compound { next: 0, key: None }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let i = self.next;
        self.next += 1;
        value
            .serialize(Probe)
            .map_err(|e| e.within(Segment::Index(i)))
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), Found> {
        value
            .serialize(Probe)
            .map_err(|e| e.within(Segment::Field(name)))
    }
}

impl ser::Serializer for Probe {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Compound;
    type SerializeTuple = Compound;
    type SerializeTupleStruct = Compound;
    type SerializeTupleVariant = Compound;
    type SerializeMap = Compound;
    type SerializeStruct = Compound;
    type SerializeStructVariant = Compound;

    fn serialize_bool(self, _: bool) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        Compound::new().field(variant, value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound, Found> {
        Ok(Compound::new())
    }
}

impl ser::SerializeSeq for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeMap for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Found> {
        // A map key JSON can hold is a string or a number; said as serde_json writes it.
        self.key = serde_json::to_string(key).ok();
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let key = self.key.take().unwrap_or_else(|| "?".to_owned());
        value
            .serialize(Probe)
            .map_err(|e| e.within(Segment::Key(key)))
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Reading {
        name: String,
        values: Vec<f64>,
        limit: Option<f32>,
        by_key: BTreeMap<String, f64>,
    }

    fn reading() -> Reading {
        Reading {
            name: "r".into(),
            values: vec![1.0, 2.5],
            limit: Some(3.0),
            by_key: BTreeMap::from([("a".to_owned(), 1.0)]),
        }
    }

    #[test]
    fn finite_values_pass_and_each_non_finite_one_is_named_by_its_path() {
        assert!(non_finite(&reading()).is_none());
        let mut r = reading();
        r.values[1] = f64::NAN;
        let (path, value) = non_finite(&r).unwrap();
        assert_eq!(path, "values[1]");
        assert!(value.is_nan());
        let mut r = reading();
        r.limit = Some(f32::INFINITY);
        assert_eq!(non_finite(&r).unwrap().0, "limit");
        let mut r = reading();
        r.by_key.insert("b".into(), f64::NEG_INFINITY);
        assert_eq!(non_finite(&r).unwrap().0, "by_key[\"b\"]");
        assert_eq!(non_finite(&f64::NAN).unwrap().0, "");
        assert_eq!(
            describe("values[1]", f64::NAN),
            "`values[1]` is NaN, which JSON cannot hold (it would be stored as null)"
        );
        assert!(non_finite(&serde_json::json!({"x": [1, 2.5, null]})).is_none());
    }
}
