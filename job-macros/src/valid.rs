//! Checks the function under `#[job]` and takes from it what the payload is made of.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type,
    Visibility,
};

use crate::errors::Errors;

/// What the expansion needs from a function that passed every check.
pub(crate) struct JobFn {
    /// The function's visibility, given to the payload, its fields and its helpers.
    pub(crate) vis: Visibility,
    /// The function's name.
    pub(crate) name: Ident,
    /// Its doc comments, for the payload.
    pub(crate) docs: Vec<Attribute>,
    /// Its `#[cfg]`s, for every generated item.
    pub(crate) cfgs: Vec<Attribute>,
    /// The parameters after the context, in order.
    pub(crate) fields: Vec<Field>,
    /// The written return type, where a wrong error type is reported.
    pub(crate) output: Span,
}

/// A parameter after the context: a field of the payload.
pub(crate) struct Field {
    /// The parameter's doc comments and `#[serde(..)]` attributes, moved to the field.
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) name: Ident,
    pub(crate) ty: Type,
    /// `#[redact]`: the payload's `Debug` shows `<redacted>` instead of the value.
    pub(crate) redact: bool,
}

/// Types that hold a secret, by the last segment of their path (`secrecy::SecretString`,
/// `zeroize::Zeroizing<..>`, `ed25519_dalek::SigningKey`, ...): none may be a payload field.
const SECRET_WRAPPERS: &[&str] = &[
    "Secret",
    "SecretString",
    "SecretBox",
    "SecretSlice",
    "SecretVec",
    "SecretBytesMut",
    "SecretKey",
    "PrivateKey",
    "SigningKey",
    "Zeroizing",
    "SecStr",
    "SecUtf8",
    "SecVec",
    "Password",
];

/// Checks `item`, recording every mistake in `errors`. The parameters' `#[serde(..)]` and doc
/// attributes are moved out of `item` in any case, so the function alone still compiles.
/// Returns `None` when the function cannot make a job.
pub(crate) fn check(item: &mut ItemFn, errors: &mut Errors) -> Option<JobFn> {
    let field_attrs = take_field_attrs(item);
    let before = errors.len();
    let sig = &item.sig;

    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            "a `#[job]` function cannot be `const`",
        ));
    }
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "a `#[job]` function must be `async`: the worker runs it as a future",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(syn::Error::new(
            unsafety.span,
            "a `#[job]` function cannot be `unsafe`: the worker calls it with no one to uphold its contract",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "a `#[job]` function cannot have an ABI",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "a `#[job]` function cannot have generic, lifetime or const parameters: its \
             payload is stored as JSON and decoded by kind, so every type must be concrete",
        ));
    }

    check_payload_name(sig, errors);
    check_context(item, errors);

    let mut fields = Vec::new();
    for (arg, attrs) in item.sig.inputs.iter().zip(field_attrs).skip(1) {
        let FnArg::Typed(arg) = arg else {
            continue; // `self` is reported by `check_context`
        };
        if is_context(&arg.ty) {
            continue; // a misplaced or second context, reported by `check_context`
        }
        for cfg in arg
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
        {
            errors.push(syn::Error::new_spanned(
                cfg,
                "a `#[job]` parameter cannot be conditional (`#[cfg]`, `#[cfg_attr]`): it is a \
                 field of the payload, which builds with and without the condition must \
                 read alike. Put the `#[cfg]` on the whole `#[job]` function, or make the \
                 parameter an `Option`",
            ));
        }
        let name = match &*arg.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(p.ident.clone()),
            Pat::Wild(_) => {
                errors.push(syn::Error::new_spanned(
                    &arg.pat,
                    "a `#[job]` parameter needs a name: it becomes a field of the payload",
                ));
                None
            }
            _ => {
                errors.push(syn::Error::new_spanned(
                    &arg.pat,
                    "a `#[job]` parameter must be a plain name (`mut` is allowed), like \
                     `invoice_id: i64`: it becomes a field of the payload",
                ));
                None
            }
        };
        let owned = match &*arg.ty {
            Type::Reference(_) => Err(
                "a `#[job]` parameter is stored in the payload, so it must own its data: \
                 use `String` for `&str`, `Vec<T>` for `&[T]`",
            ),
            Type::ImplTrait(_) => Err(
                "a `#[job]` parameter cannot be `impl Trait`: the payload needs a concrete type",
            ),
            _ => Ok(()),
        };
        if let Err(message) = owned {
            errors.push(syn::Error::new_spanned(&arg.ty, message));
        }
        if let (Some(name), Some(wrapper)) = (&name, secret_wrapper(&arg.ty)) {
            errors.push(syn::Error::new_spanned(
                wrapper,
                format!(
                    "`{}` would store a secret (`{}`) in the payload: a payload is plain JSON \
                     in `job.jobs`, listed by `Admin::list` and kept with dead letters. Pass \
                     what the handler can look the secret up by (a key id, a vault path) and \
                     read the secret from application state (`ctx.state::<Secrets>()`)",
                    name.unraw(),
                    wrapper.ident
                ),
            ));
        }
        let (redacts, attrs): (Vec<Attribute>, Vec<Attribute>) =
            attrs.into_iter().partition(|a| a.path().is_ident("redact"));
        for extra in redacts.iter().skip(1) {
            errors.push(syn::Error::new_spanned(extra, "`#[redact]` given twice"));
        }
        if let Some(redact) = redacts.first() {
            if !matches!(redact.meta, syn::Meta::Path(_)) {
                errors.push(syn::Error::new_spanned(
                    redact,
                    "`#[redact]` takes no arguments",
                ));
            }
        }
        if let Some(name) = name {
            fields.push(Field {
                attrs,
                name,
                ty: (*arg.ty).clone(),
                redact: !redacts.is_empty(),
            });
        }
    }

    let output = check_output(&item.sig.output, item.sig.paren_token.span.close(), errors);

    if errors.len() > before {
        return None;
    }
    Some(JobFn {
        vis: item.vis.clone(),
        name: item.sig.ident.clone(),
        docs: attrs_named(&item.attrs, "doc"),
        cfgs: attrs_named(&item.attrs, "cfg"),
        fields,
        output,
    })
}

/// The first parameter must be the context, taken by value; no other parameter may be one.
fn check_context(item: &ItemFn, errors: &mut Errors) {
    const LIKE: &str = "like `ctx: JobContext`";
    let inputs = &item.sig.inputs;
    for (i, arg) in inputs.iter().enumerate() {
        match arg {
            FnArg::Receiver(receiver) => errors.push(syn::Error::new_spanned(
                receiver,
                "a `#[job]` function cannot take `self`: write a free function, whose parameters \
                 after the context become the payload's fields",
            )),
            FnArg::Typed(arg) if i > 0 && is_context(&arg.ty) => {
                let message = match inputs.first() {
                    // After `self`, reported above, the context is where it should be.
                    Some(FnArg::Receiver(_)) if i == 1 => continue,
                    Some(FnArg::Typed(first)) if is_context(&first.ty) => {
                        "a `#[job]` function takes one context: only its first parameter can be one"
                    }
                    _ => "the context must be the first parameter of a `#[job]` function",
                };
                errors.push(syn::Error::new_spanned(arg, message));
            }
            FnArg::Typed(_) => {}
        }
    }
    match inputs.first() {
        Some(FnArg::Typed(first)) if is_context(&first.ty) => {}
        Some(FnArg::Typed(first)) => {
            if let Type::Reference(r) = &*first.ty {
                if is_context(&r.elem) {
                    let message = format!("a `#[job]` function takes its context by value, {LIKE}");
                    errors.push(syn::Error::new_spanned(&first.ty, message));
                    return;
                }
            }
            // A context further on has been reported as misplaced.
            let later = inputs
                .iter()
                .any(|a| matches!(a, FnArg::Typed(a) if is_context(&a.ty)));
            if !later {
                let message = format!(
                    "the first parameter of a `#[job]` function must be its context, {LIKE}"
                );
                errors.push(syn::Error::new_spanned(first, message));
            }
        }
        Some(FnArg::Receiver(_)) => {}
        None => {
            let message =
                format!("a `#[job]` function takes its context as its first parameter, {LIKE}");
            errors.push(syn::Error::new(item.sig.paren_token.span.join(), message));
        }
    }
}

/// The first secret wrapper in `ty`, looking through references, tuples, arrays and generic
/// arguments (`Option<SecretString>`, `Vec<Zeroizing<String>>`), by the last segment of each
/// path: a macro sees names, not types, so `type Key = SecretString;` goes unnoticed.
fn secret_wrapper(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) => p.path.segments.iter().find_map(|segment| {
            if SECRET_WRAPPERS.iter().any(|w| segment.ident == w) {
                return Some(segment);
            }
            match &segment.arguments {
                PathArguments::AngleBracketed(args) => args.args.iter().find_map(|a| match a {
                    GenericArgument::Type(t) => secret_wrapper(t),
                    _ => None,
                }),
                _ => None,
            }
        }),
        Type::Reference(r) => secret_wrapper(&r.elem),
        Type::Paren(p) => secret_wrapper(&p.elem),
        Type::Group(g) => secret_wrapper(&g.elem),
        Type::Array(a) => secret_wrapper(&a.elem),
        Type::Slice(s) => secret_wrapper(&s.elem),
        Type::Tuple(t) => t.elems.iter().find_map(secret_wrapper),
        _ => None,
    }
}

/// Any path type whose last segment is `JobContext`: `JobContext`, `job::JobContext`, ...
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "JobContext" && s.arguments.is_empty()),
        Type::Paren(p) => is_context(&p.elem),
        Type::Group(g) => is_context(&g.elem),
        _ => false,
    }
}

/// The return type must be written as a `Result`: `Result<(), JobError>`,
/// `Result<Receipt, std::io::Error>`, `std::io::Result<()>`. Its success type is the job's
/// result (`()`: none); whether it serializes, and whether its error converts into a
/// `JobError`, is left to the compiler, at the returned span.
fn check_output(output: &ReturnType, close_paren: Span, errors: &mut Errors) -> Span {
    const RETURNS: &str =
        "a `#[job]` function returns `Result<T, E>` where `T: Serialize` (its result; `()` for \
         none) and `E: Into<JobError>`, like `-> Result<(), JobError>`";
    let ty = match output {
        ReturnType::Default => {
            errors.push(syn::Error::new(close_paren, RETURNS));
            return close_paren;
        }
        ReturnType::Type(_, ty) => ty,
    };
    let Type::Path(path) = &**ty else {
        errors.push(syn::Error::new_spanned(ty, RETURNS));
        return ty.span();
    };
    let last = path.path.segments.last();
    if path.qself.is_some() || last.is_none_or(|s| s.ident != "Result") {
        errors.push(syn::Error::new_spanned(ty, RETURNS));
        return ty.span();
    }
    ty.span()
}

/// Moves each payload parameter's doc comments, `#[serde(..)]` and `#[redact]` attributes out
/// of the function: they are the field's, and rustc refuses them on a parameter. One entry per
/// parameter, in order.
fn take_field_attrs(item: &mut ItemFn) -> Vec<Vec<Attribute>> {
    item.sig
        .inputs
        .iter_mut()
        .map(|arg| match arg {
            FnArg::Typed(arg) => {
                let (moved, kept) = std::mem::take(&mut arg.attrs).into_iter().partition(|a| {
                    a.path().is_ident("doc")
                        || a.path().is_ident("serde")
                        || a.path().is_ident("redact")
                });
                arg.attrs = kept;
                moved
            }
            FnArg::Receiver(_) => Vec::new(),
        })
        .collect()
}

fn attrs_named(attrs: &[Attribute], name: &str) -> Vec<Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident(name))
        .cloned()
        .collect()
}

/// Names the payload type must not take: the struct `#[job]` generates is named after the
/// function (`result` → `Result`), and one of these would shadow, in the function's module, a
/// type the function's own signature or fields name (`Result`, `JobError`, `String`), or is a
/// keyword (`Self`). The compiler's own errors point elsewhere (`Result` "takes 0 generic
/// arguments", `String` "has infinite size").
const SHADOWED: &[&str] = &[
    "Self",
    "Result",
    "Option",
    "Some",
    "None",
    "Ok",
    "Err",
    "String",
    "Vec",
    "Box",
    "Job",
    "JobContext",
    "JobError",
];

/// Refuses a function whose payload type would be named one of [`SHADOWED`].
fn check_payload_name(sig: &syn::Signature, errors: &mut Errors) {
    let fn_name = sig.ident.unraw().to_string();
    let payload = crate::expand::upper_camel(&fn_name);
    if SHADOWED.contains(&payload.as_str()) {
        errors.push(syn::Error::new(
            sig.ident.span(),
            format!(
                "`#[job]` names the payload type of `{fn_name}` `{payload}`, which would \
                 shadow `{payload}` in this module (or is a keyword): rename the function"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn messages(item: proc_macro2::TokenStream) -> Vec<String> {
        let mut item: ItemFn = syn::parse2(item).unwrap();
        let mut errors = Errors::default();
        let job = check(&mut item, &mut errors);
        assert_eq!(job.is_none(), !errors.is_empty());
        errors.messages()
    }

    #[test]
    fn accepts_a_plain_job() {
        let mut item: ItemFn = syn::parse2(quote! {
            /// Docs.
            pub async fn send(ctx: job::JobContext, mut id: i64, #[serde(default)] resend: bool)
                -> Result<(), JobError> { Ok(()) }
        })
        .unwrap();
        let mut errors = Errors::default();
        let job = check(&mut item, &mut errors).unwrap();
        assert_eq!(job.fields.len(), 2);
        assert_eq!(job.fields[0].name, "id");
        assert_eq!(job.fields[1].attrs.len(), 1);
        assert_eq!(job.docs.len(), 1);
        let FnArg::Typed(resend) = &item.sig.inputs[2] else {
            panic!()
        };
        assert!(
            resend.attrs.is_empty(),
            "the serde attribute left the function"
        );
    }

    #[test]
    fn accepts_other_result_types() {
        for output in [
            quote!(std::io::Result<()>),
            quote!(Result<(), MyError>),
            quote!(std::fmt::Result),
        ] {
            let found = messages(quote! { async fn f(ctx: JobContext) -> #output { todo!() } });
            assert!(found.is_empty(), "{output}: {found:?}");
        }
    }

    #[test]
    fn reports_every_mistake_of_the_signature() {
        let found = messages(quote! {
            fn f<T>(x: T, (a, b): (i32, i32), s: &str) -> i32 { 0 }
        });
        assert_eq!(found.len(), 6, "{found:?}");
        assert!(found[0].contains("must be `async`"));
        assert!(found[1].contains("cannot have generic"));
        assert!(found[2].contains("first parameter of a `#[job]` function must be its context"));
        assert!(found[3].contains("plain name"));
        assert!(found[4].contains("own its data"));
        assert!(found[5].contains("returns `Result<T, E>`"));
    }

    #[test]
    fn finds_the_context_wherever_it_is() {
        assert!(
            messages(quote! { async fn f(a: i32, ctx: JobContext) -> Result<(), E> {} })[0]
                .starts_with("the context must be the first parameter")
        );
        assert!(
            messages(quote! { async fn f(ctx: &JobContext) -> Result<(), E> {} })[0]
                .contains("by value")
        );
        assert!(messages(quote! { async fn f() -> Result<(), E> {} })[0]
            .contains("context as its first parameter"));
        assert!(
            messages(quote! { async fn f(c: JobContext, d: JobContext) -> Result<(), E> {} })[0]
                .contains("one context")
        );
        assert!(
            messages(quote! { async fn f(&self, c: JobContext) -> Result<(), E> {} })[0]
                .contains("cannot take `self`")
        );
    }

    #[test]
    fn secret_wrappers_are_refused_wherever_they_hide() {
        for ty in [
            quote!(SecretString),
            quote!(secrecy::SecretBox<str>),
            quote!(Option<secrecy::SecretString>),
            quote!(Vec<zeroize::Zeroizing<String>>),
            quote!((i64, ed25519_dalek::SigningKey)),
            quote!([Secret<String>; 2]),
        ] {
            let found =
                messages(quote! { async fn f(c: JobContext, key: #ty) -> Result<(), E> {} });
            assert_eq!(found.len(), 1, "{ty}: {found:?}");
            assert!(
                found[0].starts_with("`key` would store a secret"),
                "{ty}: {found:?}"
            );
        }
        let fine = messages(quote! {
            async fn f(c: JobContext, key_id: String, secret_version: u32, s: MySecretive) -> Result<(), E> {}
        });
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn redact_marks_a_field_and_takes_no_arguments() {
        let mut item: ItemFn = syn::parse2(quote! {
            async fn f(c: JobContext, id: i64, #[redact] email: String) -> Result<(), E> {}
        })
        .unwrap();
        let mut errors = Errors::default();
        let job = check(&mut item, &mut errors).unwrap();
        assert_eq!(
            job.fields.iter().map(|f| f.redact).collect::<Vec<_>>(),
            [false, true]
        );
        assert!(job.fields[1].attrs.is_empty(), "`redact` is not passed on");
        assert_eq!(
            messages(
                quote! { async fn f(c: JobContext, #[redact(all)] e: String) -> Result<(), E> {} }
            ),
            ["`#[redact]` takes no arguments"]
        );
    }

    #[test]
    fn any_success_type_is_the_result_but_the_return_must_be_a_result() {
        assert!(messages(quote! { async fn f(c: JobContext) -> Result<i32, E> {} }).is_empty());
        assert!(
            messages(quote! { async fn f(c: JobContext) -> Option<()> {} })[0]
                .starts_with("a `#[job]` function returns")
        );
    }
}
