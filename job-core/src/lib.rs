//! The core of `job`: the job model, the storage contract and the worker runtime. It knows no
//! SQL; a backend such as `job-postgres` implements [`Store`].

pub mod admin;
pub mod backoff;
pub mod context;
mod decode;
pub mod error;
pub mod fault;
pub mod job;
pub mod new_job;
pub mod outcome;
pub mod registry;
pub mod state;
pub mod step;
pub mod store;
mod text;

pub use admin::{Admin, Cancelled, JobFilter, Pause, Redriven, StateCount, Stats};
pub use backoff::Backoff;
pub use context::{AttemptInfo, Extensions, JobContext, StopReason};
pub use error::{BoxError, BuildError, EnqueueError, JobError, StoreError};
pub use fault::{Fault, FaultInjector, FaultPoint};
pub use job::{Job, JobId, JobOptions};
pub use new_job::{
    Deadline, EnqueueOptions, NewJob, OnDuplicate, RunAt, Unique, UniqueScope,
    DEFAULT_PAYLOAD_LIMIT,
};
pub use outcome::{run_attempt, AttemptEnd, ErrorClass, Failure, Outcome, DEFAULT_MAX_SNOOZES};
pub use registry::Registry;
pub use state::JobState;
pub use step::{AttemptHooks, BoxFuture, MAX_STEP_NAME, MAX_STEP_OUTPUT};
pub use store::{
    AttemptError, ClaimKind, ClaimRequest, ClaimedJob, Finalize, Finalized, HeartbeatReport,
    JobRow, Lease, Release, Renewal, Rescued, Store, Wakeups,
};
pub use text::{storable_text, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE};
pub mod maintenance;
pub mod worker;
