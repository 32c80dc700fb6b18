//! The outcome of one attempt: the whole state machine in one enum.

use std::time::Duration;

/// How a failure was classified, recorded with each error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The handler returned a retryable error.
    Error,
    /// The attempt ran over its timeout.
    Timeout,
    /// The handler panicked.
    Panic,
    /// The handler returned a terminal error.
    Terminal,
    /// The payload could not be decoded or upgraded.
    Poison,
    /// The lease expired (the worker died or lost the database) and the job was rescued.
    LeaseExpired,
}

impl ErrorClass {
    /// The name stored in the error history.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Error => "error",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Panic => "panic",
            ErrorClass::Terminal => "terminal",
            ErrorClass::Poison => "poison",
            ErrorClass::LeaseExpired => "lease_expired",
        }
    }
}

/// A failure to record in the job's error history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The attempt that failed.
    pub attempt: i32,
    /// Its classification.
    pub class: ErrorClass,
    /// Its message.
    pub message: String,
}

/// What to do with a job after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished: `completed`.
    Complete,
    /// Run again after `delay`: `retryable`, the attempt counted.
    Retry {
        /// The backoff delay.
        delay: Duration,
        /// What went wrong.
        failure: Failure,
    },
    /// Stop for good: `cancelled`.
    Cancel {
        /// Why.
        reason: String,
    },
    /// Run again after `delay` without counting the attempt: `scheduled`.
    Snooze {
        /// How long to wait.
        delay: Duration,
    },
    /// Dead letter: `discarded`, the failure kept.
    Discard {
        /// What went wrong.
        failure: Failure,
    },
}

impl Outcome {
    /// A short name for logs and counters.
    pub const fn name(&self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Retry { .. } => "retry",
            Outcome::Cancel { .. } => "cancel",
            Outcome::Snooze { .. } => "snooze",
            Outcome::Discard { .. } => "discard",
        }
    }
}
