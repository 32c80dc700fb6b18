//! The frame of every page, the action forms and the formatting shared by the pages.

use std::time::Duration;

use chrono::{DateTime, Utc};
use job::JobState;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::visible;
use crate::dashboard::Ctx;

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Queues,
    Jobs,
    Dead,
    None,
}

/// A whole page, with the notice of the action that led to it, if any; every character of its
/// text that a reader cannot see shown as an escape (see `visible.rs`).
pub(crate) fn page(ctx: &Ctx, nav: Nav, title: &str, body: Markup) -> Markup {
    let link = |target: Nav, path: &str, label: &str| {
        html! {
            a href=(ctx.base.at(path)) class=[(nav == target).then_some("current")] { (label) }
        }
    };
    let notice = ctx.notice.as_ref().and_then(|n| n.text(ctx.can_act()));
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · job" }
                link rel="stylesheet" href=(ctx.base.at("/assets/dashboard.css"));
            }
            body {
                header {
                    span.brand { "job" }
                    nav {
                        (link(Nav::Queues, "/", "Queues"))
                        (link(Nav::Jobs, "/jobs", "Jobs"))
                        (link(Nav::Dead, "/dead", "Dead letters"))
                    }
                    span.who {
                        @if let Some(tenant) = &ctx.tenant {
                            span.badge.tenant { "tenant " (tenant) }
                        }
                        @if ctx.can_act() {
                            span.badge.operator { "operator" }
                            (form(ctx, "/logout", &[], "Log out", "link"))
                        } @else if ctx.has_operator {
                            span.badge.readonly { "read-only" }
                            a href=(ctx.base.at("/login")) { "Log in" }
                        } @else {
                            span.badge.readonly title="no operator token is configured" { "read-only" }
                        }
                    }
                }
                main {
                    @if let Some(text) = notice {
                        p.notice role="status" { (text) }
                    }
                    (body)
                }
            }
        }
    };
    PreEscaped(visible::page(page.into_string()))
}

/// A POST form with the session's CSRF token, hidden `fields` and one button; nothing when the
/// visitor may not act.
pub(crate) fn form(
    ctx: &Ctx,
    path: &str,
    fields: &[(&str, String)],
    label: &str,
    class: &str,
) -> Markup {
    let Some(csrf) = &ctx.csrf else {
        return html! {};
    };
    html! {
        form.inline method="post" action=(ctx.base.at(path)) {
            input type="hidden" name="csrf" value=(csrf);
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A purge's form: like [`form`], with the box an operator must tick first (a purge deletes
/// for good, as the CLI's asks before it does).
pub(crate) fn purge_form(ctx: &Ctx, fields: &[(&str, String)], label: &str) -> Markup {
    let Some(csrf) = &ctx.csrf else {
        return html! {};
    };
    html! {
        form.inline method="post" action=(ctx.base.at("/actions/purge")) {
            input type="hidden" name="csrf" value=(csrf);
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            label { input type="checkbox" name="confirm" value="yes" required; " I mean it" }
            " "
            button type="submit" class="purge" { (label) }
        }
    }
}

/// The CSS class of a state's badge.
pub(crate) fn state_badge(state: JobState, stuck: bool) -> Markup {
    html! {
        span class={ "state " (state.as_str()) } { (state.as_str()) }
        @if stuck { " " span class="state stuck" { "stuck" } }
    }
}

/// A time, shown in UTC and saying so (the machine-readable `datetime` beside it).
pub(crate) fn time(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

pub(crate) fn opt_time(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { span.muted { "—" } },
    }
}

/// A duration for people: `45s`, `12m 3s`, `3h 2m`, `2d 4h`.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// A count, with `+` when it is a lower bound.
pub(crate) fn count(n: u64, capped: bool) -> Markup {
    html! {
        @if capped { (n) "+" }
        @else if n == 0 { span.muted { "0" } }
        @else { (n) }
    }
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Pretty JSON for a `<pre>` (escaped by the caller's template), at most `max` bytes of it,
/// cut with a note past that; a character a reader cannot see in a string is written as its
/// JSON escape (`\u202e`, see `visible.rs`). Pretty text can be a hundred times its compact size (an array
/// of many small values nested a hundred deep indents each of them by 200 spaces), so the
/// text is written into a buffer that stops taking bytes at `max`: the serializer stops
/// there, and a page of such a value costs `max`, not its pretty size.
/// A value of a job's row shown from the database's text of it (`text`: numbers as stored)
/// when it has it, else as [`pretty`] shows `value`: laid out as [`pretty`] lays it out, at
/// most `max` bytes with a note when cut, every hidden character as its JSON escape. A value
/// nested past what serde_json reads is in the row as its text, in a JSON string: shown so,
/// as before, where the database's text is no string.
pub(crate) fn exact(value: &serde_json::Value, text: Option<&str>, max: usize) -> String {
    let Some(text) = text.filter(|t| t.starts_with('"') == value.is_string()) else {
        return pretty(value, max);
    };
    let (laid_out, whole) = crate::pretty_json(text, max);
    let mut shown = visible::json_text(&laid_out).into_owned();
    if !whole {
        shown.push_str(&format!(
            "\n… (cut at {} KiB: `job show` prints it whole)",
            max / 1024
        ));
    }
    shown
}

pub(crate) fn pretty(value: &serde_json::Value, max: usize) -> String {
    let mut out = Bounded {
        bytes: Vec::new(),
        max,
    };
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, visible::Pretty::new());
    let whole = serde::Serialize::serialize(value, &mut serializer).is_ok();
    let mut text = match String::from_utf8(out.bytes) {
        Ok(text) => text,
        // Cut inside a character: keep what comes before it.
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    };
    if !whole {
        text.push_str(&format!(
            "\n… (cut at {} KiB: `job show` prints it whole)",
            max / 1024
        ));
    }
    text
}

/// The bytes of [`pretty`], refusing any past `max` (which stops the serializer).
struct Bounded {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.max.saturating_sub(self.bytes.len());
        if room == 0 && !buf.is_empty() {
            return Err(std::io::Error::other(
                "the page's share of this value is full",
            ));
        }
        let n = buf.len().min(room);
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `path?k=v&..` with the values percent-encoded (names may hold `&`, `#`, `+`, non-ASCII).
pub(crate) fn href(path: &str, pairs: &[(&str, &str)]) -> String {
    match serde_urlencoded::to_string(pairs) {
        Ok(query) if !query.is_empty() => format!("{path}?{query}"),
        _ => path.to_owned(),
    }
}
