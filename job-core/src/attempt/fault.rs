//! Named points where the runtime asks an optional injector whether to crash. They do nothing
//! unless a test installs an injector (the testkit's `Faults`).

use std::fmt;

use crate::model::attempt_info::AttemptInfo;

/// A place in an execution where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// The job was claimed; its handler has not started.
    AfterClaim,
    /// The payload is decoded; the handler is about to run.
    BeforePerform,
    /// The handler returned (its side effects done); nothing is finalized yet.
    AfterPerform,
    /// A durable step (`JobContext::step`) is about to run its closure; asked with the step's
    /// name through [`FaultInjector::at_step`]. Steps already recorded are skipped, not asked.
    BeforeStep,
    /// A step's closure ran and its output was recorded; the step has not returned yet.
    AfterStep,
    /// The outcome is about to be handed to the completer.
    BeforeFinalize,
    /// The outcome was written: by the completer, or by the handler's own transaction
    /// (`complete_in`), asked once the worker has seen that commit, whether its completer or
    /// its lease keeper saw it first, or the drain stopped the code after it. It comes after
    /// the job's row shows the outcome.
    AfterFinalize,
    /// The heartbeat is about to renew this job's lease.
    Heartbeat,
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FaultPoint::AfterClaim => "after_claim",
            FaultPoint::BeforePerform => "before_perform",
            FaultPoint::AfterPerform => "after_perform",
            FaultPoint::BeforeStep => "before_step",
            FaultPoint::AfterStep => "after_step",
            FaultPoint::BeforeFinalize => "before_finalize",
            FaultPoint::AfterFinalize => "after_finalize",
            FaultPoint::Heartbeat => "heartbeat",
        };
        f.write_str(name)
    }
}

/// What an injector decides at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Carry on.
    #[default]
    Continue,
    /// Behave like a killed process for this job: stop its execution, write nothing more for
    /// it (no finalize, no heartbeat, no release). Its lease expires and it is rescued.
    Crash,
}

/// Decides, at each [`FaultPoint`], whether an execution crashes there.
pub trait FaultInjector: Send + Sync + 'static {
    /// Called at `point` for the attempt `job`.
    fn at(&self, point: FaultPoint, job: &AttemptInfo) -> Fault;

    /// Called at [`FaultPoint::BeforeStep`] and [`FaultPoint::AfterStep`] with the step's
    /// name. Defaults to [`at`](Self::at), ignoring the name.
    fn at_step(&self, point: FaultPoint, step: &str, job: &AttemptInfo) -> Fault {
        let _ = step;
        self.at(point, job)
    }
}
