//! The pages, server-rendered with maud (every `(value)` is HTML-escaped).

pub(crate) mod failure;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod layout;
pub(crate) mod login;
pub(crate) mod overview;
pub(crate) mod visible;
