//! Every door validates, every role is least: the same rules at the typed Rust helper,
//! `job.enqueue` and a raw INSERT; the SQL interface for other languages; least-privilege
//! roles; tenant-scoped administration; payload values kept out of logs and error history.

#[path = "../common/mod.rs"]
mod common;

mod support;

mod arguments;
mod clients;
mod legacy;
mod logs;
mod names;
mod roles;
mod rules;
mod schema;
mod secrets;
mod stored;
mod surrogates;
mod tenants;
