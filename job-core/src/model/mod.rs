//! The bottom layer: what a job is and what can happen to it. Depends on nothing else of the
//! crate.

pub(crate) mod attempt_info;
pub(crate) mod backoff;
pub(crate) mod decode;
pub(crate) mod error;
pub(crate) mod finite;
pub(crate) mod job;
pub(crate) mod json_size;
pub(crate) mod key;
pub(crate) mod new_job;
pub(crate) mod outcome;
pub(crate) mod result;
pub(crate) mod state;
pub(crate) mod text;
