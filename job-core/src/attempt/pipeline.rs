//! The one attempt pipeline, shared by the worker, the testkit's `perform` and its `Drain`:
//! decode the payload (upgrading older versions; poison → discard), run the handler under its
//! timeout until its code has really ended, then conclude: the outcome of the end, a step
//! that could not be stored, the snooze bound. The worker calls the three stages one by one,
//! with its fault points and stop signals between them; [`perform_attempt`] calls them in a
//! row.

use std::future::Future;
use std::time::Duration;

use crate::attempt::context::JobContext;
use crate::attempt::registry::{BoxJobFuture, Handler};
use crate::model::attempt_info::StopReason;
use crate::model::backoff::Backoff;
use crate::model::error::JobError;
use crate::model::outcome::{AttemptEnd, ErrorClass, Failure, Outcome, DEFAULT_MAX_SNOOZES};

/// Stage one: decodes `payload` (written at `version`, upgraded through the job's
/// [`upgrade`](crate::Job::upgrade) when older) and starts the handler with `ctx`. A payload
/// that cannot become the job is poison: the `Err` is its discard, never retried.
///
/// Decoding runs application code (a `Deserialize` of its own, the upgrade hook, the part of a
/// hand-written `perform` before its future): a panic there is caught, and makes the payload
/// poison as well, since it would panic again on every attempt.
pub fn start_attempt(
    handler: &dyn Handler,
    payload: &str,
    version: i32,
    ctx: JobContext,
) -> Result<BoxJobFuture, Outcome> {
    let attempt = ctx.attempt();
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handler.start(payload, version, ctx)
    }))
    .unwrap_or_else(|panic| {
        Err(crate::attempt::registry::Poison(format!(
            "decoding the payload of `{}` (version {version}) panicked: {}",
            handler.kind(),
            crate::model::text::storable_text(&panic_message(panic), 1024)
        )))
    });
    started.map_err(|poison| {
        tracing::error!(
            reason = %crate::model::text::storable_text(&poison.0, crate::model::text::MAX_ERROR_MESSAGE),
            "poison payload: discarding"
        );
        Outcome::Discard {
            failure: Failure {
                attempt,
                class: ErrorClass::Poison,
                message: poison.0,
            },
        }
    })
}

/// Stage three: the outcome an attempt's `end` leads to. A step whose output could not be
/// stored ends the job as `step_unstorable`, whatever the handler returned; otherwise the
/// end is classified ([`Outcome::classify`]) and a snooze past [`DEFAULT_MAX_SNOOZES`]
/// (`snoozes` so far) becomes a `snooze_limit` discard.
pub fn conclude(
    end: AttemptEnd,
    ctx: &JobContext,
    cancel_requested: bool,
    backoff: &Backoff,
    snoozes: i32,
    rng: &mut fastrand::Rng,
) -> Outcome {
    let info = ctx.info();
    if let Some(message) = ctx.unstorable_step() {
        // What the handler returned is not looked at, but still dropped in a guard.
        drop_quietly("the attempt's end", end);
        return Outcome::Discard {
            failure: Failure {
                attempt: info.attempt,
                class: ErrorClass::StepUnstorable,
                message: message.to_owned(),
            },
        };
    }
    // Classifying shows the handler's error (its `Display`, application code): a panic there
    // is the attempt's panic, never the caller's.
    let classified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Outcome::classify(end, info, cancel_requested, backoff, rng)
    }))
    .unwrap_or_else(|panic| {
        let message = format!(
            "showing the handler's error panicked: {}",
            crate::model::text::storable_text(&panic_message(panic), 1024)
        );
        Outcome::classify(
            AttemptEnd::Panicked(message),
            info,
            cancel_requested,
            backoff,
            rng,
        )
    });
    classified.limit_snoozes(info, snoozes, DEFAULT_MAX_SNOOZES)
}

/// The whole pipeline in a row, for callers without fault points or stop signals (the
/// testkit): start, run under the handler's timeout (telling the context when it passes),
/// wait for the attempt's blocking work, conclude. `snoozes` is how often the job snoozed.
pub async fn perform_attempt(
    handler: &dyn Handler,
    payload: &str,
    version: i32,
    ctx: JobContext,
    snoozes: i32,
    rng: &mut fastrand::Rng,
) -> Outcome {
    let options = handler.options();
    let view = ctx.clone();
    let future = match start_attempt(handler, payload, version, ctx) {
        Ok(future) => future,
        Err(poison) => return poison,
    };
    let stop = view.stop_signal().clone();
    let task = run_task(future, options.timeout, std::future::pending(), |_| {
        stop.stop(StopReason::TimedOut)
    })
    .await;
    view.work().close();
    view.work().wait().await;
    let end = task.into_attempt_end(options.timeout);
    conclude(end, &view, false, &options.backoff, snoozes, rng)
}

/// Runs a handler's future in its own task, so a panic is caught and reported instead of
/// unwinding into the caller, under a time limit. When the limit passes the task is aborted,
/// and this returns only once the handler's code has really stopped: a handler inside
/// synchronous code (a blocking call, a loop without `.await`) is dropped at its next
/// `.await`, or returns, and not before. Dropping the returned future aborts the handler
/// without waiting.
pub async fn run_attempt(future: BoxJobFuture, timeout: Duration) -> AttemptEnd {
    let ended = run_task(future, timeout, std::future::pending(), |_| {}).await;
    ended.into_attempt_end(timeout)
}

/// Why the runtime stopped a handler's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// The attempt ran over its timeout.
    TimedOut,
    /// The runtime told it to stop (lease lost, shutdown, injected crash).
    Told,
}

/// What a handler's task gave back: its result, or why it has none (a panic, or the abort).
type Joined = Result<Result<(), JobError>, tokio::task::JoinError>;

/// How a handler's task ended. What the task gave back is application code's (an error, a
/// panic's payload) and is dropped in a guard ([`drop_quietly`]) wherever this is dropped
/// unread: an early return of the executor's, or a timeout, which ignores it.
pub(crate) struct TaskEnd {
    /// What the task gave back; taken only by [`TaskEnd::into_attempt_end`].
    joined: Option<Joined>,
    /// Set when the runtime stopped the task before it ended by itself.
    pub(crate) stopped: Option<StopCause>,
}

impl Drop for TaskEnd {
    fn drop(&mut self) {
        if let Some(joined) = self.joined.take() {
            drop_quietly("the handler's result", joined);
        }
    }
}

impl TaskEnd {
    fn new(joined: Joined, stopped: Option<StopCause>) -> Self {
        TaskEnd {
            joined: Some(joined),
            stopped,
        }
    }

    /// The attempt's end: a task stopped for its timeout timed out, whatever it returned
    /// while being stopped; otherwise what it returned, or its panic.
    pub(crate) fn into_attempt_end(mut self, timeout: Duration) -> AttemptEnd {
        if self.stopped == Some(StopCause::TimedOut) {
            // What it returned is dropped with `self`, quietly.
            return AttemptEnd::TimedOut(timeout);
        }
        match self.joined.take() {
            Some(Ok(result)) => AttemptEnd::Returned(result),
            Some(Err(e)) if e.is_panic() => AttemptEnd::Panicked(panic_message(e.into_panic())),
            Some(Err(_)) | None => AttemptEnd::Panicked("handler task was cancelled".into()),
        }
    }

    /// Whether the handler said how its job ends: it succeeded, or chose to discard, cancel or
    /// snooze it. A retryable error, a panic, a timeout or code dropped by the abort say
    /// nothing the next attempt would not say better; ended while a shutdown stopped the
    /// handler, most often they are that stop (a handler that checks `ctx.is_cancelled()`
    /// and returns an error), and the attempt is given back rather than counted.
    pub(crate) fn decided(&self) -> bool {
        self.stopped != Some(StopCause::TimedOut)
            && matches!(
                &self.joined,
                Some(
                    Ok(Ok(()))
                        | Ok(Err(JobError::Terminal(_)
                            | JobError::Cancel(_)
                            | JobError::Snooze(_)))
                )
            )
    }
}

/// Runs `future` in its own task until it ends, `timeout` passes or `stop` completes; in the
/// last two cases calls `stopping` with the cause (the execution is now on its way out: tell
/// the handler, start the stuck watch), aborts the task and waits until its code has really
/// stopped. Dropping this future aborts the task without waiting.
pub(crate) async fn run_task(
    future: BoxJobFuture,
    timeout: Duration,
    stop: impl Future<Output = ()>,
    stopping: impl FnOnce(StopCause),
) -> TaskEnd {
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = tokio::spawn(tracing::Instrument::in_current_span(future));
    let _abort = AbortOnDrop(task.abort_handle());
    tokio::pin!(stop);
    let cause = tokio::select! {
        biased;
        joined = &mut task => return TaskEnd::new(joined, None),
        () = &mut stop => StopCause::Told,
        () = tokio::time::sleep(timeout) => StopCause::TimedOut,
    };
    task.abort();
    stopping(cause);
    // An aborted task ends when its future is dropped, at its next `.await`; code that does
    // not await (blocking, spinning) runs on until it returns. Either way, only then is the
    // execution over.
    let joined = (&mut task).await;
    TaskEnd::new(joined, Some(cause))
}

/// The text a panic was raised with, cut to
/// [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE) bytes as an error's message is: it is
/// application code's, of any size, and goes into outcomes and logs as it is.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    use crate::model::text::{cut, MAX_ERROR_MESSAGE};
    let text = match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(payload) => {
                // Application code's value: its `Drop` may panic too, which must not escape
                // here (it would end the executor, and the job would wait out its lease).
                drop_quietly("a panic's payload", payload);
                return "panicked with a non-string payload".to_owned();
            }
        },
    };
    if text.len() <= MAX_ERROR_MESSAGE {
        return text;
    }
    cut(&text, MAX_ERROR_MESSAGE).into_owned()
}

/// Drops `value`, application code's or holding some (a handler's future, what it returned,
/// its error, a panic's payload), so that a `Drop` that panics cannot unwind into the
/// runtime: every such drop outside the handler's own task goes through here. Unwound past
/// the executor, the panic ended the execution without an outcome, and the job waited out its
/// lease. What the drop panicked with is leaked, not dropped (its own `Drop` could panic
/// again), and logged at WARN as `what`'s.
pub(crate) fn drop_quietly<T>(what: &'static str, value: T) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value))) {
        let text = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&'static str>().copied())
            .unwrap_or("a non-string payload");
        tracing::warn!(
            what,
            panic = %crate::model::text::storable_text(text, crate::model::text::MAX_ERROR_MESSAGE),
            "dropping application code's value panicked: leaked instead"
        );
        std::mem::forget(panic);
    }
}

#[cfg(test)]
mod tests {
    use std::panic::AssertUnwindSafe;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A panic payload whose own drop panics.
    struct DropPanics;

    impl Drop for DropPanics {
        fn drop(&mut self) {
            panic!("dropping the payload panicked");
        }
    }

    /// A handler's error whose drop panics.
    #[derive(Debug)]
    struct ErrorDropPanics;

    impl std::fmt::Display for ErrorDropPanics {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an error whose drop panics")
        }
    }

    impl std::error::Error for ErrorDropPanics {}

    impl Drop for ErrorDropPanics {
        fn drop(&mut self) {
            panic!("dropping the error panicked");
        }
    }

    fn returned_error_drop_panics() -> Result<(), JobError> {
        Err(JobError::Retryable(Box::new(ErrorDropPanics)))
    }

    fn context() -> JobContext {
        let info = crate::AttemptInfo {
            id: 1,
            kind: "k".into(),
            queue: "q".into(),
            attempt: 1,
            max_attempts: 3,
        };
        let lease = crate::Lease {
            id: 1,
            token: uuid::Uuid::nil(),
        };
        JobContext::new(
            info,
            lease,
            Arc::new(crate::attempt::context::Extensions::new()),
            tokio_util::sync::CancellationToken::new(),
        )
    }

    #[test]
    fn an_end_dropped_unread_drops_what_the_handler_returned_in_a_guard() {
        // Timed out: what it returned while being stopped is ignored, and dropped.
        let timed_out = TaskEnd::new(Ok(returned_error_drop_panics()), Some(StopCause::TimedOut));
        let end = std::panic::catch_unwind(AssertUnwindSafe(|| {
            timed_out.into_attempt_end(Duration::from_millis(300))
        }))
        .expect("the drop's panic stays inside");
        assert!(matches!(end, AttemptEnd::TimedOut(_)), "{end:?}");
        // Stopped by a shutdown, and dropped by an early return without being read.
        let stopped = TaskEnd::new(Ok(returned_error_drop_panics()), Some(StopCause::Told));
        assert!(!stopped.decided());
        std::panic::catch_unwind(AssertUnwindSafe(|| drop(stopped)))
            .expect("the drop's panic stays inside");
    }

    #[test]
    fn an_end_ignored_for_an_unstorable_step_is_dropped_in_a_guard() {
        let ctx = context();
        ctx.mark_step_unstorable("the output of step `s` cannot be stored".into());
        let end = AttemptEnd::Returned(returned_error_drop_panics());
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            conclude(
                end,
                &ctx,
                false,
                &crate::Backoff::DEFAULT,
                0,
                &mut fastrand::Rng::with_seed(1),
            )
        }))
        .expect("the drop's panic stays inside");
        match outcome {
            Outcome::Discard { failure } => {
                assert_eq!(failure.class, ErrorClass::StepUnstorable, "{failure:?}")
            }
            other => panic!("expected a step_unstorable discard, got {other:?}"),
        }
    }

    #[test]
    fn a_panic_message_is_cut_to_an_error_message_s_bound() {
        use crate::model::text::MAX_ERROR_MESSAGE;
        let long: Box<dyn std::any::Any + Send> = Box::new("y".repeat(20_000_000));
        let message = panic_message(long);
        assert!(message.len() <= MAX_ERROR_MESSAGE, "{}", message.len());
        assert!(message.ends_with("bytes cut]"), "{}", &message[8000..]);
        let nul: Box<dyn std::any::Any + Send> = Box::new("bad \0 byte".to_owned());
        assert_eq!(panic_message(nul), "bad \0 byte", "cut, not cleaned");
    }

    #[test]
    fn a_panic_payload_whose_drop_panics_is_shown_without_escaping() {
        let payload: Box<dyn std::any::Any + Send> = Box::new(DropPanics);
        assert_eq!(panic_message(payload), "panicked with a non-string payload");
    }

    #[tokio::test]
    async fn run_attempt_catches_panics_and_enforces_the_timeout() {
        let panics: crate::attempt::registry::BoxJobFuture = Box::pin(async { panic!("inside") });
        match run_attempt(panics, Duration::from_secs(5)).await {
            AttemptEnd::Panicked(m) => assert_eq!(m, "inside"),
            other => panic!("expected a panic, got {other:?}"),
        }
        let hangs: crate::attempt::registry::BoxJobFuture = Box::pin(std::future::pending());
        assert!(matches!(
            run_attempt(hangs, Duration::from_millis(5)).await,
            AttemptEnd::TimedOut(_)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_attempt_returns_only_once_code_that_does_not_await_has_ended() {
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let blocks: BoxJobFuture = Box::pin(async move {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        let end = run_attempt(blocks, Duration::from_millis(10)).await;
        assert!(matches!(end, AttemptEnd::TimedOut(_)), "{end:?}");
        assert!(
            ended.load(Ordering::SeqCst),
            "returned before the blocked code ended"
        );
    }
}
