//! The `#[job(...)]` attribute of the `job` framework. Use it through the facade crate:
//! `use job::prelude::*;`.
//!
//! The pipeline is one file per step: `attr.rs` parses the attribute's keys (with
//! `duration.rs` for their durations), `valid.rs` checks the function, `expand.rs` generates
//! the code; `errors.rs` collects every mistake so all are shown at once.

mod attr;
mod duration;
mod errors;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Turns an async function into a durable background job.
///
/// ```
/// use job::prelude::*;
///
/// /// Sends an invoice email.
/// #[job(retry = 5, timeout = "2m", queue = "mail")]
/// pub async fn send_invoice(ctx: JobContext, invoice_id: i64, resend: bool) -> Result<(), JobError> {
///     println!("attempt {} of invoice {invoice_id} (resend: {resend})", ctx.attempt());
///     Ok(())
/// }
///
/// // Producer, inside the caller's own transaction: the job exists only if it commits.
/// async fn bill(pool: &sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
///     let mut tx = pool.begin().await?;
///     SendInvoice { invoice_id: 42, resend: false }.enqueue(&mut *tx).await?;
///     tx.commit().await?;
///     SendInvoice { invoice_id: 43, resend: true }
///         .schedule_in(std::time::Duration::from_secs(60))
///         .priority(1)
///         .enqueue(pool)
///         .await?;
///     Ok(())
/// }
///
/// // Worker: registration is by payload type.
/// fn worker(store: PgStore) -> Result<Worker<PgStore>, job::BuildError> {
///     Worker::builder(store).register::<SendInvoice>().queue("mail", 10).build()
/// }
///
/// assert_eq!(<SendInvoice as Job>::KIND, "send_invoice");
/// assert_eq!(<SendInvoice as Job>::OPTIONS.max_attempts, 6);
/// ```
///
/// # What it generates
///
/// Next to the function, which is kept as written (call it directly in unit tests; it only
/// gains `#[allow(clippy::too_many_arguments)]`, since its parameters are the payload's fields):
///
/// - **The payload**: a struct named in UpperCamelCase after the function (`send_invoice` →
///   `SendInvoice`), with the function's visibility and doc comments, and one field per
///   parameter after the context (same name, type and visibility). It derives `Debug`,
///   `Clone`, `Serialize` and `Deserialize`, so every parameter type must implement those and
///   be `Send + Sync + 'static`. A parameter's doc comments and `#[serde(..)]` attributes move
///   to its field: `#[serde(default)] resend: bool` lets older payloads without the field decode.
///   It serializes to a JSON object, the only payload shape every door accepts.
/// - **`impl Job`** for the payload: `KIND` (the function's name unless `kind` is given),
///   `VERSION` and `upgrade` when given, `OPTIONS` with the keys given over
///   `JobOptions::DEFAULT`, `unique_key`, `ordering_key` and `rate_key` when `unique`,
///   `ordering` and `rate_key` are given (their templates filled in from the payload's fields),
///   and `perform`, which calls the function with the context and the fields.
/// - **Typed enqueue helpers** on the payload: `enqueue(executor)` (any sqlx executor: `&pool`,
///   `&mut *tx`, `&mut conn`) and the one-line starts of a `job::Enqueue` builder: `queue`,
///   `priority`, `max_attempts`, `schedule_in` and `run_at`.
///
/// The function's `#[cfg(..)]` attributes apply to all of it. The whole expansion of a job like
/// the one above is in `job-macros/tests/expand/send_invoice.expanded.rs`.
///
/// # The function
///
/// - It is an `async fn`, not `const` nor `unsafe`, without generic, lifetime or const
///   parameters (the payload is decoded by kind, so its types are concrete), and not a method.
/// - Its payload type is its name in UpperCamelCase (`send_invoice` → `SendInvoice`), so a
///   name that would shadow a type its signature or fields use is refused: `result`,
///   `option`, `some`, `none`, `ok`, `err`, `string`, `vec`, `box`, `job`, `job_context`,
///   `job_error`, and `self_`.
/// - Its first parameter is the context, by value: any type whose last path segment is
///   `JobContext` (`JobContext`, `job::JobContext`), with any pattern (`_ctx`).
/// - Every other parameter is a plain name (`mut` allowed; no tuple or struct patterns, no
///   `_`, no `ref`) with an owned type (no references, no `impl Trait`).
/// - It returns a type written as `Result<T, E>` (any path ending in `Result`:
///   `std::io::Result<()>` and `std::fmt::Result` work). `T` is `()` or any `Serialize` type,
///   stored as the job's result when it completes (see the README's "Job results"); `E`
///   converts into `JobError`: `JobError` itself, or any sized
///   `std::error::Error + Send + Sync + 'static`, which makes a failed attempt retryable
///   (`Box<dyn Error + Send + Sync>` is not sized: return `JobError`, and map such an error
///   with `|e| JobError::retryable(e.to_string())`).
///
/// # Secrets stay out of payloads
///
/// A payload is stored as plain JSON in `job.jobs`, returned by `Admin::list`, kept with the
/// dead letters and shown in `Debug` output, so it carries ids, not secrets: the handler looks
/// the secret up (application state through `ctx.state::<T>()`, a vault) by what the payload
/// names. Two aids:
///
/// - A parameter whose type is a known secret wrapper is a compile error: any path ending in
///   `Secret`, `SecretString`, `SecretBox`, `SecretSlice`, `SecretVec`, `SecretBytesMut`,
///   `SecretKey`, `PrivateKey`, `SigningKey`, `Zeroizing`, `SecStr`, `SecUtf8`, `SecVec` or
///   `Password`, also inside `Option<..>`, `Vec<..>`, tuples and arrays. (A macro sees names,
///   not types: an alias of such a type goes unnoticed.)
/// - `#[redact]` on a parameter makes the payload's `Debug` show `<redacted>` for it, for
///   personal data that may be stored but should not reach logs, panic messages or test
///   output. The value is still stored and decoded as usual. A key template (`unique`,
///   `ordering`, `rate_key`) may not name a redacted parameter: keys are shown in errors,
///   logs, `job list` and the dashboard.
///
/// ```
/// use job::prelude::*;
///
/// #[job]
/// async fn send_receipt(
///     _ctx: JobContext,
///     order_id: i64,
///     #[redact] email: String,
/// ) -> Result<(), JobError> {
///     Ok(())
/// }
///
/// let job = SendReceipt { order_id: 7, email: "ada@example.com".into() };
/// assert_eq!(format!("{job:?}"), "SendReceipt { order_id: 7, email: <redacted> }");
/// ```
///
/// ```compile_fail
/// # use job::prelude::*;
/// # mod secrecy { pub struct SecretString(String); }
/// #[job]
/// async fn charge(_ctx: JobContext, api_key: secrecy::SecretString) -> Result<(), JobError> {
///     Ok(())
/// }
/// ```
///
/// # Keys
///
/// All are optional; a key may be given once.
///
/// | key | value | meaning |
/// |---|---|---|
/// | `retry = N` | `0..=1000` | retries after the first attempt: `N + 1` attempts in all |
/// | `timeout = "2m"` | duration | one attempt's time limit |
/// | `lease = "30s"` | duration, at least `30ms` | how long a claim holds the job unrenewed |
/// | `queue = "mail"` | name | the default queue |
/// | `priority = N` | `0..=32767` | the default priority; lower runs first |
/// | `backoff(base = "1s", cap = "1h")` | durations, `base <= cap` | retry delays; either half may be left to its default (1s, 1h) |
/// | `kind = "billing.send_invoice"` | name | the stored kind; defaults to the function's name, without its module: two `#[job] async fn cleanup` in different modules share the kind `cleanup` (one worker refuses to register both; a worker registering one runs the other's jobs when their payloads decode alike), so give common names a `kind` |
/// | `version = N` | `1..` | the payload's version; defaults to 1 |
/// | `upgrade = path` | a function | turns older payloads into the current version; needs `version >= 2` |
/// | `unique = "invoice:{invoice_id}"` | a template of `{parameter}` names | each job's unique key, from its payload: at most one active job per key (see the README's unique jobs) |
/// | `ordering = "account:{account_id}"` | a template of `{parameter}` names | each job's ordering key: jobs with the same key run one at a time, in enqueue order, across every worker (see the README's per-key ordering) |
/// | `concurrency = N` | `1..` | at most `N` running jobs of the kind across every worker, enforced by the claim |
/// | `owner = "billing"` | a name (1–128 bytes) | the team that owns the kind: a label on its metrics and shown with its dead letters |
/// | `compensate = RefundCharge` | a job type | enqueued in the same transaction that discards a job of this kind, with an argument `discarded: job::Discarded` (the job's id, kind, payload and last error); see the README's compensation |
/// | `rate = "100/1m"` | `"N/DURATION"`: `N` in `1..=10000`, a period of `1ms` to 7 days | at most `N` attempts of the kind start in any period, across every worker; the rest wait, available. A bare unit is one of it: `"10/s"` is `"10/1s"`. With `rate_key`, each key has its own window of `N` starts (jobs without a key share one) |
/// | `rate_key = "tenant:{tenant_id}"` | a template of `{parameter}` names; needs `rate` | each job's rate key, from its payload: each key has its own window of the kind's `rate`, so one busy key does not slow the others; `.rate_key(..)` on an enqueue overrides it |
/// | `breaker(failure_percent = 50, min_attempts = 20, window = "1m", cool_down = "5m")` | `failure_percent` in `1..=100` (required), `min_attempts` in `1..=1000000`, `window` and `cool_down` durations of `1s` to 30 days | pauses the kind across every worker when, within a `window`, at least `min_attempts` attempts ended and `failure_percent` percent or more of them failed, until an operator resumes it or `cool_down` has passed; the keys left out default to 20, 1m and 5m (`job::Breaker::new`) |
///
/// Durations are [humantime](https://docs.rs/humantime) text, parsed at compile time:
/// `"500ms"`, `"30s"`, `"2m"`, `"1h 30m"`, `"2 minutes"`; zero, negative and over 100 years
/// are refused. Names are non-empty, at most 128 bytes, with no whitespace, control or format
/// characters (the store's rule, `job::name_problem`: zero-width spaces and bidirectional
/// overrides are refused too).
///
/// `upgrade` names a `fn(i32, serde_json::Value) -> Result<serde_json::Value, JobError>`
/// called with the stored version and payload of every job older than `version`. A
/// `version >= 2` without `upgrade` is allowed: older payloads are then discarded as poison
/// (`Job::upgrade`'s default), which suits a kind whose old jobs are worthless.
///
/// ```
/// use job::prelude::*;
/// use serde_json::{json, Value};
///
/// /// Version 1 had `email`; version 2 calls it `address` and adds `cc`.
/// #[job(version = 2, upgrade = upgrade_welcome, backoff(base = "5s"))]
/// async fn send_welcome(
///     _ctx: JobContext,
///     address: String,
///     #[serde(default)] cc: Vec<String>,
/// ) -> Result<(), JobError> {
///     println!("welcome {address}, cc {cc:?}");
///     Ok(())
/// }
///
/// fn upgrade_welcome(from_version: i32, mut payload: Value) -> Result<Value, JobError> {
///     match from_version {
///         1 => Ok(json!({ "address": payload["email"].take() })),
///         v => Err(JobError::terminal(format!("no upgrade from version {v}"))),
///     }
/// }
///
/// let v1 = json!({ "email": "ada@example.com" });
/// let v2 = <SendWelcome as Job>::upgrade(1, v1).unwrap();
/// assert_eq!(v2, json!({ "address": "ada@example.com" }));
/// ```
///
/// `rate` and `breaker` protect what a kind calls: the rate limit spaces its starts out
/// across every worker (which must all agree on it), `rate_key` gives each key (a tenant, an
/// account) its own window of it, the breaker pauses the kind while too many of its attempts
/// fail.
///
/// ```
/// use job::prelude::*;
///
/// /// A partner API that allows each account 100 calls a minute and is sometimes down for a
/// /// while.
/// #[job(
///     rate = "100/1m",
///     rate_key = "account:{account_id}",
///     breaker(failure_percent = 50, cool_down = "10m")
/// )]
/// async fn sync_partner(_ctx: JobContext, account_id: i64) -> Result<(), JobError> {
///     let _ = account_id;
///     Ok(())
/// }
///
/// let options = <SyncPartner as Job>::OPTIONS;
/// assert_eq!(options.rate, Some(job::RateLimit::new(100, std::time::Duration::from_secs(60))));
/// assert_eq!(SyncPartner { account_id: 7 }.rate_key().as_deref(), Some("account:7"));
/// let breaker = options.breaker.unwrap();
/// assert_eq!((breaker.failure_percent, breaker.min_attempts), (50, 20));
/// assert_eq!(breaker.cool_down, std::time::Duration::from_secs(600));
/// ```
///
/// # Errors
///
/// Every mistake is reported at once, at the key or the part of the signature it is about; the
/// function itself is still emitted so the rest of the crate keeps compiling.
///
/// ```compile_fail
/// # use job::prelude::*;
/// #[job(retry = 5, retry = 6, timeout = "soon")] // `retry` set twice; not a duration
/// fn not_async(ctx: JobContext) -> Result<(), JobError> { Ok(()) } // must be `async`
/// ```
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::job(attr.into(), item.into()).into()
}
