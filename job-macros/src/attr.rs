//! Parses the attribute's arguments (`#[job(retry = 5, timeout = "2m")]`) into [`JobArgs`],
//! checking every value and recording every mistake rather than stopping at the first.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, Ident, Lit, Path, Token, TypePath, UnOp};

use crate::duration;
use crate::errors::Errors;

mod kw {
    syn::custom_keyword!(kind);
    syn::custom_keyword!(version);
    syn::custom_keyword!(upgrade);
    syn::custom_keyword!(queue);
    syn::custom_keyword!(priority);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(backoff);
    syn::custom_keyword!(base);
    syn::custom_keyword!(cap);
    syn::custom_keyword!(unique);
    syn::custom_keyword!(ordering);
    syn::custom_keyword!(concurrency);
    syn::custom_keyword!(owner);
    syn::custom_keyword!(compensate);
    syn::custom_keyword!(rate);
    syn::custom_keyword!(rate_key);
    syn::custom_keyword!(breaker);
    syn::custom_keyword!(failure_percent);
    syn::custom_keyword!(min_attempts);
    syn::custom_keyword!(window);
    syn::custom_keyword!(cool_down);
}

/// Every key, for the message about an unknown one.
const KEYS: &str = "`kind`, `version`, `upgrade`, `queue`, `priority`, `retry`, `timeout`, \
                    `lease`, `backoff`, `unique`, `ordering`, `concurrency`, `owner`, \
                    `compensate`, `rate`, `rate_key`, `breaker`";

/// The longest queue or kind name the store accepts (`job_core::MAX_NAME_LEN`).
pub(crate) const MAX_NAME_LEN: usize = 128;

/// The most retries `retry` allows.
const MAX_RETRY: i128 = 1000;

/// The shortest lease a worker accepts, `job_core::MIN_LEASE` (checked again by
/// `WorkerBuilder::build`); the `every-key` pass test asserts that the two agree.
const MIN_LEASE: Duration = Duration::from_millis(30);

/// `job_core::Backoff::DEFAULT`, to check a half-given `backoff` here; the `every-key` pass
/// test asserts that the two agree.
const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(3600);

/// `job_core::RateLimit::MAX_STARTS`: the most starts a `rate` allows per period.
const MAX_RATE_STARTS: i128 = 10_000;

/// The shortest and longest period of a `rate` (`job_core::RateLimit::problem`).
const MIN_RATE_PERIOD: Duration = Duration::from_millis(1);
const MAX_RATE_PERIOD: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most attempts `breaker(min_attempts = ..)` allows (`job_core::Breaker::problem`).
const MAX_BREAKER_ATTEMPTS: i128 = 1_000_000;

/// The shortest and longest `window` and `cool_down` of a `breaker`
/// (`job_core::Breaker::MAX_DURATION`).
const MIN_BREAKER_DURATION: Duration = Duration::from_secs(1);
const MAX_BREAKER_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The checked arguments. A key that was not given, or given wrong, is `None`.
#[derive(Default)]
pub(crate) struct JobArgs {
    pub(crate) kind: Option<String>,
    pub(crate) version: Option<i32>,
    pub(crate) upgrade: Option<Path>,
    pub(crate) queue: Option<String>,
    pub(crate) priority: Option<i16>,
    pub(crate) retry: Option<u32>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) backoff: Option<BackoffArgs>,
    pub(crate) unique: Option<KeyTemplate>,
    pub(crate) ordering: Option<KeyTemplate>,
    pub(crate) concurrency: Option<u32>,
    pub(crate) owner: Option<String>,
    /// The type of the compensating job, as written.
    pub(crate) compensate: Option<TypePath>,
    pub(crate) rate: Option<RateArgs>,
    pub(crate) rate_key: Option<KeyTemplate>,
    pub(crate) breaker: Option<BreakerArgs>,
}

/// A key whose value is a key template, with the example its messages show.
#[derive(Clone, Copy)]
pub(crate) struct TemplateKey {
    /// The key as the user writes it.
    pub(crate) key: &'static str,
    /// The `Job` method generated from it: `unique_key` for `unique`.
    pub(crate) method: &'static str,
    /// The example's literal prefix: `invoice` in `"invoice:{invoice_id}"`.
    prefix: &'static str,
    /// The example's placeholder: `invoice_id` in `"invoice:{invoice_id}"`.
    field: &'static str,
}

impl TemplateKey {
    /// The example value: `"invoice:{invoice_id}"`, quotes included.
    fn example(self) -> String {
        format!("\"{}:{{{}}}\"", self.prefix, self.field)
    }
}

/// `unique = "invoice:{invoice_id}"`: `Job::unique_key`.
pub(crate) const UNIQUE: TemplateKey = TemplateKey {
    key: "unique",
    method: "unique_key",
    prefix: "invoice",
    field: "invoice_id",
};

/// `ordering = "account:{account_id}"`: `Job::ordering_key`.
pub(crate) const ORDERING: TemplateKey = TemplateKey {
    key: "ordering",
    method: "ordering_key",
    prefix: "account",
    field: "account_id",
};

/// `rate_key = "tenant:{tenant_id}"`: `Job::rate_key`. Needs `rate` in the same attribute.
pub(crate) const RATE_KEY: TemplateKey = TemplateKey {
    key: "rate_key",
    method: "rate_key",
    prefix: "tenant",
    field: "tenant_id",
};

/// `unique = "invoice:{invoice_id}"`, `ordering = "account:{account_id}"` or
/// `rate_key = "tenant:{tenant_id}"`: literal text and `{field}` placeholders (`{{` and `}}`
/// for braces), and where the string was, for errors about the fields it names.
pub(crate) struct KeyTemplate {
    /// Which key the template was given to.
    pub(crate) key: &'static str,
    /// The `Job` method that returns the filled-in template.
    pub(crate) method: &'static str,
    pub(crate) parts: Vec<KeyPart>,
    pub(crate) span: Span,
}

/// One piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyPart {
    /// Text copied as is.
    Text(String),
    /// The payload field of this name, formatted with `Display`.
    Field(String),
}

/// Splits the template given to `which` into its parts.
pub(crate) fn key_template(which: TemplateKey, template: &str) -> Result<Vec<KeyPart>, String> {
    let key = which.key;
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => {
                            return Err(format!(
                                "`{key}` has an unclosed `{{` in {template:?}; write `{{{{` for a brace"
                            ))
                        }
                    }
                }
                let name = name.trim().to_owned();
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    let example = which.field;
                    return Err(format!(
                        "`{key}` placeholders name a job argument, like `{{{example}}}`, got `{{{name}}}`"
                    ));
                }
                if !text.is_empty() {
                    parts.push(KeyPart::Text(std::mem::take(&mut text)));
                }
                if let Some(KeyPart::Field(before)) = parts.last() {
                    return Err(format!(
                        "`{key}` has `{{{before}}}` and `{{{name}}}` side by side in {template:?}: \
                         put text between them, like `{{{before}}}:{{{name}}}`, or two jobs \
                         with different arguments could have the same key"
                    ));
                }
                parts.push(KeyPart::Field(name));
            }
            '}' => {
                return Err(format!(
                    "`{key}` has an unmatched `}}` in {template:?}; write `}}}}` for a brace"
                ))
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(KeyPart::Text(text));
    }
    if parts.is_empty() {
        return Err(format!("`{key}` must not be empty"));
    }
    Ok(parts)
}

/// `backoff(base = "..", cap = "..")`: either half may be left to its default.
#[derive(Default)]
pub(crate) struct BackoffArgs {
    pub(crate) base: Option<Duration>,
    pub(crate) cap: Option<Duration>,
}

/// `rate = "100/1m"`: at most `starts` attempts begin in any `per`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RateArgs {
    pub(crate) starts: u32,
    pub(crate) per: Duration,
}

/// `breaker(failure_percent = 50, ..)`: the keys left out take `job_core::Breaker::new`'s
/// defaults.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BreakerArgs {
    pub(crate) failure_percent: u8,
    pub(crate) min_attempts: Option<u32>,
    pub(crate) window: Option<Duration>,
    pub(crate) cool_down: Option<Duration>,
}

/// Parses the attribute's tokens. Mistakes go to `errors`; the keys that were right are kept,
/// so the expansion can go on and spare the user follow-up errors.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> JobArgs {
    let mut keys = Keys::default();
    let parser = |input: ParseStream<'_>| {
        keys.parse_list(input, errors);
        Ok(())
    };
    if let Err(e) = parser.parse2(tokens) {
        errors.push(e);
    }
    keys.finish(errors)
}

/// One key: empty until it is written, and written at most once.
struct Slot<T> {
    /// The key as the user writes it.
    key: &'static str,
    /// Where the key was first written, even when its value was refused.
    span: Option<Span>,
    value: Option<T>,
}

impl<T> Slot<T> {
    fn new(key: &'static str) -> Self {
        Slot {
            key,
            span: None,
            value: None,
        }
    }

    /// Records the key written at `span` with its checked value; a second one is refused.
    fn set(&mut self, span: Span, value: syn::Result<T>, errors: &mut Errors) {
        if self.span.is_some() {
            errors.push(syn::Error::new(span, format!("`{}` set twice", self.key)));
        }
        match value {
            Ok(value) if self.span.is_none() => self.value = Some(value),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
        self.span.get_or_insert(span);
    }
}

/// The keys while they are being parsed.
struct Keys {
    kind: Slot<String>,
    version: Slot<i32>,
    upgrade: Slot<Path>,
    queue: Slot<String>,
    priority: Slot<i16>,
    retry: Slot<u32>,
    timeout: Slot<Duration>,
    lease: Slot<Duration>,
    backoff: Slot<BackoffArgs>,
    unique: Slot<KeyTemplate>,
    ordering: Slot<KeyTemplate>,
    concurrency: Slot<u32>,
    owner: Slot<String>,
    compensate: Slot<TypePath>,
    rate: Slot<RateArgs>,
    rate_key: Slot<KeyTemplate>,
    /// `None` when a nested key was refused (its error is recorded already).
    breaker: Slot<Option<BreakerArgs>>,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            kind: Slot::new("kind"),
            version: Slot::new("version"),
            upgrade: Slot::new("upgrade"),
            queue: Slot::new("queue"),
            priority: Slot::new("priority"),
            retry: Slot::new("retry"),
            timeout: Slot::new("timeout"),
            lease: Slot::new("lease"),
            backoff: Slot::new("backoff"),
            unique: Slot::new(UNIQUE.key),
            ordering: Slot::new(ORDERING.key),
            concurrency: Slot::new("concurrency"),
            owner: Slot::new("owner"),
            compensate: Slot::new("compensate"),
            rate: Slot::new("rate"),
            rate_key: Slot::new(RATE_KEY.key),
            breaker: Slot::new("breaker"),
        }
    }
}

impl Keys {
    /// `key = value, ...`. A key that cannot be read is reported and skipped up to the next
    /// comma, so the keys after it are still checked.
    fn parse_list(&mut self, input: ParseStream<'_>, errors: &mut Errors) {
        while !input.is_empty() {
            let parsed = self
                .parse_key(input, errors)
                .and_then(|()| end_of_key(input));
            if let Err(e) = parsed {
                errors.push(e);
                skip_past_comma(input);
            }
        }
    }

    fn parse_key(&mut self, input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<()> {
        let at = input.span();
        if input.peek(kw::kind) {
            let key: kw::kind = input.parse()?;
            let value = value(input, at, "kind", r#"kind = "billing.send_invoice""#)?;
            self.kind.set(key.span, name("kind", &value), errors);
        } else if input.peek(kw::version) {
            let key: kw::version = input.parse()?;
            let value = value(input, at, "version", "version = 2")?;
            let version = integer(&value, "version", 1..=i32::MAX.into(), "1 or more");
            self.version.set(key.span, version, errors);
        } else if input.peek(kw::upgrade) {
            let key: kw::upgrade = input.parse()?;
            let value = value(input, at, "upgrade", "upgrade = upgrade_payload")?;
            self.upgrade.set(key.span, path(&value), errors);
        } else if input.peek(kw::queue) {
            let key: kw::queue = input.parse()?;
            let value = value(input, at, "queue", r#"queue = "mail""#)?;
            self.queue.set(key.span, name("queue", &value), errors);
        } else if input.peek(kw::priority) {
            let key: kw::priority = input.parse()?;
            let value = value(input, at, "priority", "priority = 1")?;
            let range = 0..=i16::MAX.into();
            let priority = integer(
                &value,
                "priority",
                range,
                "between 0 and 32767 (lower runs first)",
            );
            self.priority.set(key.span, priority, errors);
        } else if input.peek(kw::retry) {
            let key: kw::retry = input.parse()?;
            let value = value(input, at, "retry", "retry = 5")?;
            let what = "between 0 and 1000 (the retries after the first attempt)";
            let retry = integer(&value, "retry", 0..=MAX_RETRY, what);
            self.retry.set(key.span, retry, errors);
        } else if input.peek(kw::timeout) {
            let key: kw::timeout = input.parse()?;
            let value = value(input, at, "timeout", r#"timeout = "2m""#)?;
            self.timeout
                .set(key.span, duration(&value, "timeout"), errors);
        } else if input.peek(kw::lease) {
            let key: kw::lease = input.parse()?;
            let value = value(input, at, "lease", r#"lease = "30s""#)?;
            self.lease.set(key.span, lease(&value), errors);
        } else if input.peek(kw::backoff) {
            let key: kw::backoff = input.parse()?;
            let backoff = parse_backoff(input, errors)?;
            self.backoff.set(key.span, backoff, errors);
        } else if input.peek(kw::unique) {
            let key: kw::unique = input.parse()?;
            let unique = template_value(input, at, UNIQUE)?;
            self.unique.set(key.span, unique, errors);
        } else if input.peek(kw::ordering) {
            let key: kw::ordering = input.parse()?;
            let ordering = template_value(input, at, ORDERING)?;
            self.ordering.set(key.span, ordering, errors);
        } else if input.peek(kw::concurrency) {
            let key: kw::concurrency = input.parse()?;
            let value = value(input, at, "concurrency", "concurrency = 2")?;
            let what = "1 or more (running jobs of this kind across every worker)";
            let limit = integer(&value, "concurrency", 1..=u32::MAX.into(), what);
            self.concurrency.set(key.span, limit, errors);
        } else if input.peek(kw::owner) {
            let key: kw::owner = input.parse()?;
            let value = value(input, at, "owner", r#"owner = "billing""#)?;
            self.owner.set(key.span, name("owner", &value), errors);
        } else if input.peek(kw::compensate) {
            let key: kw::compensate = input.parse()?;
            let compensate = compensate_value(input, at)?;
            self.compensate.set(key.span, compensate, errors);
        } else if input.peek(kw::rate) {
            let key: kw::rate = input.parse()?;
            let value = value(input, at, "rate", r#"rate = "100/1m""#)?;
            self.rate.set(key.span, rate(&value), errors);
        } else if input.peek(kw::rate_key) {
            let key: kw::rate_key = input.parse()?;
            let rate_key = template_value(input, at, RATE_KEY)?;
            self.rate_key.set(key.span, rate_key, errors);
        } else if input.peek(kw::breaker) {
            let key: kw::breaker = input.parse()?;
            let breaker = parse_breaker(input, errors)?;
            self.breaker.set(key.span, breaker, errors);
        } else {
            let key = Ident::parse_any(input)
                .map_err(|e| syn::Error::new(e.span(), format!("expected a key, one of {KEYS}")))?;
            skip_value(input)?;
            errors.push(unknown_key(&key));
        }
        Ok(())
    }

    /// The checked arguments, after the checks that involve two keys.
    fn finish(self, errors: &mut Errors) -> JobArgs {
        let mut args = JobArgs {
            kind: self.kind.value,
            version: self.version.value,
            upgrade: self.upgrade.value,
            queue: self.queue.value,
            priority: self.priority.value,
            retry: self.retry.value,
            timeout: self.timeout.value,
            lease: self.lease.value,
            backoff: self.backoff.value,
            unique: self.unique.value,
            ordering: self.ordering.value,
            concurrency: self.concurrency.value,
            owner: self.owner.value,
            compensate: self.compensate.value,
            rate: self.rate.value,
            rate_key: self.rate_key.value,
            breaker: self.breaker.value.flatten(),
        };
        // A refused `upgrade` has its own error already.
        if let (Some(_), Some(span)) = (&args.upgrade, self.upgrade.span) {
            let why = "the hook turns payloads of older versions into the current one";
            match args.version {
                Some(2..) => {}
                Some(v) => errors.push(syn::Error::new(
                    span,
                    format!("`upgrade` needs `version = 2` or higher, not {v}: {why}"),
                )),
                // A refused `version` has its own error already.
                None if self.version.span.is_some() => {}
                None => errors.push(syn::Error::new(
                    span,
                    format!("`upgrade` needs `version = 2` or higher: {why}"),
                )),
            }
        }
        // A refused `rate_key` has its own error already, and so has a refused `rate`. The
        // template is kept, so that the fields it names are still checked.
        if let (Some(rate_key), None) = (&args.rate_key, self.rate.span) {
            errors.push(syn::Error::new(
                rate_key.span,
                "`rate_key` needs a `rate`, like `rate = \"100/1m\"`: each rate key gets its own \
                 window of the kind's rate limit",
            ));
        }
        if let (Some(backoff), Some(span)) = (&args.backoff, self.backoff.span) {
            let base = backoff.base.unwrap_or(DEFAULT_BACKOFF_BASE);
            let cap = backoff.cap.unwrap_or(DEFAULT_BACKOFF_CAP);
            if base > cap {
                let which = match (backoff.base, backoff.cap) {
                    (_, None) => " (the default)",
                    (None, _) => "; the default base is 1s",
                    _ => "",
                };
                let (base, cap) = (duration::show(base), duration::show(cap));
                let message = if backoff.base.is_some() {
                    format!("`backoff` base {base} is above its cap {cap}{which}")
                } else {
                    format!("`backoff` cap {cap} is below its base{which}")
                };
                errors.push(syn::Error::new(span, message));
                args.backoff = None;
            }
        }
        args
    }
}

/// `(base = "..", cap = "..")` after `backoff`.
fn parse_backoff(
    input: ParseStream<'_>,
    errors: &mut Errors,
) -> syn::Result<syn::Result<BackoffArgs>> {
    const EXAMPLE: &str = r#"backoff(base = "1s", cap = "1h")"#;
    if input.peek(Token![=]) {
        let eq: Token![=] = input.parse()?;
        let value: Expr = input.parse()?;
        let message = format!("`backoff` takes a list, like `{EXAMPLE}`");
        return Ok(Err(syn::Error::new_spanned(
            quote::quote!(#eq #value),
            message,
        )));
    }
    if !input.peek(syn::token::Paren) {
        return Err(input.error(format!("`backoff` needs a list, like `{EXAMPLE}`")));
    }
    let content;
    let parens = syn::parenthesized!(content in input);
    let mut base = Slot::new("base");
    let mut cap = Slot::new("cap");
    while !content.is_empty() {
        let at = content.span();
        let parsed = (|| {
            if content.peek(kw::base) {
                let key: kw::base = content.parse()?;
                let value = value(&content, at, "base", r#"base = "1s""#)?;
                base.set(key.span, duration(&value, "base"), errors);
            } else if content.peek(kw::cap) {
                let key: kw::cap = content.parse()?;
                let value = value(&content, at, "cap", r#"cap = "1h""#)?;
                cap.set(key.span, duration(&value, "cap"), errors);
            } else {
                let key = Ident::parse_any(&content)?;
                skip_value(&content)?;
                let message = format!("unknown `backoff` key `{key}`; expected `base` or `cap`");
                errors.push(syn::Error::new(key.span(), message));
            }
            end_of_key(&content)
        })();
        if let Err(e) = parsed {
            errors.push(e);
            skip_past_comma(&content);
        }
    }
    if base.span.is_none() && cap.span.is_none() {
        let message = format!("`backoff` needs `base`, `cap` or both, like `{EXAMPLE}`");
        return Ok(Err(syn::Error::new(parens.span.join(), message)));
    }
    Ok(Ok(BackoffArgs {
        base: base.value,
        cap: cap.value,
    }))
}

/// `(failure_percent = 50, min_attempts = 20, window = "1m", cool_down = "5m")` after
/// `breaker`: `failure_percent` is required. `Ok(Ok(None))` when a nested key was refused,
/// its error recorded.
fn parse_breaker(
    input: ParseStream<'_>,
    errors: &mut Errors,
) -> syn::Result<syn::Result<Option<BreakerArgs>>> {
    const EXAMPLE: &str =
        r#"breaker(failure_percent = 50, min_attempts = 20, window = "1m", cool_down = "5m")"#;
    if input.peek(Token![=]) {
        let eq: Token![=] = input.parse()?;
        let value: Expr = input.parse()?;
        let message = format!("`breaker` takes a list, like `{EXAMPLE}`");
        return Ok(Err(syn::Error::new_spanned(
            quote::quote!(#eq #value),
            message,
        )));
    }
    if !input.peek(syn::token::Paren) {
        return Err(input.error(format!("`breaker` needs a list, like `{EXAMPLE}`")));
    }
    let content;
    let parens = syn::parenthesized!(content in input);
    let mut failure_percent = Slot::new("failure_percent");
    let mut min_attempts = Slot::new("min_attempts");
    let mut window = Slot::new("window");
    let mut cool_down = Slot::new("cool_down");
    // Written, even without a value (whose error says so).
    let mut percent_written = false;
    while !content.is_empty() {
        let at = content.span();
        let parsed = (|| {
            if content.peek(kw::failure_percent) {
                let key: kw::failure_percent = content.parse()?;
                percent_written = true;
                let value = value(&content, at, "failure_percent", "failure_percent = 50")?;
                let what = "between 1 and 100 (the percentage of failed attempts that trips \
                            the breaker)";
                let percent = integer(&value, "failure_percent", 1..=100, what);
                failure_percent.set(key.span, percent, errors);
            } else if content.peek(kw::min_attempts) {
                let key: kw::min_attempts = content.parse()?;
                let value = value(&content, at, "min_attempts", "min_attempts = 20")?;
                let what = "between 1 and 1000000 (the fewest ended attempts in a window for \
                            the breaker to trip)";
                let attempts = integer(&value, "min_attempts", 1..=MAX_BREAKER_ATTEMPTS, what);
                min_attempts.set(key.span, attempts, errors);
            } else if content.peek(kw::window) {
                let key: kw::window = content.parse()?;
                let value = value(&content, at, "window", r#"window = "1m""#)?;
                window.set(key.span, breaker_duration(&value, "window"), errors);
            } else if content.peek(kw::cool_down) {
                let key: kw::cool_down = content.parse()?;
                let value = value(&content, at, "cool_down", r#"cool_down = "5m""#)?;
                cool_down.set(key.span, breaker_duration(&value, "cool_down"), errors);
            } else {
                let key = Ident::parse_any(&content)?;
                skip_value(&content)?;
                let hint = match key.to_string().as_str() {
                    "failures" | "failure_rate" | "threshold" | "percent" => {
                        "; the share of failed attempts that trips it is `failure_percent = N`"
                    }
                    "of" | "attempts" | "min_calls" | "minimum" => {
                        "; the fewest attempts in a window for it to trip is `min_attempts = N`"
                    }
                    "cooldown" | "cool_off" | "pause" => {
                        "; how long it keeps the kind paused is `cool_down`"
                    }
                    _ => "",
                };
                let message = format!(
                    "unknown `breaker` key `{key}`; expected `failure_percent`, `min_attempts`, \
                     `window` or `cool_down`{hint}"
                );
                errors.push(syn::Error::new(key.span(), message));
            }
            end_of_key(&content)
        })();
        if let Err(e) = parsed {
            errors.push(e);
            skip_past_comma(&content);
        }
    }
    if !percent_written {
        let message = format!(
            "`breaker` needs `failure_percent`, the percentage of failed attempts that trips it, \
             like `{EXAMPLE}`"
        );
        return Ok(Err(syn::Error::new(parens.span.join(), message)));
    }
    // A refused key has its error already.
    let refused = |span: Option<Span>, set: bool| span.is_some() && !set;
    if refused(failure_percent.span, failure_percent.value.is_some())
        || refused(min_attempts.span, min_attempts.value.is_some())
        || refused(window.span, window.value.is_some())
        || refused(cool_down.span, cool_down.value.is_some())
    {
        return Ok(Ok(None));
    }
    Ok(Ok(failure_percent.value.map(|failure_percent| {
        BreakerArgs {
            failure_percent,
            min_attempts: min_attempts.value,
            window: window.value,
            cool_down: cool_down.value,
        }
    })))
}

/// A breaker's `window` or `cool_down`: a duration of 1s to 30 days.
fn breaker_duration(expr: &Expr, key: &str) -> syn::Result<Duration> {
    let d = duration(expr, key)?;
    if !(MIN_BREAKER_DURATION..=MAX_BREAKER_DURATION).contains(&d) {
        // As written: humantime shows 31 days as "1month 13h 26m 24s".
        let written = string(expr, key, "")?;
        let message = format!(
            "`{key}` must be between 1s and 30 days, got {}",
            written.trim()
        );
        return Err(syn::Error::new_spanned(expr, message));
    }
    Ok(d)
}

/// `"N/DURATION"`: at most N starts per period, like `"100/1m"`; a bare unit is one of it
/// (`"10/s"`).
fn rate(expr: &Expr) -> syn::Result<RateArgs> {
    const LIKE: &str = r#"like "100/1m" (100 starts a minute) or "10/s""#;
    let text = string(expr, "rate", &format!("starts per period, {LIKE}"))?;
    let refuse = |message: String| syn::Error::new_spanned(expr, message);
    let Some((starts, per)) = text.split_once('/') else {
        return Err(refuse(format!(
            "`rate` must be \"N/DURATION\", {LIKE}, got {text:?}"
        )));
    };
    let (starts, per) = (starts.trim(), per.trim());
    if starts.is_empty() || starts.contains(|c: char| !c.is_ascii_digit()) {
        return Err(refuse(format!(
            "`rate` must start with a whole number of starts, {LIKE}, got {starts:?}"
        )));
    }
    let starts = match starts.parse::<i128>() {
        Ok(n @ 1..=MAX_RATE_STARTS) => n as u32,
        _ => {
            return Err(refuse(format!(
                "`rate` must allow between 1 and 10000 starts per period, got {starts}"
            )))
        }
    };
    // A bare unit is one of it: "10/s" is "10/1s".
    let bare_unit = !per.is_empty() && per.chars().all(char::is_alphabetic);
    let per_text = if bare_unit {
        format!("1{per}")
    } else {
        per.to_owned()
    };
    let per = duration::parse(&per_text)
        .map_err(|reason| refuse(format!("`rate` period {reason}; write a rate {LIKE}")))?;
    if !(MIN_RATE_PERIOD..=MAX_RATE_PERIOD).contains(&per) {
        return Err(refuse(format!(
            "`rate` period must be between 1ms and 7 days, got {per_text}"
        )));
    }
    Ok(RateArgs { starts, per })
}

/// `= value` after `key`, written `at`.
fn value(input: ParseStream<'_>, at: Span, key: &str, example: &str) -> syn::Result<Expr> {
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            at,
            format!("`{key}` needs a value, like `{example}`"),
        ));
    }
    input.parse::<Token![=]>()?;
    input.parse()
}

/// `= "template"` after `which`, written `at`: the outer error when the value cannot be read,
/// the inner one when it is not a valid template.
fn template_value(
    input: ParseStream<'_>,
    at: Span,
    which: TemplateKey,
) -> syn::Result<syn::Result<KeyTemplate>> {
    let (key, example) = (which.key, which.example());
    let value = value(input, at, key, &format!("{key} = {example}"))?;
    let what = format!("a key template like {example}");
    Ok(string(&value, key, &what).and_then(|template| {
        let parts = key_template(which, &template)
            .map_err(|reason| syn::Error::new_spanned(&value, reason))?;
        Ok(KeyTemplate {
            key,
            method: which.method,
            parts,
            span: syn::spanned::Spanned::span(&value),
        })
    }))
}

/// `= RefundCharge` after `compensate`, written `at`: a type path, ended by a comma or the end
/// of the list. The outer error when the value cannot be read, the inner one when it is not a
/// type path.
fn compensate_value(input: ParseStream<'_>, at: Span) -> syn::Result<syn::Result<TypePath>> {
    const EXAMPLE: &str = "compensate = RefundCharge";
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            at,
            format!("`compensate` needs a value, like `{EXAMPLE}`"),
        ));
    }
    input.parse::<Token![=]>()?;
    // Read as a type first: `Wrapper<Inner>` is a type path but no expression.
    let fork = input.fork();
    if fork.parse::<TypePath>().is_ok() && (fork.is_empty() || fork.peek(Token![,])) {
        return Ok(Ok(input.parse()?));
    }
    match input.parse::<Expr>()? {
        // A path followed by more than a comma: the caller reports what follows.
        Expr::Path(p) if p.attrs.is_empty() => Ok(Ok(TypePath {
            qself: p.qself,
            path: p.path,
        })),
        value => {
            let message = format!(
                "`compensate` takes the job type to enqueue when a job of this kind is \
                 discarded, like `{EXAMPLE}`"
            );
            Ok(Err(syn::Error::new_spanned(value, message)))
        }
    }
}

/// After a key and its value: the end of the list or a comma.
fn end_of_key(input: ParseStream<'_>) -> syn::Result<()> {
    if !input.is_empty() {
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

/// Skips what an unknown key was given: `= value`, `(..)` or nothing.
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        input.parse::<Expr>()?;
    } else if input.peek(syn::token::Paren) {
        input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}

/// Recovers from a key that could not be read: drops everything up to and past the next comma.
fn skip_past_comma(input: ParseStream<'_>) {
    let _ = input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tree, next)) = rest.token_tree() {
            rest = next;
            if matches!(&tree, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
        }
        Ok(((), rest))
    });
}

fn unknown_key(key: &Ident) -> syn::Error {
    let hint = match key.to_string().as_str() {
        "retries" | "max_attempts" | "attempts" | "max_retries" => {
            "; `retry = N` sets N retries after the first attempt (N + 1 attempts)"
        }
        "name" => "; the job's stored name is set with `kind`",
        _ => "",
    };
    syn::Error::new(
        key.span(),
        format!("unknown key `{key}`; expected one of {KEYS}{hint}"),
    )
}

/// An integer literal (possibly negative) in `range`. Below it, the error says what the key
/// takes (`what`); above it, including a number past any integer type, that the value is too
/// large and what the most is.
fn integer<T>(expr: &Expr, key: &str, range: RangeInclusive<i128>, what: &str) -> syn::Result<T>
where
    T: TryFrom<i128>,
{
    let (negative, lit) = match expr {
        Expr::Lit(e) => (false, &e.lit),
        Expr::Unary(e) if matches!(e.op, UnOp::Neg(_)) => match &*e.expr {
            Expr::Lit(inner) => (true, &inner.lit),
            _ => return Err(expected(expr, key, "an integer", what)),
        },
        _ => return Err(expected(expr, key, "an integer", what)),
    };
    let Lit::Int(int) = lit else {
        return Err(expected(expr, key, "an integer", what));
    };
    if !int.suffix().is_empty() {
        return Err(expected(
            expr,
            key,
            "a plain integer without a suffix",
            what,
        ));
    }
    let shown = format!("{}{}", if negative { "-" } else { "" }, int.base10_digits());
    // Digits past i128 are a number past every bound, on its side of zero.
    let value = match int.base10_parse::<i128>() {
        Ok(v) if negative => -v,
        Ok(v) => v,
        Err(_) if negative => i128::MIN,
        Err(_) => i128::MAX,
    };
    if value > *range.end() {
        let most = range.end();
        let message = format!("`{key}` is too large: at most {most}, got {shown}");
        return Err(syn::Error::new_spanned(expr, message));
    }
    range
        .contains(&value)
        .then(|| T::try_from(value).ok())
        .flatten()
        .ok_or_else(|| {
            syn::Error::new_spanned(expr, format!("`{key}` must be {what}, got {shown}"))
        })
}

/// A string literal.
fn string(expr: &Expr, key: &str, what: &str) -> syn::Result<String> {
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.value()),
        _ => Err(expected(expr, key, "a string", what)),
    }
}

/// A queue or kind name: a string the store will accept.
fn name(key: &str, expr: &Expr) -> syn::Result<String> {
    let what = "a name without whitespace of at most 128 bytes";
    let name = string(expr, key, what)?;
    check_name(key, &name).map_err(|reason| syn::Error::new_spanned(expr, reason))?;
    Ok(name)
}

/// The store's rules for queue and kind names (`job_core::NewJob::validate`).
pub(crate) fn check_name(key: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("`{key}` must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        let len = name.len();
        return Err(format!(
            "`{key}` must be at most {MAX_NAME_LEN} bytes, got {len}"
        ));
    }
    if name.chars().any(|c| !allowed_in_name(c)) {
        return Err(format!(
            "`{key}` must not contain whitespace, control or format characters, got {name:?}"
        ));
    }
    Ok(())
}

/// `job_core::FORBIDDEN_IN_NAMES`: whitespace, control and format characters (zero-width
/// spaces, bidirectional overrides), which the store refuses in a name. A unit test checks that
/// the two lists agree.
const FORBIDDEN_IN_NAMES: &[(u32, u32)] = &[
    (0x0000, 0x0020),
    (0x007F, 0x00A0),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x206F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` may appear in a name (`job_core::allowed_in_name`).
fn allowed_in_name(c: char) -> bool {
    let c = u32::from(c);
    !FORBIDDEN_IN_NAMES
        .iter()
        .any(|&(from, to)| (from..=to).contains(&c))
}

/// A humantime duration in a string: `"2m"`, `"1h 30m"`, `"500ms"`.
fn duration(expr: &Expr, key: &str) -> syn::Result<Duration> {
    let what = r#"a duration like "2m", "30s" or "1h 30m""#;
    let text = string(expr, key, what)?;
    duration::parse(&text).map_err(|reason| {
        let message = format!(r#"`{key}` {reason}; write a duration like "2m", "30s" or "1h 30m""#);
        syn::Error::new_spanned(expr, message)
    })
}

fn lease(expr: &Expr) -> syn::Result<Duration> {
    let lease = duration(expr, "lease")?;
    if lease < MIN_LEASE {
        let message = format!(
            "`lease` must be at least 30ms (a worker renews it every third), got {}",
            duration::show(lease)
        );
        return Err(syn::Error::new_spanned(expr, message));
    }
    Ok(lease)
}

/// The path of the upgrade function.
fn path(expr: &Expr) -> syn::Result<Path> {
    match expr {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => Ok(p.path.clone()),
        _ => Err(expected(
            expr,
            "upgrade",
            "the path of a function",
            "a `fn(i32, serde_json::Value) -> Result<serde_json::Value, JobError>`, like `upgrade = upgrade_payload`",
        )),
    }
}

/// "`key` takes KIND: WHAT".
fn expected(expr: &Expr, key: &str, kind: &str, what: impl Display) -> syn::Error {
    syn::Error::new_spanned(expr, format!("`{key}` takes {kind}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(tokens: TokenStream) -> JobArgs {
        let mut errors = Errors::default();
        let args = parse(tokens, &mut errors);
        assert!(errors.is_empty(), "unexpected errors");
        args
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        parse(tokens, &mut errors);
        errors.messages()
    }

    #[test]
    fn reads_every_key() {
        let args = parse_ok(quote! {
            kind = "billing.send", version = 3, upgrade = crate::up, queue = "mail",
            priority = 2, retry = 5, timeout = "2m", lease = "1m", backoff(base = "2s", cap = "10m"),
            rate = "100/1m", rate_key = "tenant:{tenant_id}", breaker(failure_percent = 50),
        });
        assert_eq!(args.kind.as_deref(), Some("billing.send"));
        assert_eq!(args.version, Some(3));
        assert!(args.upgrade.is_some());
        assert_eq!(args.queue.as_deref(), Some("mail"));
        assert_eq!(args.priority, Some(2));
        assert_eq!(args.retry, Some(5));
        assert_eq!(args.timeout, Some(Duration::from_secs(120)));
        assert_eq!(args.lease, Some(Duration::from_secs(60)));
        let backoff = args.backoff.unwrap();
        assert_eq!(backoff.base, Some(Duration::from_secs(2)));
        assert_eq!(backoff.cap, Some(Duration::from_secs(600)));
        assert_eq!(
            args.rate,
            Some(RateArgs {
                starts: 100,
                per: Duration::from_secs(60)
            })
        );
        let rate_key = args.rate_key.unwrap();
        assert_eq!((rate_key.key, rate_key.method), ("rate_key", "rate_key"));
        assert_eq!(args.breaker.unwrap().failure_percent, 50);
    }

    #[test]
    fn an_empty_attribute_sets_nothing() {
        let args = parse_ok(quote! {});
        assert!(args.kind.is_none() && args.retry.is_none() && args.backoff.is_none());
    }

    #[test]
    fn reports_every_mistake_at_once() {
        let found = messages(quote! { retry = 5, retry = 6, colour = "red", timeout = "soon" });
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0], "`retry` set twice");
        assert!(found[1].starts_with("unknown key `colour`; expected one of `kind`"));
        assert!(
            found[2].starts_with("`timeout` is not a duration"),
            "{}",
            found[2]
        );
    }

    #[test]
    fn says_a_value_above_its_range_is_too_large_and_gives_the_most() {
        let cases = [
            (
                quote! { version = 2147483648 },
                "`version` is too large: at most 2147483647, got 2147483648",
            ),
            (
                quote! { concurrency = 4294967296 },
                "`concurrency` is too large: at most 4294967295, got 4294967296",
            ),
            (
                quote! { retry = 1001 },
                "`retry` is too large: at most 1000, got 1001",
            ),
            (
                quote! { retry = 99999999999999999999999999999999999999999 },
                "`retry` is too large: at most 1000, got 99999999999999999999999999999999999999999",
            ),
            (
                quote! { priority = 32768 },
                "`priority` is too large: at most 32767, got 32768",
            ),
            (
                quote! { breaker(failure_percent = 101) },
                "`failure_percent` is too large: at most 100, got 101",
            ),
            (
                quote! { breaker(failure_percent = 50, min_attempts = 1000001) },
                "`min_attempts` is too large: at most 1000000, got 1000001",
            ),
        ];
        for (tokens, expected) in cases {
            assert_eq!(messages(tokens), [expected]);
        }
        assert_eq!(
            parse_ok(quote! { version = 2147483647 }).version,
            Some(i32::MAX)
        );
        assert_eq!(
            parse_ok(quote! { concurrency = 4294967295 }).concurrency,
            Some(u32::MAX)
        );
    }

    #[test]
    fn checks_integer_ranges() {
        assert_eq!(
            messages(quote! { retry = -1 }),
            ["`retry` must be between 0 and 1000 (the retries after the first attempt), got -1"]
        );
        assert_eq!(
            messages(quote! { priority = -1 }),
            ["`priority` must be between 0 and 32767 (lower runs first), got -1"]
        );
        assert_eq!(
            messages(quote! { version = 0 }),
            ["`version` must be 1 or more, got 0"]
        );
        assert_eq!(
            messages(quote! { version = -99999999999999999999999999999999999999999 }),
            ["`version` must be 1 or more, got -99999999999999999999999999999999999999999"]
        );
        assert_eq!(parse_ok(quote! { retry = 0 }).retry, Some(0));
        assert_eq!(parse_ok(quote! { retry = 1000 }).retry, Some(1000));
        assert_eq!(
            parse_ok(quote! { priority = 32767 }).priority,
            Some(i16::MAX)
        );
    }

    #[test]
    fn refuses_values_of_the_wrong_kind() {
        assert!(messages(quote! { retry = "5" })[0].starts_with("`retry` takes an integer"));
        assert!(messages(quote! { retry = 5u8 })[0].starts_with("`retry` takes a plain integer"));
        assert!(messages(quote! { timeout = 2m })[0].starts_with("`timeout` takes a string"));
        assert!(messages(quote! { upgrade = "up" })[0].starts_with("`upgrade` takes the path"));
        assert!(messages(quote! { backoff = "1s" })[0].starts_with("`backoff` takes a list"));
        assert!(messages(quote! { retry })[0].starts_with("`retry` needs a value"));
    }

    #[test]
    fn checks_names() {
        assert_eq!(
            messages(quote! { queue = "" }),
            ["`queue` must not be empty"]
        );
        assert_eq!(
            messages(quote! { kind = "send invoice" }),
            [
                r#"`kind` must not contain whitespace, control or format characters, got "send invoice""#
            ]
        );
        let long = "q".repeat(129);
        assert_eq!(
            messages(quote! { queue = #long }),
            ["`queue` must be at most 128 bytes, got 129"]
        );
        assert!(check_name("queue", &"q".repeat(128)).is_ok());
    }

    #[test]
    fn names_follow_the_rule_of_the_store() {
        // Format characters were let through, and the worker refused the kind at start.
        assert_eq!(
            messages(quote! { queue = "mail\u{200B}" }),
            [
                r#"`queue` must not contain whitespace, control or format characters, got "mail\u{200b}""#
            ]
        );
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let name = format!("a{c}b");
            assert_eq!(
                check_name("queue", &name).is_ok(),
                job::name_problem(&name).is_none(),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn checks_durations() {
        let zero = messages(quote! { timeout = "0s" });
        assert!(
            zero[0].starts_with("`timeout` must be greater than zero"),
            "{zero:?}"
        );
        let negative = messages(quote! { lease = "-1s" });
        assert!(
            negative[0].starts_with("`lease` must be positive"),
            "{negative:?}"
        );
        assert_eq!(
            messages(quote! { lease = "10ms" }),
            ["`lease` must be at least 30ms (a worker renews it every third), got 10ms"]
        );
    }

    #[test]
    fn upgrade_needs_a_version_of_two_or_more() {
        assert!(messages(quote! { upgrade = up })[0].starts_with("`upgrade` needs `version = 2`"));
        assert!(messages(quote! { version = 1, upgrade = up })[0].contains("not 1"));
        // The refused version has its own error, not a second one about upgrade.
        assert_eq!(messages(quote! { version = 0, upgrade = up }).len(), 1);
        assert!(parse_ok(quote! { version = 2, upgrade = up })
            .upgrade
            .is_some());
        assert_eq!(parse_ok(quote! { version = 2 }).version, Some(2));
    }

    #[test]
    fn backoff_base_must_not_exceed_its_cap() {
        assert_eq!(
            messages(quote! { backoff(base = "2m", cap = "1m") }),
            ["`backoff` base 2m is above its cap 1m"]
        );
        assert_eq!(
            messages(quote! { backoff(base = "2h") }),
            ["`backoff` base 2h is above its cap 1h (the default)"]
        );
        assert_eq!(
            messages(quote! { backoff(cap = "500ms") }),
            ["`backoff` cap 500ms is below its base; the default base is 1s"]
        );
        let half = parse_ok(quote! { backoff(cap = "1s") }).backoff.unwrap();
        assert_eq!((half.base, half.cap), (None, Some(Duration::from_secs(1))));
    }

    #[test]
    fn checks_backoff_keys() {
        assert_eq!(
            messages(quote! { backoff(base = "1s", base = "2s", jitter = true) }),
            [
                "`base` set twice",
                "unknown `backoff` key `jitter`; expected `base` or `cap`"
            ]
        );
        assert!(messages(quote! { backoff() })[0].starts_with("`backoff` needs `base`, `cap`"));
    }

    #[test]
    fn reads_key_templates() {
        use KeyPart::{Field, Text};
        let args = parse_ok(quote! {
            unique = "invoice:{invoice_id}", ordering = "{{account}}:{ account_id }",
            rate_key = "{tenant_id}/{region}", rate = "10/s",
        });
        let unique = args.unique.unwrap();
        assert_eq!((unique.key, unique.method), ("unique", "unique_key"));
        assert_eq!(
            unique.parts,
            [Text("invoice:".into()), Field("invoice_id".into())]
        );
        let ordering = args.ordering.unwrap();
        assert_eq!(
            (ordering.key, ordering.method),
            ("ordering", "ordering_key")
        );
        assert_eq!(
            ordering.parts,
            [Text("{account}:".into()), Field("account_id".into())]
        );
        let rate_key = args.rate_key.unwrap();
        assert_eq!((rate_key.key, rate_key.method), ("rate_key", "rate_key"));
        assert_eq!(
            rate_key.parts,
            [
                Field("tenant_id".into()),
                Text("/".into()),
                Field("region".into())
            ]
        );
        assert!(parse_ok(quote! { rate = "10/s" }).rate_key.is_none());
    }

    #[test]
    fn key_template_errors_name_their_key() {
        for (which, tokens) in [
            (UNIQUE, quote!(unique = "open {brace")),
            (ORDERING, quote!(ordering = "open {brace")),
            (RATE_KEY, quote!(rate = "10/s", rate_key = "open {brace")),
        ] {
            let key = which.key;
            assert_eq!(
                messages(tokens),
                [format!(
                    r#"`{key}` has an unclosed `{{` in "open {{brace"; write `{{{{` for a brace"#
                )]
            );
        }
        assert_eq!(
            messages(quote! { ordering = "a}b" }),
            [r#"`ordering` has an unmatched `}` in "a}b"; write `}}` for a brace"#]
        );
        assert_eq!(
            messages(quote! { ordering = "" }),
            ["`ordering` must not be empty"]
        );
        assert_eq!(
            messages(quote! { ordering = "{a-b}" }),
            ["`ordering` placeholders name a job argument, like `{account_id}`, got `{a-b}`"]
        );
        assert_eq!(
            messages(quote! { rate = "1/s", rate_key = "{a}{{x}}{b}{c}" }),
            [concat!(
                r#"`rate_key` has `{b}` and `{c}` side by side in "{a}{{x}}{b}{c}": put text "#,
                "between them, like `{b}:{c}`, or two jobs with different arguments could have ",
                "the same key"
            )]
        );
        assert_eq!(
            messages(quote! { unique = "x:{}" }),
            ["`unique` placeholders name a job argument, like `{invoice_id}`, got `{}`"]
        );
        assert_eq!(
            messages(quote! { ordering = 5 }),
            [r#"`ordering` takes a string: a key template like "account:{account_id}""#]
        );
        assert_eq!(
            messages(quote! { ordering }),
            [r#"`ordering` needs a value, like `ordering = "account:{account_id}"`"#]
        );
        assert_eq!(
            messages(quote! { unique = "a", ordering = "b", ordering = "c" }),
            ["`ordering` set twice"]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key = "a}b" }),
            [r#"`rate_key` has an unmatched `}` in "a}b"; write `}}` for a brace"#]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key = "" }),
            ["`rate_key` must not be empty"]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key = "tenant:{tenant id}" }),
            ["`rate_key` placeholders name a job argument, like `{tenant_id}`, got `{tenant id}`"]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key = tenant_id }),
            [r#"`rate_key` takes a string: a key template like "tenant:{tenant_id}""#]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key }),
            [r#"`rate_key` needs a value, like `rate_key = "tenant:{tenant_id}"`"#]
        );
        assert_eq!(
            messages(quote! { rate = "10/s", rate_key = "a", rate_key = "b" }),
            ["`rate_key` set twice"]
        );
    }

    #[test]
    fn rate_key_needs_a_rate() {
        let needs = "`rate_key` needs a `rate`, like `rate = \"100/1m\"`: each rate key gets its \
                     own window of the kind's rate limit";
        assert_eq!(
            messages(quote! { rate_key = "tenant:{tenant_id}" }),
            [needs]
        );
        assert_eq!(
            messages(quote! { rate_key = "tenant:{tenant_id}", retry = 3, concurrency = 2 }),
            [needs]
        );
        // The template is kept, so the fields it names are still checked.
        let mut errors = Errors::default();
        let args = parse(quote! { rate_key = "tenant:{tenant_id}" }, &mut errors);
        assert_eq!(errors.len(), 1);
        assert!(args.rate_key.is_some());
        // Either order is fine.
        assert!(parse_ok(quote! { rate_key = "t:{t}", rate = "10/s" })
            .rate_key
            .is_some());
        assert!(parse_ok(quote! { rate = "10/s", rate_key = "t:{t}" })
            .rate_key
            .is_some());
        // A refused `rate` or `rate_key` has its own error, and no second one.
        let refused_rate = messages(quote! { rate = "10", rate_key = "t:{t}" });
        assert_eq!(refused_rate.len(), 1, "{refused_rate:?}");
        assert!(refused_rate[0].starts_with("`rate` must be"));
        assert_eq!(
            messages(quote! { rate_key = "t:{" }),
            [r#"`rate_key` has an unclosed `{` in "t:{"; write `{{` for a brace"#]
        );
        assert_eq!(
            messages(quote! { rate_key }),
            [r#"`rate_key` needs a value, like `rate_key = "tenant:{tenant_id}"`"#]
        );
    }

    #[test]
    fn compensate_takes_a_type_path() {
        let shown = |tokens| {
            let path = parse_ok(tokens).compensate.unwrap();
            quote!(#path).to_string().replace(' ', "")
        };
        assert_eq!(shown(quote! { compensate = RefundCharge }), "RefundCharge");
        assert_eq!(
            shown(quote! { compensate = crate::refunds::RefundCharge, retry = 1 }),
            "crate::refunds::RefundCharge"
        );
        assert_eq!(
            shown(quote! { compensate = Wrapper<Inner> }),
            "Wrapper<Inner>"
        );
        assert_eq!(
            shown(quote! { compensate = <A as Trait>::Job }),
            "<AasTrait>::Job"
        );
        assert!(parse_ok(quote! { retry = 1 }).compensate.is_none());
    }

    #[test]
    fn compensate_refuses_anything_but_a_type_path() {
        let message = "`compensate` takes the job type to enqueue when a job of this kind is \
                       discarded, like `compensate = RefundCharge`";
        assert_eq!(messages(quote! { compensate = "refund" }), [message]);
        assert_eq!(messages(quote! { compensate = refund_charge() }), [message]);
        assert_eq!(
            messages(quote! { compensate = &RefundCharge, retry = 1 }),
            [message]
        );
        assert_eq!(
            messages(quote! { compensate }),
            ["`compensate` needs a value, like `compensate = RefundCharge`"]
        );
        assert_eq!(
            messages(quote! { compensate = A, compensate = B }),
            ["`compensate` set twice"]
        );
        // A path followed by more than a comma: the usual error about what follows.
        let found = messages(quote! { compensate = A B, retry = 1 });
        assert_eq!(found, ["expected `,`"]);
        assert!(messages(quote! { compensates = A })[0].contains("`owner`, `compensate`"));
        assert!(messages(quote! { rate_limit = A })[0].contains("`rate`, `rate_key`, `breaker`"));
    }

    fn rate_of(tokens: TokenStream) -> (u32, Duration) {
        let rate = parse_ok(tokens).rate.unwrap();
        (rate.starts, rate.per)
    }

    #[test]
    fn reads_rates() {
        let secs = Duration::from_secs;
        assert_eq!(rate_of(quote! { rate = "100/1m" }), (100, secs(60)));
        assert_eq!(rate_of(quote! { rate = "10/s" }), (10, secs(1)));
        assert_eq!(rate_of(quote! { rate = "10/minute" }), (10, secs(60)));
        assert_eq!(rate_of(quote! { rate = " 3 / 1h 30m " }), (3, secs(5400)));
        assert_eq!(
            rate_of(quote! { rate = "10000/1ms" }),
            (10_000, Duration::from_millis(1))
        );
        assert_eq!(rate_of(quote! { rate = "1/7days" }), (1, secs(7 * 86_400)));
        assert!(parse_ok(quote! { retry = 1 }).rate.is_none());
    }

    #[test]
    fn checks_rates() {
        let like = r#"like "100/1m" (100 starts a minute) or "10/s""#;
        assert_eq!(
            messages(quote! { rate = "100" }),
            [format!(r#"`rate` must be "N/DURATION", {like}, got "100""#)]
        );
        assert_eq!(
            messages(quote! { rate = "ten/1m" }),
            [format!(
                r#"`rate` must start with a whole number of starts, {like}, got "ten""#
            )]
        );
        assert_eq!(
            messages(quote! { rate = "-1/1m" }),
            [format!(
                r#"`rate` must start with a whole number of starts, {like}, got "-1""#
            )]
        );
        assert_eq!(
            messages(quote! { rate = "1.5/s" }),
            [format!(
                r#"`rate` must start with a whole number of starts, {like}, got "1.5""#
            )]
        );
        for (rate, got) in [
            ("0/1m", "0"),
            ("10001/1m", "10001"),
            (
                "99999999999999999999999999999999999999999/s",
                "99999999999999999999999999999999999999999",
            ),
        ] {
            assert_eq!(
                messages(quote! { rate = #rate }),
                [format!(
                    "`rate` must allow between 1 and 10000 starts per period, got {got}"
                )]
            );
        }
        let soon = messages(quote! { rate = "10/soon" });
        assert!(
            soon[0].starts_with("`rate` period is not a duration ("),
            "{soon:?}"
        );
        assert!(
            soon[0].ends_with(&format!("; write a rate {like}")),
            "{soon:?}"
        );
        assert!(messages(quote! { rate = "10/" })[0].starts_with("`rate` period is not a duration"));
        assert!(
            messages(quote! { rate = "10/30" })[0].starts_with("`rate` period is not a duration")
        );
        assert_eq!(
            messages(quote! { rate = "10/0s" }),
            [format!(
                "`rate` period must be greater than zero; write a rate {like}"
            )]
        );
        assert_eq!(
            messages(quote! { rate = "10/500us" }),
            ["`rate` period must be between 1ms and 7 days, got 500us"]
        );
        assert_eq!(
            messages(quote! { rate = "10/8days" }),
            ["`rate` period must be between 1ms and 7 days, got 8days"]
        );
        assert_eq!(
            messages(quote! { rate = 100 }),
            [format!("`rate` takes a string: starts per period, {like}")]
        );
        assert_eq!(
            messages(quote! { rate }),
            [r#"`rate` needs a value, like `rate = "100/1m"`"#]
        );
        assert_eq!(
            messages(quote! { rate = "1/s", rate = "2/s" }),
            ["`rate` set twice"]
        );
    }

    #[test]
    fn reads_breakers() {
        let full = parse_ok(quote! {
            breaker(failure_percent = 25, min_attempts = 100, window = "5m", cool_down = "1h")
        });
        assert_eq!(
            full.breaker,
            Some(BreakerArgs {
                failure_percent: 25,
                min_attempts: Some(100),
                window: Some(Duration::from_secs(300)),
                cool_down: Some(Duration::from_secs(3600)),
            })
        );
        let least = parse_ok(quote! { breaker(failure_percent = 100), retry = 1 });
        assert_eq!(
            least.breaker,
            Some(BreakerArgs {
                failure_percent: 100,
                min_attempts: None,
                window: None,
                cool_down: None,
            })
        );
        let edges = parse_ok(quote! {
            breaker(cool_down = "30days", window = "1s", min_attempts = 1000000, failure_percent = 1,)
        });
        let edges = edges.breaker.unwrap();
        assert_eq!(
            (edges.failure_percent, edges.min_attempts),
            (1, Some(1_000_000))
        );
        assert_eq!(edges.window, Some(Duration::from_secs(1)));
        assert_eq!(edges.cool_down, Some(Duration::from_secs(30 * 86_400)));
    }

    #[test]
    fn checks_breaker_values() {
        let percent = "`failure_percent` must be between 1 and 100 (the percentage of failed \
                       attempts that trips the breaker)";
        assert_eq!(
            messages(quote! { breaker(failure_percent = 0) }),
            [format!("{percent}, got 0")]
        );
        assert_eq!(
            messages(quote! { breaker(failure_percent = 101) }),
            ["`failure_percent` is too large: at most 100, got 101"]
        );
        assert_eq!(
            messages(quote! { breaker(failure_percent = 50, min_attempts = 0) }),
            [
                "`min_attempts` must be between 1 and 1000000 (the fewest ended attempts in a \
              window for the breaker to trip), got 0"
            ]
        );
        assert!(
            messages(quote! { breaker(failure_percent = 50, min_attempts = 1000001) })[0]
                .ends_with("got 1000001")
        );
        assert_eq!(
            messages(quote! { breaker(failure_percent = 50, window = "500ms") }),
            ["`window` must be between 1s and 30 days, got 500ms"]
        );
        assert_eq!(
            messages(quote! { breaker(failure_percent = 50, cool_down = "31days") }),
            ["`cool_down` must be between 1s and 30 days, got 31days"]
        );
        assert!(
            messages(quote! { breaker(failure_percent = 50, window = "soon") })[0]
                .starts_with("`window` is not a duration")
        );
        assert!(messages(quote! { breaker(failure_percent = "50%") })[0]
            .starts_with("`failure_percent` takes an integer"));
        // A refused key leaves the breaker out, with no second error.
        let mut errors = Errors::default();
        let args = parse(
            quote! { breaker(failure_percent = 50, window = "0s") },
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        assert!(args.breaker.is_none());
    }

    #[test]
    fn checks_breaker_keys() {
        let example = r#"`breaker(failure_percent = 50, min_attempts = 20, window = "1m", cool_down = "5m")`"#;
        assert_eq!(
            messages(quote! { breaker(window = "1m") }),
            [format!(
                "`breaker` needs `failure_percent`, the percentage of failed attempts that \
                 trips it, like {example}"
            )]
        );
        assert_eq!(messages(quote! { breaker() }).len(), 1);
        assert_eq!(
            messages(quote! { breaker(failure_percent = 50, failure_percent = 60, jitter = true) }),
            [
                "`failure_percent` set twice",
                "unknown `breaker` key `jitter`; expected `failure_percent`, `min_attempts`, \
                 `window` or `cool_down`"
            ]
        );
        assert!(messages(quote! { breaker(failures = 50) })[0]
            .contains("trips it is `failure_percent = N`"));
        assert_eq!(
            messages(quote! { breaker(failure_percent = 50), breaker(failure_percent = 60) }),
            ["`breaker` set twice"]
        );
        assert_eq!(
            messages(quote! { breaker = 50 }),
            [format!("`breaker` takes a list, like {example}")]
        );
        assert_eq!(
            messages(quote! { breaker, retry = 1 }),
            [format!("`breaker` needs a list, like {example}")]
        );
        assert_eq!(
            messages(quote! { breaker(failure_percent) }),
            ["`failure_percent` needs a value, like `failure_percent = 50`"]
        );
    }

    #[test]
    fn unknown_keys_get_a_hint_when_one_is_likely() {
        assert!(messages(quote! { max_attempts = 3 })[0].contains("`retry = N` sets N retries"));
    }
}
