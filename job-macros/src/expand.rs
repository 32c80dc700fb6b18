//! Generates, next to the function, its payload struct, the `Job` impl and the typed enqueue
//! helpers. Everything refers to `::job::..` paths only, so user crates need no imports.

use std::time::Duration;

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn};

use crate::attr::{self, BackoffArgs, BreakerArgs, JobArgs, KeyPart, KeyTemplate, RateArgs};
use crate::errors::Errors;
use crate::valid::{self, Field, JobFn};

/// The whole pipeline: parse the attribute, check the function, generate. With mistakes, the
/// function is still emitted (so IDEs keep working) with one error per mistake; the payload
/// is emitted too when the function itself is fine, to spare its users follow-up errors.
pub(crate) fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = attr::parse(attr, &mut errors);
    let mut item: ItemFn = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(_) => {
            let message = "`#[job]` goes on an `async fn`, like \
                           `async fn send_invoice(ctx: JobContext, invoice_id: i64) -> Result<(), JobError>`";
            errors.push(syn::Error::new(Span::call_site(), message));
            let errors = errors.into_compile_errors();
            return quote! { #item #errors };
        }
    };
    let generated = valid::check(&mut item, &mut errors).map(|job| {
        // A template naming an unknown argument has its error, and no method.
        let key_fns: TokenStream = [&args.unique, &args.ordering, &args.rate_key]
            .into_iter()
            .flatten()
            .filter(|template| check_template(&job, template, &mut errors))
            .filter_map(|template| key_fn(template, &job.fields))
            .collect();
        generate(&job, &args, key_fns)
    });
    if generated.is_some() {
        // Its parameters are the payload's fields, and a payload may well have many.
        item.attrs
            .push(syn::parse_quote!(#[allow(clippy::too_many_arguments)]));
    }
    let errors = errors.into_compile_errors();
    quote! {
        #item
        #generated
        #errors
    }
}

/// Every placeholder of a key template (`unique`, `ordering`, `rate_key`) must name an argument
/// of the job, and not a `#[redact]` one: the key is shown where the payload's `Debug` is not.
fn check_template(job: &JobFn, template: &KeyTemplate, errors: &mut Errors) -> bool {
    let known: Vec<String> = job
        .fields
        .iter()
        .map(|f| f.name.unraw().to_string())
        .collect();
    let mut ok = true;
    for part in &template.parts {
        if let KeyPart::Field(name) = part {
            if job
                .fields
                .iter()
                .any(|f| f.redact && f.name.unraw() == name)
            {
                ok = false;
                let key = template.key;
                errors.push(syn::Error::new(
                    template.span,
                    format!(
                        "`{key}` names `{{{name}}}`, a `#[redact]` argument: a key is no \
                         secret (a duplicate's error, logs, `job list` and the dashboard show \
                         it). Key on what identifies the job without revealing it (an id, a \
                         hash the application computes)"
                    ),
                ));
                continue;
            }
            if !known.contains(name) {
                ok = false;
                let listed = if known.is_empty() {
                    "the job has no arguments".to_owned()
                } else {
                    format!("its arguments are `{}`", known.join("`, `"))
                };
                let key = template.key;
                errors.push(syn::Error::new(
                    template.span,
                    format!(
                        "`{key}` names `{{{name}}}`, which is not an argument of the job; {listed}"
                    ),
                ));
            }
        }
    }
    ok
}

/// `fn unique_key` (`fn ordering_key`, `fn rate_key`) filling the payload's fields into the
/// `unique` (`ordering`, `rate_key`) template. With several placeholders, the first character
/// of the text after each value but the last is escaped in the values (`job_core`'s `model/key.rs` says how and why), so that different
/// arguments never make the same key.
fn key_fn(template: &KeyTemplate, fields: &[Field]) -> Option<TokenStream> {
    let placeholders = template
        .parts
        .iter()
        .filter(|part| matches!(part, KeyPart::Field(_)))
        .count();
    let mut ends = String::new();
    let mut seen = 0;
    let mut pieces = Vec::new();
    for part in &template.parts {
        match part {
            KeyPart::Text(t) => {
                if seen > 0 && seen < placeholders {
                    // Where the value before it ends: the first character is enough.
                    ends.extend(t.chars().next());
                }
                pieces.push(quote!(key.text(#t);));
            }
            KeyPart::Field(name) => {
                seen += 1;
                let field = fields.iter().find(|f| f.name.unraw() == name)?;
                let ident = &field.name;
                pieces.push(quote!(key.value(&self.#ident);));
            }
        }
    }
    let method = Ident::new(template.method, Span::call_site());
    Some(quote! {
        fn #method(&self) -> ::core::option::Option<::std::string::String> {
            let mut key = ::job::__private::KeyWriter::new(#ends);
            #(#pieces)*
            ::core::option::Option::Some(key.finish())
        }
    })
}

fn generate(job: &JobFn, args: &JobArgs, key_fns: TokenStream) -> TokenStream {
    let JobFn {
        vis,
        name,
        docs,
        cfgs,
        fields,
        output,
    } = job;
    let fn_name = name.unraw().to_string();
    let payload = format_ident!("{}", upper_camel(&fn_name), span = name.span());

    // Not an intra-doc link: the function may be private where its payload is re-exported.
    let link = format!("`{fn_name}`");
    let mut struct_docs = quote!(#(#docs)*);
    if !docs.is_empty() {
        struct_docs.extend(quote!(#[doc = ""]));
    }
    let generated_doc = format!(" Payload of the {link} job, generated by `#[job]`.");
    struct_docs.extend(quote!(#[doc = #generated_doc]));
    let field_defs = fields.iter().map(|field| {
        let Field {
            attrs, name, ty, ..
        } = field;
        let has_doc = attrs.iter().any(|a| a.path().is_ident("doc"));
        let doc = (!has_doc).then(|| {
            let doc = format!(" The `{}` parameter of {link}.", name.unraw());
            quote!(#[doc = #doc])
        });
        quote! {
            #doc
            #(#attrs)*
            #vis #name: #ty
        }
    });

    let kind = args.kind.clone().unwrap_or_else(|| fn_name.clone());
    let version = args.version.map(|v| {
        let v = Literal::i32_unsuffixed(v);
        quote!(const VERSION: i32 = #v;)
    });
    let options = options(args);
    let upgrade = args.upgrade.as_ref().map(|path| {
        // Spanned at the path, so a function of the wrong signature is reported there.
        quote_spanned! {path.span()=>
            fn upgrade(
                from_version: i32,
                payload: ::job::__private::serde_json::Value,
            ) -> ::core::result::Result<::job::__private::serde_json::Value, ::job::JobError> {
                #path(from_version, payload)
            }
        }
    });
    // Mixed-site: never the same name as a parameter of the user's function.
    let ctx = Ident::new("ctx", Span::mixed_site());
    // Each field bound to a mixed-site name of its own, so that no binding can shadow the
    // function called below: a parameter may have the function's name (`email: String` of
    // `async fn email`).
    let names: Vec<_> = fields.iter().map(|f| &f.name).collect();
    let bound: Vec<_> = (0..fields.len())
        .map(|i| format_ident!("field{}", i, span = Span::mixed_site()))
        .collect();
    let destructure = (!names.is_empty()).then(|| quote!(let Self { #(#names: #bound),* } = self;));
    // Spanned at the return type, so an error type without `Into<JobError>` is reported there.
    let mut callee = name.clone();
    callee.set_span(*output);
    // The `Ok` value becomes the job's result (none for `()`), set before the function's
    // context goes out of reach.
    let view = Ident::new("view", Span::mixed_site());
    let returned = Ident::new("returned", Span::mixed_site());
    let call = quote_spanned! {*output=>
        let #view = ::core::clone::Clone::clone(&#ctx);
        let #returned = #callee(#ctx #(, #bound)*)
            .await
            .map_err(<_ as ::core::convert::Into<::job::JobError>>::into)?;
        ::job::__private::set_returned_result(&#view, &#returned)
    };

    // With a `#[redact]` field, `Debug` is written out so that it shows `<redacted>` there.
    let redacting = fields.iter().any(|f| f.redact);
    let derive_debug = (!redacting).then(|| quote!(Debug,));
    let debug = redacting.then(|| {
        let name = payload.to_string();
        let shown = fields.iter().map(|f| {
            let ident = &f.name;
            let label = ident.unraw().to_string();
            if f.redact {
                quote!(.field(#label, &::core::format_args!("<redacted>")))
            } else {
                quote!(.field(#label, &self.#ident))
            }
        });
        quote! {
            #(#cfgs)*
            impl ::core::fmt::Debug for #payload {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#name) #(#shown)* .finish()
                }
            }
        }
    });

    quote! {
        #struct_docs
        #(#cfgs)*
        #[derive(
            #derive_debug
            Clone,
            ::job::__private::serde::Serialize,
            ::job::__private::serde::Deserialize,
        )]
        #[serde(crate = "::job::__private::serde")]
        #vis struct #payload {
            #(#field_defs,)*
        }

        #debug

        #(#cfgs)*
        impl ::job::Job for #payload {
            const KIND: &'static str = #kind;
            #version
            #options
            #upgrade
            #key_fns

            // The function's error may already be a `JobError`.
            #[allow(clippy::useless_conversion)]
            async fn perform(
                self,
                #ctx: ::job::JobContext,
            ) -> ::core::result::Result<(), ::job::JobError> {
                #destructure
                #call
            }
        }

        #(#cfgs)*
        impl #payload {
            /// Enqueues this job with its kind's defaults through `executor` of any backend:
            /// `&pool`, or `&mut *tx` to make it part of your own transaction.
            #vis async fn enqueue<B, E: ::job::EnqueueExecutor<B>>(
                self,
                executor: E,
            ) -> ::core::result::Result<::job::JobId, ::job::EnqueueError> {
                ::job::Enqueue::new(self).enqueue(executor).await
            }

            /// Starts an enqueue on `queue` instead of the kind's default queue.
            #vis fn queue(
                self,
                queue: impl ::core::convert::Into<::std::string::String>,
            ) -> ::job::Enqueue<Self> {
                ::job::Enqueue::new(self).queue(queue)
            }

            /// Starts an enqueue with this priority (lower runs first).
            #vis fn priority(self, priority: i16) -> ::job::Enqueue<Self> {
                ::job::Enqueue::new(self).priority(priority)
            }

            /// Starts an enqueue with this many attempts in all.
            #vis fn max_attempts(self, max_attempts: i32) -> ::job::Enqueue<Self> {
                ::job::Enqueue::new(self).max_attempts(max_attempts)
            }

            /// Starts an enqueue that may run only after `delay`, on the database's clock.
            #vis fn schedule_in(self, delay: ::core::time::Duration) -> ::job::Enqueue<Self> {
                ::job::Enqueue::new(self).schedule_in(delay)
            }

            /// Starts an enqueue that may run only from `at` on.
            #vis fn run_at(
                self,
                at: ::job::__private::chrono::DateTime<::job::__private::chrono::Utc>,
            ) -> ::job::Enqueue<Self> {
                ::job::Enqueue::new(self).run_at(at)
            }
        }
    }
}

/// The fields of `job_core::JobOptions`, each set by one key; the `every-key` pass test sets
/// them all.
const JOB_OPTIONS_FIELDS: usize = 11;

/// `const OPTIONS` with the keys that were given over `JobOptions::DEFAULT`; nothing when
/// none was.
fn options(args: &JobArgs) -> Option<TokenStream> {
    let mut set = Vec::new();
    if let Some(queue) = &args.queue {
        set.push(quote!(queue: #queue));
    }
    if let Some(priority) = args.priority {
        let priority = Literal::i16_unsuffixed(priority);
        set.push(quote!(priority: #priority));
    }
    if let Some(retry) = args.retry {
        let attempts = Literal::u32_unsuffixed(retry + 1);
        set.push(quote!(max_attempts: #attempts));
    }
    if let Some(timeout) = args.timeout {
        let timeout = duration(timeout);
        set.push(quote!(timeout: #timeout));
    }
    if let Some(lease) = args.lease {
        let lease = duration(lease);
        set.push(quote!(lease: #lease));
    }
    if let Some(BackoffArgs { base, cap }) = &args.backoff {
        let base = base.map_or_else(|| quote!(::job::Backoff::DEFAULT.base), duration);
        let cap = cap.map_or_else(|| quote!(::job::Backoff::DEFAULT.cap), duration);
        set.push(quote!(backoff: ::job::Backoff::new(#base, #cap)));
    }
    if let Some(limit) = args.concurrency {
        let limit = Literal::u32_unsuffixed(limit);
        set.push(quote!(concurrency: ::core::option::Option::Some(#limit)));
    }
    if let Some(owner) = &args.owner {
        set.push(quote!(owner: ::core::option::Option::Some(#owner)));
    }
    if let Some(path) = &args.compensate {
        // Spanned at the path, so a type that is not a `Job` is reported there.
        let of = quote_spanned!(path.span()=> ::job::Compensate::of::<#path>());
        set.push(quote!(compensate: ::core::option::Option::Some(#of)));
    }
    if let Some(RateArgs { starts, per }) = &args.rate {
        let starts = Literal::u32_unsuffixed(*starts);
        let per = duration(*per);
        set.push(quote!(
            rate: ::core::option::Option::Some(::job::RateLimit::new(#starts, #per))
        ));
    }
    if let Some(BreakerArgs {
        failure_percent,
        min_attempts,
        window,
        cool_down,
    }) = &args.breaker
    {
        let percent = Literal::u8_unsuffixed(*failure_percent);
        // The keys left out take `Breaker::new`'s defaults.
        let default = quote!(::job::Breaker::new(#percent));
        let min_attempts = min_attempts.map_or_else(
            || quote!(#default.min_attempts),
            |n| Literal::u32_unsuffixed(n).into_token_stream(),
        );
        let window = window.map_or_else(|| quote!(#default.window), duration);
        let cool_down = cool_down.map_or_else(|| quote!(#default.cool_down), duration);
        set.push(quote!(
            breaker: ::core::option::Option::Some(::job::Breaker {
                failure_percent: #percent,
                min_attempts: #min_attempts,
                window: #window,
                cool_down: #cool_down,
            })
        ));
    }
    if set.is_empty() {
        return None;
    }
    // With every field given, the update fills nothing; it stays for fields added later.
    let allow =
        (set.len() == JOB_OPTIONS_FIELDS).then(|| quote!(#[allow(clippy::needless_update)]));
    Some(quote! {
        #allow
        const OPTIONS: ::job::JobOptions = ::job::JobOptions {
            #(#set,)*
            ..::job::JobOptions::DEFAULT
        };
    })
}

/// A `const` expression for `d` in the largest whole unit: `Duration::from_secs(120)`.
fn duration(d: Duration) -> TokenStream {
    let (unit, n) = if d.subsec_nanos() == 0 {
        ("from_secs", d.as_secs() as u128)
    } else if d.subsec_nanos() % 1_000_000 == 0 {
        ("from_millis", d.as_millis())
    } else if d.subsec_nanos() % 1_000 == 0 {
        ("from_micros", d.as_micros())
    } else {
        ("from_nanos", d.as_nanos())
    };
    let unit = Ident::new(unit, Span::call_site());
    let n = Literal::u128_unsuffixed(n);
    quote!(::core::time::Duration::#unit(#n))
}

/// `send_invoice` → `SendInvoice`. A name that would not start with a letter gets a `Job`
/// prefix (`_2fa` → `Job2fa`).
pub(crate) fn upper_camel(snake: &str) -> String {
    let mut camel: String = snake
        .split('_')
        .flat_map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars))
                .into_iter()
                .flatten()
        })
        .collect();
    if !camel.starts_with(|c: char| c.is_alphabetic()) {
        camel.insert_str(0, "Job");
    }
    camel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_names_are_upper_camel_case() {
        assert_eq!(upper_camel("send_invoice"), "SendInvoice");
        assert_eq!(upper_camel("cleanup"), "Cleanup");
        assert_eq!(upper_camel("send_v2_mail"), "SendV2Mail");
        assert_eq!(upper_camel("__private_job_"), "PrivateJob");
        assert_eq!(upper_camel("SendInvoice"), "SendInvoice");
        assert_eq!(upper_camel("_2fa"), "Job2fa");
    }

    #[test]
    fn durations_use_their_largest_whole_unit() {
        let show = |d| duration(d).to_string().replace(' ', "");
        assert_eq!(
            show(Duration::from_secs(120)),
            "::core::time::Duration::from_secs(120)"
        );
        assert_eq!(
            show(Duration::from_millis(1500)),
            "::core::time::Duration::from_millis(1500)"
        );
        assert_eq!(
            show(Duration::from_micros(3)),
            "::core::time::Duration::from_micros(3)"
        );
        assert_eq!(
            show(Duration::from_nanos(7)),
            "::core::time::Duration::from_nanos(7)"
        );
    }

    #[test]
    fn a_valid_job_expands_to_items_that_parse() {
        let out = job(
            quote!(retry = 5, timeout = "2m", queue = "mail"),
            quote! {
                /// Sends an invoice email.
                pub async fn send_invoice(ctx: JobContext, invoice_id: i64, resend: bool)
                    -> Result<(), JobError> { Ok(()) }
            },
        );
        let file: syn::File = syn::parse2(out).unwrap();
        assert_eq!(file.items.len(), 4, "fn, struct, impl Job, impl helpers");
        let text = quote!(#file).to_string();
        assert!(text.contains("max_attempts : 6"), "{text}");
        assert!(!text.contains("compile_error"), "{text}");
    }

    /// The expansion of the README's example, kept readable in
    /// `tests/expand/send_invoice.expanded.rs`. After a deliberate change, regenerate it with
    /// `JOB_MACROS_OVERWRITE=1 cargo test -p job-macros` and read the diff.
    #[test]
    fn send_invoice_expands_as_its_snapshot_shows() {
        let out = job(
            quote!(retry = 5, timeout = "2m", queue = "mail"),
            quote! {
                /// Sends an invoice email.
                pub async fn send_invoice(
                    ctx: JobContext,
                    invoice_id: i64,
                    resend: bool,
                ) -> Result<(), JobError> {
                    let _ = (ctx, invoice_id, resend);
                    Ok(())
                }
            },
        );
        assert_snapshot("send_invoice", out);
    }

    /// The key templates' methods, kept in `tests/expand/charge_account.expanded.rs`.
    #[test]
    fn key_templates_expand_as_their_snapshot_shows() {
        let out = job(
            quote!(
                unique = "charge:{charge_id}",
                ordering = "account:{account_id}"
            ),
            quote! {
                async fn charge_account(
                    _ctx: JobContext,
                    account_id: i64,
                    r#charge_id: String,
                ) -> Result<(), JobError> {
                    Ok(())
                }
            },
        );
        assert_snapshot("charge_account", out);
    }

    /// A compensating job's kind and queue, kept in `tests/expand/charge_card.expanded.rs`.
    #[test]
    fn compensate_expands_as_its_snapshot_shows() {
        let out = job(
            quote!(
                queue = "payments",
                compensate = crate::refunds::RefundCharge
            ),
            quote! {
                async fn charge_card(_ctx: JobContext, order_id: i64) -> Result<(), JobError> {
                    let _ = order_id;
                    Ok(())
                }
            },
        );
        assert_snapshot("charge_card", out);
    }

    /// A rate limit with a rate key and a breaker, one key of it left to its default, kept in
    /// `tests/expand/sync_partner.expanded.rs`.
    #[test]
    fn rate_and_breaker_expand_as_their_snapshot_shows() {
        let out = job(
            quote!(
                rate = "100/1m",
                rate_key = "account:{account_id}",
                breaker(failure_percent = 50, window = "2m", cool_down = "10m")
            ),
            quote! {
                async fn sync_partner(_ctx: JobContext, account_id: i64) -> Result<(), JobError> {
                    let _ = account_id;
                    Ok(())
                }
            },
        );
        assert_snapshot("sync_partner", out);
    }

    /// Compares `out`, unparsed, with `tests/expand/{name}.expanded.rs`; rewrites the file
    /// instead with `JOB_MACROS_OVERWRITE` set.
    fn assert_snapshot(name: &str, out: TokenStream) {
        let path = format!(
            "{}/tests/expand/{name}.expanded.rs",
            env!("CARGO_MANIFEST_DIR")
        );
        let shown = prettyplease::unparse(&syn::parse2(out).unwrap());
        if std::env::var_os("JOB_MACROS_OVERWRITE").is_some() {
            std::fs::write(&path, &shown).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap();
        assert!(
            shown == expected,
            "the expansion differs from {path}:\n{shown}"
        );
    }

    #[test]
    fn a_template_naming_an_unknown_argument_gets_an_error_and_no_method() {
        let out = job(
            quote!(
                unique = "invoice:{invoice_id}",
                ordering = "account:{acount_id}"
            ),
            quote! {
                async fn send_invoice(_ctx: JobContext, invoice_id: i64, account_id: i64)
                    -> Result<(), JobError> { Ok(()) }
            },
        );
        let text = out.to_string();
        assert!(text.contains("fn unique_key"), "{text}");
        assert!(!text.contains("fn ordering_key"), "{text}");
        assert!(
            text.contains(
                "`ordering` names `{acount_id}`, which is not an argument of the job; \
                 its arguments are `invoice_id`, `account_id`"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_rate_key_naming_an_unknown_argument_gets_an_error_and_no_method() {
        let out = job(
            quote!(rate = "10/s", rate_key = "tenant:{tenant}"),
            quote! {
                async fn sync(_ctx: JobContext, tenant_id: i64) -> Result<(), JobError> { Ok(()) }
            },
        );
        let text = out.to_string();
        assert!(!text.contains("fn rate_key"), "{text}");
        assert!(
            text.contains(
                "`rate_key` names `{tenant}`, which is not an argument of the job; \
                 its arguments are `tenant_id`"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_rate_key_without_a_rate_is_reported_with_its_fields() {
        let out = job(
            quote!(rate_key = "tenant:{tenant}"),
            quote! {
                async fn sync(_ctx: JobContext, tenant_id: i64) -> Result<(), JobError> { Ok(()) }
            },
        );
        let text = out.to_string();
        assert!(text.contains("`rate_key` needs a `rate`"), "{text}");
        assert!(
            text.contains("`rate_key` names `{tenant}`, which is not an argument"),
            "{text}"
        );
    }

    #[test]
    fn a_wrong_function_expands_to_itself_and_its_errors() {
        let out = job(
            quote!(retry = 5),
            quote! { fn f(ctx: JobContext) -> Result<(), E> {} },
        );
        let file: syn::File = syn::parse2(out).unwrap();
        assert_eq!(file.items.len(), 2, "the fn and one compile_error!");
    }
}
