//! Collects every mistake of one `#[job]` use, so the user sees them all at once.

use proc_macro2::TokenStream;

/// The errors found so far, combined into one [`syn::Error`].
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records `error` after those already found.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Whether nothing was found.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// How many were found.
    pub(crate) fn len(&self) -> usize {
        self.0.iter().flatten().count()
    }

    /// One `compile_error!` per error, each at its own span; nothing when there were none.
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.0.map(|e| e.into_compile_error()).unwrap_or_default()
    }

    /// Every message, in order, for tests.
    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.0.iter().flatten().map(|e| e.to_string()).collect()
    }
}
