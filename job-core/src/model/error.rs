//! Errors: how a handler classifies a failure, and what the framework's own calls return.

use std::fmt;
use std::time::Duration;

use crate::model::job::JobId;

/// A boxed error from a handler or a backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an attempt did not complete, and what should happen next.
///
/// Any error converted with `?` is [`JobError::Retryable`]. Timeouts and panics are retryable
/// too. `JobError` deliberately does not implement `std::error::Error`, so that the blanket
/// `From` conversion can exist (the same trade `anyhow` makes).
#[non_exhaustive]
pub enum JobError {
    /// Try again after the job's backoff, while attempts remain.
    Retryable(BoxError),
    /// Never try again: the job is discarded with this reason.
    Terminal(BoxError),
    /// The handler gave up on purpose: the job ends cancelled.
    Cancel(String),
    /// Run again after this delay without consuming an attempt.
    Snooze(Duration),
}

impl JobError {
    /// A retryable failure with a message.
    pub fn retryable(message: impl Into<String>) -> Self {
        JobError::Retryable(message.into().into())
    }

    /// A terminal failure with a message: the job is discarded, not retried.
    pub fn terminal(message: impl Into<String>) -> Self {
        JobError::Terminal(message.into().into())
    }

    /// Cancel the job with a reason.
    pub fn cancel(reason: impl Into<String>) -> Self {
        JobError::Cancel(reason.into())
    }

    /// Run again after `delay`, not counting this attempt.
    pub fn snooze(delay: Duration) -> Self {
        JobError::Snooze(delay)
    }

    /// Wraps any error as terminal.
    pub fn terminal_from<E>(error: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        JobError::Terminal(Box::new(error))
    }
}

impl<E> From<E> for JobError
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        JobError::Retryable(Box::new(error))
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retryable(e) => f.debug_tuple("Retryable").field(e).finish(),
            JobError::Terminal(e) => f.debug_tuple("Terminal").field(e).finish(),
            JobError::Cancel(r) => f.debug_tuple("Cancel").field(r).finish(),
            JobError::Snooze(d) => f.debug_tuple("Snooze").field(d).finish(),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retryable(e) => write!(f, "retryable: {e}"),
            JobError::Terminal(e) => write!(f, "terminal: {e}"),
            JobError::Cancel(r) => write!(f, "cancelled: {r}"),
            JobError::Snooze(d) => write!(f, "snoozed for {d:?}"),
        }
    }
}

/// A storage backend failed (connection lost, query error, ...).
///
/// Shown (`Display` and `Debug`) with the backend's error cut to
/// [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE) bytes, ending with a note when cut: a
/// driver's error may carry a huge text (a constraint or trigger message quoting a row), and
/// the framework logs every store error it meets. [`inner`](Self::inner) and
/// [`source`](std::error::Error::source) give the backend's error whole.
pub struct StoreError {
    source: BoxError,
    refused: bool,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("storage error: ")?;
        write!(f, "{}", crate::model::text::capped(&self.source))
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// The backend's error, its `Debug` cut as its `Display` is.
        struct Source<'a>(&'a BoxError);

        impl fmt::Debug for Source<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let max = crate::model::text::MAX_ERROR_MESSAGE;
                crate::model::text::write_capped(f, max, |w| write!(w, "{:?}", self.0))
            }
        }

        f.debug_struct("StoreError")
            .field("source", &Source(&self.source))
            .field("refused", &self.refused)
            .finish()
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl StoreError {
    /// Wraps a backend's error: one that may pass if the call is made again (a lost
    /// connection, a timeout, a deadlock).
    pub fn new(source: impl Into<BoxError>) -> Self {
        StoreError {
            source: source.into(),
            refused: false,
        }
    }

    /// Wraps a backend's error that says the database refused what it was given (bad data, a
    /// value over a limit, a constraint): the same call with the same input fails again.
    pub fn refused(source: impl Into<BoxError>) -> Self {
        StoreError {
            source: source.into(),
            refused: true,
        }
    }

    /// Whether the database refused the input itself, so that retrying the same call cannot
    /// succeed (see [`StoreError::refused`]). The worker's completer then writes the other
    /// outcomes of a batch without the refused one, and makes that one storable.
    pub fn is_refused(&self) -> bool {
        self.refused
    }

    /// The backend's error, for downcasting.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

/// An enqueue was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// An option has a value outside what the framework accepts.
    #[error("invalid enqueue option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name, as in the builder (`queue`, `priority`, ...).
        option: &'static str,
        /// What is allowed.
        reason: String,
    },
    /// The serialized payload is larger than the configured limit.
    #[error("payload of `{kind}` is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The job's kind.
        kind: String,
        /// The payload's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The payload could not be serialized to JSON.
    #[error("payload of `{kind}` could not be serialized: {source}")]
    Serialize {
        /// The job's kind.
        kind: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// An active job of this kind already holds this unique key: nothing was inserted (and,
    /// with [`OnDuplicate::Replace`](crate::model::new_job::OnDuplicate::Replace), the existing job
    /// was running, so it was not replaced either). A web handler answers 409 Conflict with
    /// `existing`.
    #[error("a job of `{kind}` with unique key `{key}` is already active (job {existing})")]
    Duplicate {
        /// The job's kind.
        kind: String,
        /// The unique key.
        key: String,
        /// The id of the job that holds the key.
        existing: JobId,
    },
    /// The storage backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl EnqueueError {
    /// The id of the active job that holds the unique key, when this is a duplicate.
    pub fn duplicate_of(&self) -> Option<JobId> {
        match self {
            EnqueueError::Duplicate { existing, .. } => Some(*existing),
            _ => None,
        }
    }
}

/// A worker could not be built from its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two registered jobs share one kind name.
    #[error("job kind `{kind}` is registered twice (by `{first}` and `{second}`)")]
    DuplicateKind {
        /// The shared kind.
        kind: String,
        /// The first type registered under it.
        first: &'static str,
        /// The second type registered under it.
        second: &'static str,
    },
    /// The worker has nothing to do.
    #[error("worker has no queues: call `.queue(name, concurrency)` at least once")]
    NoQueues,
    /// The worker knows no job kinds.
    #[error("worker has no registered jobs: call `.register::<YourJob>()` at least once")]
    NoJobs,
    /// A periodic job's cron expression does not parse.
    #[error("invalid cron expression `{expression}` for `{kind}`: {reason}")]
    InvalidSchedule {
        /// The kind scheduled.
        kind: String,
        /// The expression as given.
        expression: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("invalid worker option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is allowed.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::text::MAX_ERROR_MESSAGE;

    #[test]
    fn a_store_error_with_a_huge_text_is_shown_cut_and_kept_whole_inside() {
        let huge = "row (".to_owned() + &"y".repeat(2_000_000) + ")";
        let error = StoreError::refused(huge.clone());
        let shown = error.to_string();
        assert!(shown.len() <= MAX_ERROR_MESSAGE + 64, "{}", shown.len());
        assert!(
            shown.starts_with("storage error: row (yyy"),
            "{}",
            &shown[..40]
        );
        assert!(shown.ends_with("[cut: the message went on]"));
        let debugged = format!("{error:?}");
        assert!(
            debugged.len() <= MAX_ERROR_MESSAGE + 128,
            "{}",
            debugged.len()
        );
        assert!(
            debugged.ends_with("refused: true }"),
            "{}",
            &debugged[debugged.len() - 80..]
        );
        assert_eq!(error.inner().to_string(), huge);
        assert_eq!(StoreError::new("gone").to_string(), "storage error: gone");
    }
}
