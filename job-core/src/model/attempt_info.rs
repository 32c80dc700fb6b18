//! The facts of one attempt, and why a running attempt may be told to stop.

use crate::model::job::JobId;

/// Why an execution was told to stop (`JobContext::stop_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// An operator asked for the job to be cancelled.
    CancelRequested,
    /// The attempt ran over its timeout: the handler is dropped at its next `.await`, and
    /// blocking work it started should wind up.
    TimedOut,
    /// The lease is no longer this execution's: lost, not renewed in time, or the job was
    /// finalized by the handler's own transaction. Another worker may take the job.
    LeaseLost,
    /// The worker is shutting down and its drain deadline passed.
    Shutdown,
}

/// The facts of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptInfo {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// This attempt's number, counting from 1.
    pub attempt: i32,
    /// Attempts in all.
    pub max_attempts: i32,
}
