//! The outcome of one attempt: the whole state machine in one enum.

use std::time::Duration;

/// How many times a job may snooze before its next snooze discards it (class `snooze_limit`).
/// Snoozes do not use attempts, so without a bound a job that always snoozes would never end.
pub const DEFAULT_MAX_SNOOZES: i32 = 100;

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
    /// The job asked to snooze once more than its bound allows.
    SnoozeLimit,
    /// A durable step's output could not be stored (it does not serialize or read back, holds
    /// a NUL character, is over [`MAX_STEP_OUTPUT`](crate::MAX_STEP_OUTPUT), or the database
    /// refused it). The step's effect may have happened, so the job is not retried on its own.
    StepUnstorable,
    /// The database refused the attempt's outcome even once made storable; the job is
    /// discarded with this class instead.
    Unstorable,
    /// The worker stopped the execution (on shutdown, or fenced when its lease could not be
    /// renewed in time) and gave the job back (history only: the attempt is not counted).
    Released,
    /// The job's row was held by the handler's own transaction (a `complete_in` not yet
    /// committed) until its lease could not be renewed in time: the worker stopped the
    /// execution, and the attempt is counted.
    LeaseHeld,
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
            ErrorClass::SnoozeLimit => "snooze_limit",
            ErrorClass::StepUnstorable => "step_unstorable",
            ErrorClass::Unstorable => "unstorable",
            ErrorClass::Released => "released",
            ErrorClass::LeaseHeld => "lease_held",
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

impl Outcome {
    /// This outcome as the completer writes it when the database refused it as it was: every
    /// text it holds cut to `max_text` bytes, without NUL or other control characters (but
    /// newlines and tabs), and any delay at most `max_delay`.
    pub fn made_storable(&self, max_text: usize, max_delay: Duration) -> Outcome {
        let text = |t: &str| {
            let clean: String = t
                .chars()
                .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
                .collect();
            crate::model::text::storable_text(&clean, max_text).into_owned()
        };
        let failure = |f: &Failure| Failure {
            attempt: f.attempt,
            class: f.class,
            message: text(&f.message),
        };
        match self {
            Outcome::Complete => Outcome::Complete,
            Outcome::Retry { delay, failure: f } => Outcome::Retry {
                delay: (*delay).min(max_delay),
                failure: failure(f),
            },
            Outcome::Cancel { reason } => Outcome::Cancel {
                reason: text(reason),
            },
            Outcome::Snooze { delay } => Outcome::Snooze {
                delay: (*delay).min(max_delay),
            },
            Outcome::Discard { failure: f } => Outcome::Discard {
                failure: failure(f),
            },
        }
    }
}

/// How an attempt's handler ended, before classification.
#[derive(Debug)]
pub enum AttemptEnd {
    /// The handler returned.
    Returned(Result<(), crate::JobError>),
    /// The handler panicked with this message.
    Panicked(String),
    /// The handler ran over this time limit and was stopped.
    TimedOut(Duration),
    /// The handler's own transaction held the job's row (it had called `complete_in` and not
    /// yet committed) until the lease could not be renewed in time, and the worker stopped
    /// it: counted as an attempt, so that a transaction always held too long ends in a dead
    /// letter rather than in a retry for ever.
    LeaseHeld,
}

impl Outcome {
    /// The outcome an attempt's end leads to: the whole retry policy in one `match`.
    ///
    /// `cancel_requested` turns a retryable failure, a panic or a timeout into a cancellation
    /// (the handler gave up because it was asked to, or ended otherwise meanwhile). Retryable ends wait a jittered `backoff` delay, or discard
    /// the job once `attempt.max_attempts` attempts are used.
    pub fn classify(
        end: AttemptEnd,
        attempt: &crate::AttemptInfo,
        cancel_requested: bool,
        backoff: &crate::Backoff,
        rng: &mut fastrand::Rng,
    ) -> Outcome {
        use crate::model::text::shown;
        use crate::JobError;
        let retry = |class: ErrorClass, message: String, rng: &mut fastrand::Rng| {
            let failure = Failure {
                attempt: attempt.attempt,
                class,
                message,
            };
            if attempt.attempt >= attempt.max_attempts {
                Outcome::Discard { failure }
            } else {
                let delay = backoff.delay(attempt.attempt.max(1) as u32, rng);
                Outcome::Retry { delay, failure }
            }
        };
        match end {
            AttemptEnd::Returned(Ok(())) => Outcome::Complete,
            AttemptEnd::Returned(Err(JobError::Retryable(e))) if cancel_requested => {
                Outcome::Cancel {
                    reason: format!(
                        "cancellation requested; the attempt ended with: {}",
                        shown(&e)
                    ),
                }
            }
            AttemptEnd::Returned(Err(JobError::Retryable(e))) => {
                retry(ErrorClass::Error, shown(&e), rng)
            }
            AttemptEnd::Returned(Err(JobError::Terminal(e))) if cancel_requested => {
                Outcome::Cancel {
                    reason: format!(
                        "cancellation requested; the attempt ended with a terminal error: {}",
                        shown(&e)
                    ),
                }
            }
            AttemptEnd::Returned(Err(JobError::Terminal(e))) => Outcome::Discard {
                failure: Failure {
                    attempt: attempt.attempt,
                    class: ErrorClass::Terminal,
                    message: shown(&e),
                },
            },
            AttemptEnd::Returned(Err(JobError::Cancel(reason))) => Outcome::Cancel { reason },
            AttemptEnd::Returned(Err(JobError::Snooze(delay))) => Outcome::Snooze { delay },
            // Asked to cancel, the attempt that panicked or ran out of time ends the job
            // cancelled, as one that gave up with an error does: never a dead letter, whose
            // compensation and failed dependents the cancel did not ask for.
            AttemptEnd::Panicked(message) if cancel_requested => Outcome::Cancel {
                reason: format!("cancellation requested; the attempt panicked: {message}"),
            },
            AttemptEnd::TimedOut(limit) if cancel_requested => Outcome::Cancel {
                reason: format!(
                    "cancellation requested; the attempt exceeded its timeout of {limit:?}"
                ),
            },
            AttemptEnd::LeaseHeld if cancel_requested => Outcome::Cancel {
                reason: "cancellation requested; the attempt was stopped while its own \
                         transaction held the job's row"
                    .into(),
            },
            AttemptEnd::Panicked(message) => retry(ErrorClass::Panic, message, rng),
            AttemptEnd::LeaseHeld => retry(
                ErrorClass::LeaseHeld,
                "the handler's own transaction (after complete_in) held the job's row until \
                 its lease could not be renewed in time, and the attempt was stopped: commit \
                 within two thirds of the lease, or give the job a longer lease"
                    .into(),
                rng,
            ),
            AttemptEnd::TimedOut(limit) => retry(
                ErrorClass::Timeout,
                format!("attempt exceeded its timeout of {limit:?}"),
                rng,
            ),
        }
    }
}

impl Outcome {
    /// Bounds snoozing: a [`Snooze`](Outcome::Snooze) from a job that already snoozed
    /// `snoozed` times, when that is `max` or more, becomes a
    /// [`Discard`](Outcome::Discard) of class [`ErrorClass::SnoozeLimit`] (a dead letter that
    /// can be redriven). Every other outcome is returned as is.
    pub fn limit_snoozes(self, attempt: &crate::AttemptInfo, snoozed: i32, max: i32) -> Outcome {
        match self {
            Outcome::Snooze { delay } if snoozed >= max => Outcome::Discard {
                failure: Failure {
                    attempt: attempt.attempt,
                    class: ErrorClass::SnoozeLimit,
                    message: format!(
                        "snoozed {snoozed} times, the limit is {max}; \
                         discarded instead of snoozing again for {delay:?}"
                    ),
                },
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttemptInfo, Backoff, JobError};

    fn attempt(n: i32, max: i32) -> AttemptInfo {
        AttemptInfo {
            id: 1,
            kind: "k".into(),
            queue: "q".into(),
            attempt: n,
            max_attempts: max,
        }
    }

    fn classify(end: AttemptEnd, n: i32, max: i32, cancel: bool) -> Outcome {
        let mut rng = fastrand::Rng::with_seed(3);
        Outcome::classify(end, &attempt(n, max), cancel, &Backoff::DEFAULT, &mut rng)
    }

    #[test]
    fn errors_retry_until_attempts_run_out() {
        let end = || AttemptEnd::Returned(Err(JobError::retryable("boom")));
        match classify(end(), 1, 3, false) {
            Outcome::Retry { delay, failure } => {
                assert!(delay <= Backoff::DEFAULT.ceiling(1));
                assert_eq!((failure.attempt, failure.class), (1, ErrorClass::Error));
                assert_eq!(failure.message, "boom");
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        assert!(matches!(
            classify(end(), 3, 3, false),
            Outcome::Discard { .. }
        ));
    }

    #[test]
    fn panics_and_timeouts_are_retryable_with_their_class() {
        let panicked = classify(AttemptEnd::Panicked("oops".into()), 1, 2, false);
        assert!(
            matches!(panicked, Outcome::Retry { failure, .. } if failure.class == ErrorClass::Panic)
        );
        let timed_out = classify(AttemptEnd::TimedOut(Duration::from_secs(1)), 1, 2, false);
        assert!(
            matches!(timed_out, Outcome::Retry { failure, .. } if failure.class == ErrorClass::Timeout)
        );
    }

    #[test]
    fn terminal_cancel_and_snooze_map_directly() {
        let terminal = classify(
            AttemptEnd::Returned(Err(JobError::terminal("no"))),
            1,
            9,
            false,
        );
        assert!(
            matches!(terminal, Outcome::Discard { failure } if failure.class == ErrorClass::Terminal)
        );
        let cancel = classify(
            AttemptEnd::Returned(Err(JobError::cancel("bye"))),
            1,
            9,
            false,
        );
        assert_eq!(
            cancel,
            Outcome::Cancel {
                reason: "bye".into()
            }
        );
        let snooze = classify(
            AttemptEnd::Returned(Err(JobError::snooze(Duration::from_secs(5)))),
            9,
            9,
            false,
        );
        assert_eq!(
            snooze,
            Outcome::Snooze {
                delay: Duration::from_secs(5)
            }
        );
    }

    #[test]
    fn a_failure_after_a_cancel_request_cancels() {
        let end = AttemptEnd::Returned(Err(JobError::retryable("interrupted")));
        assert!(matches!(classify(end, 1, 9, true), Outcome::Cancel { .. }));
    }

    #[test]
    fn a_panic_or_a_timeout_after_a_cancel_request_cancels_even_on_the_last_attempt() {
        let panicked = || AttemptEnd::Panicked("boom".into());
        let timed_out = || AttemptEnd::TimedOut(Duration::from_secs(2));
        for (n, max) in [(1, 9), (3, 3)] {
            match classify(panicked(), n, max, true) {
                Outcome::Cancel { reason } => {
                    assert!(reason.contains("panicked: boom"), "{reason}")
                }
                other => panic!("expected a cancel, got {other:?}"),
            }
            match classify(timed_out(), n, max, true) {
                Outcome::Cancel { reason } => assert!(reason.contains("timeout of 2s"), "{reason}"),
                other => panic!("expected a cancel, got {other:?}"),
            }
        }
        assert!(matches!(
            classify(panicked(), 3, 3, false),
            Outcome::Discard { .. }
        ));
        assert!(matches!(
            classify(timed_out(), 3, 3, false),
            Outcome::Discard { .. }
        ));
    }

    #[test]
    fn a_terminal_error_after_a_cancel_request_cancels() {
        let terminal = || AttemptEnd::Returned(Err(crate::JobError::terminal("no such card")));
        match classify(terminal(), 1, 5, true) {
            Outcome::Cancel { reason } => assert!(reason.contains("no such card"), "{reason}"),
            other => panic!("expected a cancel, got {other:?}"),
        }
        assert!(matches!(
            classify(terminal(), 1, 5, false),
            Outcome::Discard { .. }
        ));
    }

    #[test]
    fn a_snooze_past_the_limit_discards_and_says_how_often_it_snoozed() {
        let snooze = || Outcome::Snooze {
            delay: Duration::from_millis(1),
        };
        let info = attempt(1, 3);
        assert_eq!(snooze().limit_snoozes(&info, 99, 100), snooze());
        match snooze().limit_snoozes(&info, 100, 100) {
            Outcome::Discard { failure } => {
                assert_eq!(failure.class, ErrorClass::SnoozeLimit);
                assert_eq!(failure.class.as_str(), "snooze_limit");
                assert!(
                    failure
                        .message
                        .starts_with("snoozed 100 times, the limit is 100"),
                    "{}",
                    failure.message
                );
            }
            other => panic!("expected a discard, got {other:?}"),
        }
        assert_eq!(
            Outcome::Complete.limit_snoozes(&info, 500, 100),
            Outcome::Complete
        );
    }
}
