//! The worker keeps its promises whatever its handlers do: block every thread of its runtime,
//! spin past their timeout, hold every connection of the application's pool, cancel a
//! `begin()`, return text or step outputs the database refuses, never return at all. Each test
//! runs real workers against real PostgreSQL.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod blocking;
mod connections;
mod keeper;
mod outcomes;
mod outside;
mod pools;
#[path = "../common/silence.rs"]
mod silence;
mod steps;
mod stuck;
mod support;
mod timeouts;
