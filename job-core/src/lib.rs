//! The core of `job`: the job model, the storage contract and the worker runtime. It knows no
//! SQL; a backend such as `job-postgres` implements [`Store`].
//!
//! The crate is in layers, each module private and every public item re-exported here, at
//! one path:
//!
//! | layer | modules | what |
//! |---|---|---|
//! | model | `model/` | what a job is and what can happen to it: [`Job`], [`JobState`], [`Outcome`], [`JobError`], [`NewJob`], [`Backoff`] |
//! | contract | `contract/` | what a backend implements: [`Store`], [`Admin`] and their types |
//! | attempt | `attempt/` | running one attempt: [`Registry`], [`JobContext`], durable steps, fault points, the one attempt pipeline ([`perform_attempt`]) |
//! | runtime | `worker/`, `maintenance/` | the [`Worker`] and its maintenance services ([`Rescuer`], [`Pruner`], [`Scheduler`]) |
//!
//! Each layer uses only the ones above it in this table.

mod attempt;
mod contract;
mod maintenance;
mod model;
mod telemetry;
mod worker;

pub use model::attempt_info::{AttemptInfo, StopReason};
pub use model::backoff::Backoff;
pub use model::error::{BoxError, BuildError, EnqueueError, JobError, StoreError};
pub use model::job::{
    Breaker, Compensate, Discarded, DiscardedError, Job, JobId, JobOptions, RateLimit, MAX_DURATION,
};
pub use model::json_size::MAX_JSON_DEPTH;
#[doc(hidden)]
pub use model::key::KeyWriter as __KeyWriter;
pub use model::new_job::{
    allowed_in_name, name_problem, payload_problem, Deadline, Dependency, DependencyMode,
    DependsOn, EnqueueOptions, NewJob, OnDuplicate, RunAt, Unique, UniqueScope,
    DEFAULT_PAYLOAD_LIMIT, EARLIEST_TIME, FORBIDDEN_IN_NAMES, LATEST_TIME, MAX_DEPENDENCIES,
    MAX_NAME_LEN, MAX_TAGS, MAX_UNIQUE_KEY_LEN,
};
pub use model::outcome::{AttemptEnd, ErrorClass, Failure, Outcome, DEFAULT_MAX_SNOOZES};
pub use model::result::MAX_RESULT;
pub use model::state::{JobState, UnknownState};
pub use model::text::{
    storable_text, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE, MAX_REFUNDED_INTERRUPTIONS,
};

pub use telemetry::{
    current_traceparent, describe_metrics, record_enqueued, valid_traceparent, MetricInfo,
    MetricKind, MAX_PROGRESS, MAX_PROGRESS_MESSAGE, METRICS, NO_OWNER, TRACEPARENT_LEN,
};

pub use contract::admin::{
    Admin, Cancelled, JobFilter, Pause, PauseEntry, PausedBy, Redriven, StateCount, Stats,
};
pub use contract::enqueue::{Batch, BatchIds, Enqueue, EnqueueExecutor, EnqueueMany};
pub use contract::layer::{BoxFuture, Call, Layered, Returned, StoreLayer};
pub use contract::report::{DeadLetterCount, QueueCount, Report, ReportRequest};
pub use contract::store::{
    duration_millis, AttemptError, BreakerCount, ClaimKind, ClaimRequest, ClaimedJob, Expired,
    Finalize, Finalized, HeartbeatReport, InvalidClaim, InvalidRenewal, JobRow, Lease,
    PruneRequest, Release, Renewal, Rescued, RescuedJob, SchemaLag, Store, Tripped, Wakeups,
    HEARTBEAT_BUSY_WAIT,
};

#[doc(hidden)]
pub use attempt::context::__set_returned_result;
pub use attempt::context::{Extensions, JobContext};
pub use attempt::fault::{Fault, FaultInjector, FaultPoint};
pub use attempt::pipeline::{conclude, perform_attempt, run_attempt, start_attempt};
pub use attempt::registry::{decode, BoxJobFuture, Handler, Poison, Registry};
pub use attempt::step::{
    AttemptHooks, LoadedSteps, StepLimit, StoreSteps, MAX_LOADED_STEPS, MAX_STEPS, MAX_STEPS_TOTAL,
    MAX_STEP_NAME, MAX_STEP_OUTPUT,
};

pub use maintenance::{
    Periodic, Pruned, Pruner, PrunerConfig, Reporter, ReporterConfig, Rescuer, RescuerConfig,
    Scheduled, Scheduler, SchedulerConfig, Stager, StagerConfig,
};
pub use worker::{
    shutdown_signal, ConnectionBudget, DrainReport, Prefetch, Worker, WorkerBuilder, WorkerConfig,
    WorkerHandle, WorkerStats, MIN_INTERVAL, MIN_LEASE, RELEASE_TIMEOUT,
};
