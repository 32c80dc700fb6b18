//! The states a job row moves through.

use std::fmt;
use std::str::FromStr;

/// Where a job is in its life.
///
/// `Scheduled`, `Available` and `Retryable` are the waiting states: a job in one of them is
/// claimed once its `run_at` has passed. `Completed`, `Cancelled` and `Discarded` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum JobState {
    /// Waits for an earlier job of its ordering key to finish; then it is scheduled or
    /// available. No claim reads it.
    Pending,
    /// Enqueued with a `run_at` in the future.
    Scheduled,
    /// Ready to be claimed.
    Available,
    /// Claimed by a worker that holds its lease.
    Running,
    /// Failed an attempt and waits out its backoff before the next one.
    Retryable,
    /// Finished successfully.
    Completed,
    /// Cancelled by a handler or an operator.
    Cancelled,
    /// Dead letter: attempts exhausted, a terminal error, or a poison payload.
    Discarded,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 8] = [
        JobState::Pending,
        JobState::Scheduled,
        JobState::Available,
        JobState::Running,
        JobState::Retryable,
        JobState::Completed,
        JobState::Cancelled,
        JobState::Discarded,
    ];

    /// The name stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Retryable => "retryable",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
            JobState::Discarded => "discarded",
        }
    }

    /// Whether the job is finished for good.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Cancelled | JobState::Discarded
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of [`JobState`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state `{0}`")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
        }
        assert!("finished".parse::<JobState>().is_err());
    }

    #[test]
    fn only_finished_states_are_terminal() {
        let terminal: Vec<_> = JobState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                JobState::Completed,
                JobState::Cancelled,
                JobState::Discarded
            ]
        );
    }
}
