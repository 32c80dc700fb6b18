//! Bounds on the texts the framework stores for a job: error messages and their history. Every
//! such text is made storable before it reaches a backend (no NUL character, which PostgreSQL
//! refuses in `text` and `jsonb`; at most a documented number of bytes), so that no message a
//! handler produces can make an outcome unwritable.

use std::borrow::Cow;

/// The longest error message stored in a job's history, in bytes. Longer messages (a handler's
/// error, a panic, a poison payload's reason, a cancel reason) are cut at a character
/// boundary and end with a note of how much was cut.
pub const MAX_ERROR_MESSAGE: usize = 8 * 1024;

/// The most entries a job's error history keeps: the first, and the latest
/// `MAX_ERROR_HISTORY - 1`. An entry beyond that drops the oldest but the first, so a job that
/// fails forever keeps a history of bounded size that still shows how it started.
pub const MAX_ERROR_HISTORY: usize = 20;

/// How many interrupted executions of a job ([`Release::interrupted`](crate::Release::interrupted):
/// a shutdown's drain, or a fence when the lease could not be renewed) are given back with
/// their attempts uncounted, counted since its enqueue or its last redrive. The release of one
/// more interrupted execution is refused: its lease runs out and the rescuer counts the attempt
/// (`lease_expired`), so that something that stops one job again and again (a job whose work
/// takes its database down, whose restart fences the execution) ends as a dead letter once its
/// attempts are spent, after at most `max_attempts + 10` executions, instead of running for
/// ever.
pub const MAX_REFUNDED_INTERRUPTIONS: u32 = 10;

/// How much of an application's `Display` output [`shown`] keeps: four stored messages' worth,
/// so that a stored message is still cut with its note, from text already bounded.
const MAX_SHOWN: usize = 4 * MAX_ERROR_MESSAGE;

/// `value` shown (its `Display`), at most about [`MAX_SHOWN`] bytes, ending with a note when
/// it went on. A handler's error is application code: one whose `Display` writes without end
/// would otherwise grow a string until the process is killed, and every lease of the process
/// with it.
pub(crate) fn shown(value: &dyn std::fmt::Display) -> String {
    use std::fmt::Write;

    /// Takes text up to [`MAX_SHOWN`] bytes, then refuses it, which stops a `write!`.
    struct Bounded {
        out: String,
        full: bool,
    }

    impl Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = MAX_SHOWN - self.out.len();
            if s.len() <= room {
                self.out.push_str(s);
                return Ok(());
            }
            self.out.push_str(&s[..floor_char_boundary(s, room)]);
            self.full = true;
            Err(std::fmt::Error)
        }
    }

    let mut bounded = Bounded {
        out: String::new(),
        full: false,
    };
    let _ = write!(bounded, "{value}");
    if bounded.full {
        bounded.out.push_str("… [cut: the message went on]");
    }
    bounded.out
}

/// A value shown (its `Display`) at most `max` bytes long, ending with a note when it went on:
/// how the framework logs an error that may carry a huge text (a driver's error quoting a row,
/// a trigger's message, an application's `Serialize` error). Writes straight to the formatter,
/// and stops the value's `Display` once `max` is reached, so a value that writes without end
/// is shown bounded too.
pub(crate) struct Capped<'a> {
    value: &'a dyn std::fmt::Display,
    max: usize,
}

/// `value` shown at most [`MAX_ERROR_MESSAGE`] bytes long (see [`Capped`]): every error the
/// framework logs goes through it (a [`StoreError`](crate::StoreError) shows itself so).
pub(crate) fn capped(value: &dyn std::fmt::Display) -> Capped<'_> {
    Capped {
        value,
        max: MAX_ERROR_MESSAGE,
    }
}

/// The note that ends a [`Capped`] value that went on.
const CAPPED_NOTE: &str = "… [cut: the message went on]";

impl std::fmt::Display for Capped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_capped(f, self.max, |w| write!(w, "{}", self.value))
    }
}

/// Writes to `f` what `write` writes, at most `max` bytes of it (cut at a character
/// boundary), then [`CAPPED_NOTE`] if it went on.
pub(crate) fn write_capped(
    f: &mut std::fmt::Formatter<'_>,
    max: usize,
    write: impl FnOnce(&mut dyn std::fmt::Write) -> std::fmt::Result,
) -> std::fmt::Result {
    /// Passes text on while there is room, then refuses it, which stops a `write!`.
    struct Room<'a, 'b> {
        f: &'a mut std::fmt::Formatter<'b>,
        room: usize,
        full: bool,
    }

    impl std::fmt::Write for Room<'_, '_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            if s.len() <= self.room {
                self.room -= s.len();
                return self.f.write_str(s);
            }
            let keep = floor_char_boundary(s, self.room);
            self.f.write_str(&s[..keep])?;
            self.room = 0;
            self.full = true;
            Err(std::fmt::Error)
        }
    }

    let mut room = Room {
        f,
        room: max,
        full: false,
    };
    let written = write(&mut room);
    if room.full {
        return room.f.write_str(CAPPED_NOTE);
    }
    written
}

/// `text` as it can be stored: NUL characters removed, and cut to at most `max` bytes at a
/// character boundary, ending with `… [N bytes cut]` when cut. Borrows when nothing changes.
///
/// ```
/// use job_core::storable_text;
/// assert_eq!(storable_text("fine", 100), "fine");
/// assert_eq!(storable_text("a\0b", 100), "ab");
/// let long = "x".repeat(1000);
/// let cut = storable_text(&long, 100);
/// assert!(cut.len() <= 100 && cut.ends_with("bytes cut]"));
/// ```
pub fn storable_text(text: &str, max: usize) -> Cow<'_, str> {
    if !text.contains('\0') {
        return cut(text, max);
    }
    let text = text.replace('\0', "");
    if text.len() <= max {
        return Cow::Owned(text);
    }
    Cow::Owned(cut(&text, max).into_owned())
}

/// `text` cut to at most `max` bytes at a character boundary, ending with `… [N bytes cut]`
/// when cut, as [`storable_text`] cuts it, but with its NUL characters kept. Borrows when
/// nothing changes.
pub(crate) fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    // The note is at most this long: "… [" + 20 digits + " bytes cut]".
    const NOTE_MAX: usize = 40;
    let keep = floor_char_boundary(text, max.saturating_sub(NOTE_MAX));
    let note = format!("… [{} bytes cut]", text.len() - keep);
    if keep + note.len() > max {
        // `max` is too small for a note: cut without one.
        return Cow::Owned(text[..floor_char_boundary(text, max)].to_owned());
    }
    let mut out = String::with_capacity(keep + note.len());
    out.push_str(&text[..keep]);
    out.push_str(&note);
    Cow::Owned(out)
}

/// The largest index at most `at` that is a character boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes its text for ever, as long as the writer takes it.
    struct Endless;

    impl std::fmt::Display for Endless {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            loop {
                f.write_str("é and on ")?;
            }
        }
    }

    #[test]
    fn an_endless_display_is_shown_bounded_with_a_note() {
        let text = shown(&Endless);
        assert!(text.len() <= MAX_SHOWN + 40, "{}", text.len());
        assert!(text.ends_with("… [cut: the message went on]"));
        assert_eq!(shown(&"short"), "short");
    }

    #[test]
    fn a_capped_value_is_shown_whole_when_short_and_cut_with_a_note_when_long() {
        assert_eq!(capped(&"short").to_string(), "short");
        let long = "é".repeat(MAX_ERROR_MESSAGE);
        let shown = capped(&long).to_string();
        assert!(
            shown.len() <= MAX_ERROR_MESSAGE + CAPPED_NOTE.len(),
            "{}",
            shown.len()
        );
        assert!(
            shown.ends_with(CAPPED_NOTE),
            "{}",
            &shown[shown.len() - 50..]
        );
        let endless = capped(&Endless).to_string();
        assert!(endless.len() <= MAX_ERROR_MESSAGE + CAPPED_NOTE.len());
        assert!(endless.ends_with(CAPPED_NOTE));
    }

    #[test]
    fn short_clean_texts_are_borrowed_unchanged() {
        assert!(matches!(storable_text("ok", 10), Cow::Borrowed("ok")));
    }

    #[test]
    fn nul_characters_are_removed() {
        assert_eq!(storable_text("\0a\0b\0", 10), "ab");
    }

    #[test]
    fn long_texts_are_cut_at_a_char_boundary_with_a_note() {
        let text = "é".repeat(10_000); // 2 bytes each
        let cut = storable_text(&text, 1000);
        assert!(cut.len() <= 1000, "{}", cut.len());
        assert!(cut.starts_with("éé"));
        assert!(cut.ends_with(" bytes cut]"), "{cut}");
        let kept = cut.split('…').next().unwrap().len();
        assert_eq!(
            cut,
            format!("{}… [{} bytes cut]", &text[..kept], 20_000 - kept)
        );
    }

    #[test]
    fn a_limit_too_small_for_the_note_cuts_without_one() {
        assert_eq!(storable_text("abcdefgh", 3), "abc");
        assert_eq!(storable_text("ééé", 3), "é");
    }
}
