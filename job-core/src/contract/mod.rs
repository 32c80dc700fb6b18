//! The storage contract a backend implements ([`Store`](crate::Store)) and the operator's
//! interface over it ([`Admin`](crate::Admin)). Above the model; knows no SQL.

pub(crate) mod admin;
pub(crate) mod enqueue;
pub(crate) mod layer;
pub(crate) mod report;
pub(crate) mod store;
