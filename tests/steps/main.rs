//! Exactly-once where it can be had, end to end against real PostgreSQL: durable steps
//! (receipts), completing a job in the handler's own transaction, and the snooze bound.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod concurrent;
mod held;
mod inline;
mod receipts;
mod snooze;
mod support;
mod transaction;
