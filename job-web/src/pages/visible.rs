//! Stored text as the pages show it. maud escapes markup; this escapes what markup escaping
//! leaves as it is and a reader cannot see: control characters (a terminal acts on an escape
//! sequence copied from a page), bidirectional controls (an RLO shows "\u{202E}gnp.exe" as
//! "exe.png", and an unterminated one reverses the rest of its line), line and paragraph
//! separators, zero-width and other format characters. Each is written as a visible escape:
//! `\u{202e}` in text, as the CLI's tables write them (`job-cli`'s `printable`), and `\u202e`
//! inside JSON, which stays JSON.
//!
//! Every page passes through [`page`] (`layout::page` calls it), so no page can miss it; the
//! JSON a page shows is written by [`Pretty`], since `\u{..}` would not be JSON.

use std::io::{self, Write};

use serde_json::ser::{Formatter, PrettyFormatter};

/// Whether `c` is shown as an escape: a control character but the newline and the tab (which
/// lay out a message or a trace in a `<pre>`), or a format character (see [`format`]).
pub(crate) fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || format(c)
}

/// The format characters (Unicode Cf: bidirectional controls, zero-width characters, the soft
/// hyphen, the BOM, tag characters, ...) and the line and paragraph separators (Zl, Zp): the
/// ranges of `job::FORBIDDEN_IN_NAMES` that are neither controls nor spaces.
fn format(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}'
        | '\u{890}'..='\u{891}' | '\u{8e2}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
        | '\u{110bd}' | '\u{110cd}' | '\u{13430}'..='\u{1343f}' | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}' | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// `html`, a page as maud wrote it, with every [`hidden`] character of its text written as
/// `\u{..}` (a carriage return as `\r`). Its text only: attribute values are data (links,
/// which carry names percent-encoded, and hidden fields, which a form sends back as they
/// were). maud escapes every `<` and `>` of a value, so a tag runs from `<` to the next `>`.
pub(crate) fn page(html: String) -> String {
    if !html.chars().any(hidden) {
        return html;
    }
    let mut out = String::with_capacity(html.len() + 64);
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ => {}
        }
        match c {
            '\r' if !in_tag => out.push_str("\\r"),
            c if !in_tag && hidden(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// `json`, JSON text, with every [`hidden`] character written as its JSON escape, as
/// [`Pretty`] writes them: such a character can stand only inside a string, where the escape
/// means the same, so the text stays the same JSON.
pub(crate) fn json_text(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if hidden(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// serde_json's pretty printer, but for strings: a [`hidden`] character in one (a key or a
/// value) is written as its JSON escape (`\u202e`; a pair of them past U+FFFF) rather than as
/// itself, so that the text is the same JSON and shows it. serde_json escapes the C0 controls
/// itself.
pub(crate) struct Pretty(PrettyFormatter<'static>);

impl Pretty {
    pub(crate) fn new() -> Pretty {
        Pretty(PrettyFormatter::new())
    }
}

impl Formatter for Pretty {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        writer.write_all(json_text(fragment).as_bytes())
    }

    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_shows_hidden_characters_as_escapes_and_leaves_tags_alone() {
        let html = "<p title=\"a\u{202e}b\">\u{202e}gnp.exe\r\n\tx\u{200b}\u{1b}[1m\u{e0041}</p>";
        assert_eq!(
            page(html.to_owned()),
            "<p title=\"a\u{202e}b\">\\u{202e}gnp.exe\\r\n\tx\\u{200b}\\u{1b}[1m\\u{e0041}</p>"
        );
        let plain = "<p>очередь · ≥ 5 … — «a»</p>".to_owned();
        assert_eq!(page(plain.clone()), plain);
    }

    #[test]
    fn json_stays_json_and_shows_hidden_characters_as_json_escapes() {
        let value =
            serde_json::json!({ "a\u{2028}": ["\u{202e}x\u{7f}\u{85}\u{1b}", "\u{e0041}é"] });
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, Pretty::new());
        serde::Serialize::serialize(&value, &mut ser).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\n  \"a\\u2028\": [\n    \"\\u202ex\\u007f\\u0085\\u001b\",\n    \"\\udb40\\udc41é\"\n  ]\n}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
    }
}
