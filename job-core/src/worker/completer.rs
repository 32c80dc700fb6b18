//! Writes outcomes in batches: whatever accumulated while the previous statement ran goes in
//! the next one. Every write stays guarded by its lease token; an outcome is never dropped
//! because of batching, only because its lease was lost.
//!
//! One outcome the database refuses (a value it cannot store, a constraint or trigger of the
//! application's) never holds up the others: a refused batch is written again one outcome at
//! a time, so the rest land at once; the refused outcome is tried alone a few times, then made
//! storable ([`Outcome::made_storable`]), then replaced by a discard of class `unstorable`,
//! and if even that is refused it is left to the rescuer (its lease is no longer renewed).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::attempt::fault::FaultPoint;
use crate::attempt::pipeline::panic_message;
use crate::contract::store::{BreakerCount, Finalize, Finalized, Lease, Store};
use crate::model::attempt_info::AttemptInfo;
use crate::model::error::StoreError;
use crate::model::outcome::{ErrorClass, Failure, Outcome};

use super::inflight::{Abort, Flags};
use super::shared::Shared;
use super::stats::bump;
use crate::telemetry::{breaker_tripped, JobLabels};

/// How often an outcome refused alone is tried again as it is, before it is made storable.
const REFUSED_TRIES: u32 = 3;
/// The longest text of an outcome made storable after a refusal, in bytes.
const STRICT_TEXT: usize = 1024;
/// The longest delay of an outcome made storable after a refusal.
const STRICT_DELAY: Duration = Duration::from_secs(30 * 24 * 3600);

/// An outcome on its way to the store.
pub(crate) struct Completion {
    pub(crate) finalize: Finalize,
    pub(crate) info: Arc<AttemptInfo>,
    /// The handler finalized the job in its own transaction: a lost lease is expected.
    pub(crate) finalized_by_handler: bool,
    /// Why the execution was taken away, once it is (read when its outcome is dropped).
    pub(crate) abort: Arc<Flags>,
    /// Its metric labels.
    pub(crate) labels: JobLabels,
    /// How long its handler ran, when it ran (a poison payload never starts one).
    pub(crate) ran_for: Option<Duration>,
    /// The progress its handler reported after the keeper last wrote it: written just before
    /// the outcome.
    pub(crate) last_progress: Option<String>,
    /// A try of a batch holding it failed without an answer (it was then put off to a
    /// smaller batch): it may have been written, which its next write must allow for.
    pub(crate) tried: bool,
    /// It failed alone, again and again, for a passing reason (a corrupted row, a statement
    /// timeout on its cascade): written alone from then on, after each batch, so that the
    /// others do not wait for it.
    pub(crate) alone: bool,
}

/// Writes outcomes until `stop`, then what is left. Shutdown waits for that last flush until
/// the end of the grace at most, then stops this task wherever it is (a database that does not
/// answer): the outcomes not written are released with the other leases left, or expire.
pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    mut rx: mpsc::UnboundedReceiver<Completion>,
    stop: CancellationToken,
) {
    let max = shared.config.finalize_batch;
    // The batch size: halved when a batch fails again and again for a passing reason (a
    // DBA's `statement_timeout` shorter than a batch of `max` takes on a slow server would
    // otherwise fail every try, for ever, while the keeper renews the leases), and grown back
    // to `max` by an eighth with each batch written whole.
    let mut limit = max;
    // Outcomes whose row another transaction held at the last try: in every batch until
    // written (or until their lease is gone), and tried again after BUSY_RETRY when nothing
    // else comes.
    let mut carried: Vec<Completion> = Vec::new();
    let mut stopping = false;
    // Reused: every flush leaves it empty.
    let mut batch = Vec::with_capacity(max.min(1024));
    loop {
        if !stopping {
            let next = tokio::select! {
                biased;
                c = rx.recv() => {
                    // Every sender gone: nothing more can come.
                    stopping = c.is_none();
                    c
                }
                () = tokio::time::sleep(BUSY_RETRY), if !carried.is_empty() => None,
                _ = stop.cancelled() => {
                    stopping = true;
                    None
                }
            };
            batch.extend(next);
        } else if !carried.is_empty() {
            tokio::time::sleep(BUSY_RETRY).await;
        }
        if stopping {
            // Stopping: every executor is done, so whatever is queued is all there is.
            while let Ok(c) = rx.try_recv() {
                batch.push(c);
            }
            if batch.is_empty() && carried.is_empty() {
                // Ended attempts counted outside a batch (a job its handler completed in its
                // own transaction, seen by the lease keeper first; an outcome dropped with its
                // lease) since the last batch: added now, or lost with the process.
                if AssertUnwindSafe(record_breakers(&shared))
                    .catch_unwind()
                    .await
                    .is_err()
                {
                    tracing::error!(
                        "adding to the circuit breakers' counts panicked; those counts are lost"
                    );
                }
                return;
            }
        }
        // Outcomes that fail alone are written apart, after the batch.
        let mut alone = Vec::new();
        let mut i = 0;
        while i < carried.len() {
            if carried[i].alone {
                alone.push(carried.swap_remove(i));
            } else {
                i += 1;
            }
        }
        batch.append(&mut carried);
        while batch.len() < limit {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        if batch.len() > limit {
            carried.extend(batch.drain(limit..));
        }
        let before = limit;
        flush(&shared, &mut batch, &mut carried, &mut limit).await;
        if limit == before && limit < max {
            // Back towards `max` by an eighth a batch: doubled at once, a size that fails
            // would be tried again on the next batch.
            limit = limit.saturating_add((limit / 8).max(1)).min(max);
        }
        for c in alone {
            let mut one = vec![c];
            flush(&shared, &mut one, &mut carried, &mut 1).await;
        }
        if AssertUnwindSafe(record_breakers(&shared))
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!(
                "adding to the circuit breakers' counts panicked; those counts are lost"
            );
        }
    }
}

/// How long outcomes whose row another transaction held wait before they are tried again
/// when no other outcome comes.
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// Adds the ended attempts counted since the last call to the kinds' circuit breakers (one
/// statement, only when a kind with a breaker ended attempts). Counts the store could not take
/// are kept for the next call: a breaker is a statistic, and late counts still count.
async fn record_breakers<S: Store>(shared: &Shared<S>) {
    let counts: Vec<BreakerCount> = {
        let mut map = shared.breakers.lock().unwrap_or_else(|e| e.into_inner());
        if map.is_empty() {
            return;
        }
        let mut counts: Vec<_> = map.drain().map(|(_, c)| c).collect();
        counts.sort_by(|a, b| a.kind.cmp(&b.kind));
        counts
    };
    match shared.store.record_breakers(&counts).await {
        Ok(tripped) => {
            for t in tripped {
                breaker_tripped(&t.kind);
                shared.breaker_tripped(&t.kind);
                // After the kind is marked: a reader of the count finds it marked.
                bump(&shared.counters.breakers_tripped, 1);
                tracing::error!(
                    kind = %t.kind,
                    reason = %t.reason,
                    resume_at = %t.resume_at,
                    "circuit breaker tripped: the kind is paused"
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not add to the circuit breakers' counts; kept for the next try");
            let mut map = shared.breakers.lock().unwrap_or_else(|e| e.into_inner());
            for c in counts {
                let kept = map.entry(c.kind.clone()).or_insert(BreakerCount {
                    attempts: 0,
                    failures: 0,
                    ..c.clone()
                });
                kept.attempts = kept.attempts.saturating_add(c.attempts);
                kept.failures = kept.failures.saturating_add(c.failures);
            }
        }
    }
}

/// Writes `batch`, retrying a statement that failed for a passing reason (outcomes are
/// never dropped for that); a refused batch is written one outcome at a time. Outcomes whose
/// row another transaction holds go to `busy`, to be written with a later batch. After every
/// [`SPLIT_AFTER`] failures in a row the batch is halved: the rest goes to `busy`, and `limit`
/// (the size of the batches that follow) with it.
async fn flush<S: Store>(
    shared: &Shared<S>,
    batch: &mut Vec<Completion>,
    busy: &mut Vec<Completion>,
    limit: &mut usize,
) {
    save_last_progress(shared, batch).await;
    let mut failures = 0u32;
    loop {
        if failures > 0 || batch.iter().any(|c| c.tried) {
            settle_landed(shared, batch).await;
        }
        drop_lost(shared, batch);
        if batch.is_empty() {
            return;
        }
        let items: Vec<Finalize> = batch.iter().map(|c| c.finalize.clone()).collect();
        match finalize(shared, &items).await {
            Ok(results) => {
                let results = if failures > 0 || batch.iter().any(|c| c.tried) {
                    recheck_all(shared, batch, results).await
                } else {
                    results
                };
                for (c, result) in batch.drain(..).zip(results) {
                    if result == Finalized::Busy {
                        busy.push(c);
                    } else {
                        applied(shared, &c, result);
                    }
                }
                return;
            }
            Err(e) if e.is_refused() && batch.len() > 1 => {
                tracing::warn!(
                    error = %e,
                    outcomes = batch.len(),
                    "finalize refused: writing the outcomes one at a time"
                );
                for c in batch.drain(..) {
                    busy.extend(write_alone(shared, c).await);
                }
                return;
            }
            Err(e) if e.is_refused() => {
                if let Some(c) = batch.pop() {
                    busy.extend(write_alone(shared, c).await);
                }
                return;
            }
            Err(e) => {
                failures += 1;
                if failures % SPLIT_AFTER == 0 && batch.len() == 1 {
                    // Alone, and failing still: the other outcomes must not wait for it.
                    tracing::warn!(
                        error = %e,
                        failures,
                        id = batch[0].info.id,
                        "finalize of this outcome alone keeps failing: writing it apart"
                    );
                    for mut c in batch.drain(..) {
                        c.tried = true;
                        c.alone = true;
                        busy.push(c);
                    }
                    return;
                }
                if failures % SPLIT_AFTER == 0 && batch.len() > 1 {
                    let keep = batch.len() / 2;
                    tracing::warn!(
                        error = %e,
                        failures,
                        outcomes = batch.len(),
                        "finalize keeps failing: writing half of the outcomes at a time"
                    );
                    for mut c in batch.drain(keep..) {
                        c.tried = true;
                        busy.push(c);
                    }
                    for c in batch.iter_mut() {
                        c.tried = true;
                    }
                    *limit = keep;
                }
                pause_after(&e, failures, batch.len()).await;
            }
        }
    }
}

/// Failures in a row of one batch after which it is halved.
const SPLIT_AFTER: u32 = 3;

/// Writes the last progress reports of `batch`'s executions (made after their last
/// heartbeat) before their outcomes, as the keeper would have with the next heartbeat: the
/// stored progress is the job's latest. Only when some handler reported; bounded, and a
/// failure is logged and costs only that report.
async fn save_last_progress<S: Store>(shared: &Shared<S>, batch: &mut [Completion]) {
    let progress: Vec<(Lease, String)> = batch
        .iter_mut()
        .filter_map(|c| Some((c.finalize.lease, c.last_progress.take()?)))
        .collect();
    if progress.is_empty() {
        return;
    }
    // Caught as the finalize is: the completer must outlive a store (or layer) that panics.
    let save = AssertUnwindSafe(shared.store.save_progress(&progress)).catch_unwind();
    match tokio::time::timeout(LAST_PROGRESS_WAIT, save).await {
        Ok(Ok(Ok(_))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "last progress reports not recorded"),
        Ok(Err(panic)) => tracing::error!(
            panic = %panic_message(panic),
            "recording the last progress reports panicked; they are lost"
        ),
        Err(_) => tracing::warn!(
            timeout = ?LAST_PROGRESS_WAIT,
            "recording the last progress reports timed out"
        ),
    }
}

/// How long the completer waits to write the last progress reports before the outcomes.
const LAST_PROGRESS_WAIT: Duration = Duration::from_secs(2);

/// The store's finalize, a panic in it (a bug, or a store layer's) read as a refusal: the
/// completer must outlive it, or the outcomes after it would wait for ever while the keeper
/// renews their leases. As refused, the outcome is written alone, made storable, discarded,
/// or at last left to the rescuer.
async fn finalize<S: Store>(
    shared: &Shared<S>,
    items: &[Finalize],
) -> Result<Vec<Finalized>, StoreError> {
    match AssertUnwindSafe(shared.store.finalize(items))
        .catch_unwind()
        .await
    {
        Ok(written) => written,
        Err(panic) => Err(StoreError::refused(format!(
            "the store panicked writing the outcome: {}",
            panic_message(panic)
        ))),
    }
}

/// Writes one outcome alone: as it is (a few times), then made storable, then as a discard of
/// class `unstorable`; refused even so, it is given up and its lease left to expire.
/// An outcome that keeps failing for a passing reason ([`SPLIT_AFTER`] times in a row), or
/// whose row stays held by another transaction, is put off instead, marked to be written
/// alone after each batch (returned, for the caller to carry), as `flush` does with one
/// failing alone: the outcomes after it must not wait for it. (They did: one outcome whose
/// write failed with a lock timeout from an application's trigger, every time, after its
/// batch had been refused, held every later outcome of the worker for as long as it ran.)
async fn write_alone<S: Store>(shared: &Shared<S>, mut c: Completion) -> Option<Completion> {
    let mut refusals = 0u32;
    let mut busy = 0u32;
    // An outcome put off after a failed try may have been written by it: re-read as after a
    // failure of its own.
    let mut failures = u32::from(c.tried);
    loop {
        if !shared.inflight.holds(&c.finalize.lease) {
            let mut one = vec![c];
            if failures > 0 {
                settle_landed(shared, &mut one).await;
            }
            drop_lost(shared, &mut one);
            return None;
        }
        let error = match finalize(shared, std::slice::from_ref(&c.finalize)).await {
            Ok(results) => {
                let result = results.first().copied().unwrap_or(Finalized::LeaseLost);
                if result == Finalized::Busy {
                    // Rare here (an outcome refused, then its row held): tried again a few
                    // times, then carried, apart from the batches, while the lease is held.
                    busy += 1;
                    if busy >= SPLIT_AFTER {
                        c.alone = true;
                        return Some(c);
                    }
                    tokio::time::sleep(BUSY_RETRY).await;
                    continue;
                }
                let result = if failures > 0 {
                    recheck(shared, &c, result, Instant::now() + LANDED_READ).await
                } else {
                    result
                };
                applied(shared, &c, result);
                return None;
            }
            Err(e) if !e.is_refused() => {
                failures += 1;
                if failures % SPLIT_AFTER == 0 {
                    tracing::warn!(
                        error = %e,
                        failures,
                        id = c.info.id,
                        "finalize of this outcome alone keeps failing: writing it apart"
                    );
                    c.tried = true;
                    c.alone = true;
                    return Some(c);
                }
                pause_after(&e, failures, 1).await;
                continue;
            }
            Err(e) => e,
        };
        refusals += 1;
        let id = c.info.id;
        let outcome = c.finalize.outcome.name();
        if refusals < REFUSED_TRIES {
            tracing::warn!(id, outcome, error = %error, refusals, "outcome refused; trying it alone again");
            tokio::time::sleep(Duration::from_millis(50) * refusals).await;
        } else if refusals == REFUSED_TRIES {
            tracing::warn!(id, outcome, error = %error, "outcome refused; writing it made storable");
            c.finalize.outcome = c.finalize.outcome.made_storable(STRICT_TEXT, STRICT_DELAY);
            if let Some(result) = c.finalize.result.take() {
                // A result cannot be cut like a message: a completion without the result it
                // promised would mislead whoever reads it, so the job becomes a dead letter
                // saying why, for an operator to look at.
                c.finalize.outcome = Outcome::Discard {
                    failure: Failure {
                        attempt: c.info.attempt,
                        class: ErrorClass::Unstorable,
                        message: format!(
                            "the database refused the job's result ({} bytes of JSON) {refusals} \
                             times, the last time with: {}",
                            result.len(),
                            crate::model::text::storable_text(&error.to_string(), STRICT_TEXT)
                        ),
                    },
                };
            }
        } else if refusals == REFUSED_TRIES + 1 {
            bump(&shared.counters.unstorable, 1);
            tracing::error!(id, outcome, error = %error, "outcome refused even made storable; discarding the job");
            c.finalize.outcome = Outcome::Discard {
                failure: Failure {
                    attempt: c.info.attempt,
                    class: ErrorClass::Unstorable,
                    message: format!(
                        "the database refused this attempt's outcome (`{outcome}`) {refusals} \
                         times, the last time with: {}",
                        crate::model::text::storable_text(&error.to_string(), STRICT_TEXT)
                    ),
                },
            };
        } else {
            tracing::error!(
                id,
                error = %error,
                "even a discard of this job is refused: leaving it to the rescuer"
            );
            shared.inflight.remove(&c.finalize.lease);
            return None;
        }
    }
}

/// After a try whose answer never came (the connection broke, the statement timed out), the
/// outcome may have been written all the same: the lease is then gone because this worker
/// wrote it. A guarded write that finds the lease gone, or a heartbeat that reports it lost
/// meanwhile, would count a job that ended well as a lost lease. So the job's row is read:
/// when it shows this attempt's outcome, the outcome counts as applied.
/// The read must answer by `by`.
async fn recheck<S: Store>(
    shared: &Shared<S>,
    c: &Completion,
    result: Finalized,
    by: Instant,
) -> Finalized {
    if result == Finalized::LeaseLost
        && !c.finalized_by_handler
        && c.abort.reason.get() != Some(&Abort::Fenced)
        && landed(shared, c, by).await
    {
        tracing::debug!(
            id = c.info.id,
            "an earlier try wrote the outcome; its answer was lost"
        );
        return Finalized::Applied;
    }
    result
}

/// Counts as applied, and takes out of `batch`, the outcomes whose lease the keeper saw go
/// while the store did not answer, when the job's row shows them written (see [`recheck`]).
async fn settle_landed<S: Store>(shared: &Shared<S>, batch: &mut Vec<Completion>) {
    let by = Instant::now() + LANDED_READ;
    let mut settled = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(LANDED_READS) {
        let reads: Vec<_> = chunk.iter().map(|c| settles(shared, c, by)).collect();
        settled.extend(futures_util::future::join_all(reads).await);
    }
    let mut settled = settled.into_iter();
    batch.retain(|c| {
        if !settled.next().unwrap_or(false) {
            return true;
        }
        applied(shared, c, Finalized::Applied);
        false
    });
}

/// Whether `c`, whose lease this worker no longer holds, was written by an earlier try: what
/// [`recheck`] makes of a write that found the lease gone.
async fn settles<S: Store>(shared: &Shared<S>, c: &Completion, by: Instant) -> bool {
    !shared.inflight.holds(&c.finalize.lease)
        && recheck(shared, c, Finalized::LeaseLost, by).await == Finalized::Applied
}

/// [`recheck`] for each outcome of `batch` and its result, [`LANDED_READS`] at a time.
async fn recheck_all<S: Store>(
    shared: &Shared<S>,
    batch: &[Completion],
    results: Vec<Finalized>,
) -> Vec<Finalized> {
    let by = Instant::now() + LANDED_READ;
    let mut out = Vec::with_capacity(results.len());
    for (chunk, results) in batch.chunks(LANDED_READS).zip(results.chunks(LANDED_READS)) {
        let reads: Vec<_> = chunk
            .iter()
            .zip(results)
            .map(|(c, result)| recheck(shared, c, *result, by))
            .collect();
        out.extend(futures_util::future::join_all(reads).await);
    }
    out
}

/// How many of those reads run at once (on the worker's own connections).
const LANDED_READS: usize = 4;

/// How long the reads of the rows of one batch's outcomes whose answer was lost may take in
/// all: past it, the outcomes not read count as lost leases, as before the reads, and the
/// completer goes on. (A bound per read would let a slow server hold a batch of 1,000 for
/// 250 of them.)
const LANDED_READ: Duration = Duration::from_secs(2);

/// Whether the job's row holds `c`'s outcome as this attempt wrote it: the state it leads to,
/// at the same attempt, and for a failure or a cancel the history's last entry this attempt's,
/// with its class and message (a rescue writes class `lease_expired`, the expirer its own
/// message, another worker's attempt a higher count; an older entry of the same attempt
/// number, kept across a redrive, is not the last).
/// A retry already claimed again, or a snooze, which gives the attempt back, is not told
/// apart: it counts as a lost lease, as it did. An unreadable row, or one not read within
/// `by`, answers no.
async fn landed<S: Store>(shared: &Shared<S>, c: &Completion, by: Instant) -> bool {
    use crate::model::state::JobState;
    if Instant::now() >= by {
        return false;
    }
    let Ok(Ok(Some(row))) = tokio::time::timeout_at(by, shared.store.get(c.info.id)).await else {
        return false;
    };
    if row.attempt != c.info.attempt {
        return false;
    }
    // The stores keep a message made storable (no NUL, at most MAX_ERROR_MESSAGE bytes).
    let stored = |message: &str| {
        crate::model::text::storable_text(message, crate::model::text::MAX_ERROR_MESSAGE)
            .into_owned()
    };
    let last_is = |failure: &Failure| {
        row.errors.last().is_some_and(|e| {
            e.attempt == failure.attempt
                && e.class == failure.class.as_str()
                && e.message == stored(&failure.message)
        })
    };
    match &c.finalize.outcome {
        Outcome::Complete => row.state == JobState::Completed,
        Outcome::Cancel { reason } => {
            row.state == JobState::Cancelled
                && row
                    .errors
                    .last()
                    .is_some_and(|e| e.class == "cancelled" && e.message == stored(reason))
        }
        // A discard of a job whose cancel was requested is stored as a cancellation.
        Outcome::Discard { failure } => {
            (row.state == JobState::Discarded
                || (row.state == JobState::Cancelled && row.cancel_requested))
                && last_is(failure)
        }
        Outcome::Retry { failure, .. } => {
            matches!(row.state, JobState::Retryable | JobState::Available) && last_is(failure)
        }
        Outcome::Snooze { .. } => false,
    }
}

/// Logs a failed finalize and waits before the next try: 20 ms more per failure, up to 1 s.
async fn pause_after(error: &StoreError, failures: u32, pending: usize) {
    tracing::warn!(error = %error, pending, "finalize failed; retrying");
    tokio::time::sleep(Duration::from_millis(20) * failures.min(50)).await;
}

/// Drops the outcomes whose lease this worker no longer holds (fenced while the store was
/// unreachable): another worker may own the job, so they must not be written.
fn drop_lost<S>(shared: &Shared<S>, batch: &mut Vec<Completion>) {
    batch.retain(|c| {
        let held = shared.inflight.holds(&c.finalize.lease);
        if !held && c.finalized_by_handler {
            shared.count_for_breaker(&c.info.kind, false);
            shared.counters.applied(&Outcome::Complete);
            c.labels.finished(&Outcome::Complete, c.ran_for);
        } else if !held && fenced(c) {
            // Counted by the keeper, which fenced it.
            tracing::warn!(
                id = c.info.id,
                kind = %c.info.kind,
                "outcome dropped: fenced before it was written"
            );
        } else if !held {
            bump(&shared.counters.lease_lost, 1);
            c.labels.lease_lost();
            tracing::warn!(
                id = c.info.id,
                kind = %c.info.kind,
                "outcome dropped: lease lost before it was written"
            );
        }
        held
    });
}

/// Whether the keeper fenced `c`'s execution (and counted it so): a lost lease of its outcome
/// is no other loss.
fn fenced(c: &Completion) -> bool {
    matches!(c.abort.reason.get(), Some(Abort::Fenced | Abort::Held))
}

/// How an outcome counts for its kind's circuit breaker: `Some(failed)` for an attempt that
/// ended (a retry or a discard failed), `None` for a snooze or a cancellation, which say
/// nothing of whether the service the kind calls works.
fn breaker_counts(outcome: &Outcome) -> Option<bool> {
    match outcome {
        Outcome::Snooze { .. } | Outcome::Cancel { .. } => None,
        Outcome::Retry { .. } | Outcome::Discard { .. } => Some(true),
        Outcome::Complete => Some(false),
    }
}

/// What a discard written as a cancellation (`Finalized::Cancelled`: a cancel was requested
/// since the last heartbeat) counts as.
pub(crate) fn discard_written_as_cancellation() -> Outcome {
    Outcome::Cancel {
        reason: "cancel requested; the last attempt failed".into(),
    }
}

/// Counts and logs what the store did with one outcome, and forgets its execution.
fn applied<S>(shared: &Shared<S>, c: &Completion, result: Finalized) {
    match result {
        Finalized::Applied | Finalized::Cancelled => {
            // The attempt failed, whatever was written: the breaker counts what it did.
            if let Some(failed) = breaker_counts(&c.finalize.outcome) {
                shared.count_for_breaker(&c.info.kind, failed);
            }
            // The outcome counted is the one written: a discard written as a cancellation
            // (a cancel was requested since the last heartbeat) is no dead letter.
            let written;
            let outcome = if result == Finalized::Cancelled {
                written = discard_written_as_cancellation();
                &written
            } else {
                &c.finalize.outcome
            };
            shared.counters.applied(outcome);
            c.labels.finished(outcome, c.ran_for);
            match outcome {
                // A dead letter waits for an operator: said once, with what it needs to be
                // found (retries stay at DEBUG: their counters say how many).
                Outcome::Discard { failure } => tracing::warn!(
                    id = c.info.id,
                    kind = %c.info.kind,
                    queue = %c.info.queue,
                    attempt = failure.attempt,
                    class = failure.class.as_str(),
                    // Cut as it is stored: a handler's error is shown up to 32 KiB, and a
                    // poison's or a step's reason may hold application text too.
                    message = ?crate::model::text::storable_text(
                        &failure.message,
                        crate::model::text::MAX_ERROR_MESSAGE
                    ),
                    "dead letter: the job was discarded"
                ),
                _ => tracing::debug!(id = c.info.id, outcome = outcome.name(), "finalized"),
            }
        }
        Finalized::LeaseLost if c.finalized_by_handler => {
            // The handler's own transaction completed the job.
            shared.count_for_breaker(&c.info.kind, false);
            shared.counters.applied(&Outcome::Complete);
            c.labels.finished(&Outcome::Complete, c.ran_for);
            tracing::debug!(id = c.info.id, "finalized by the handler's own transaction");
        }
        // Fenced while its own transaction held the row (`Abort::Held`), and the lease ran
        // out before this write: counted by the keeper, which fenced it.
        Finalized::LeaseLost if fenced(c) => {
            tracing::warn!(
                id = c.info.id,
                kind = %c.info.kind,
                outcome = c.finalize.outcome.name(),
                "outcome dropped: fenced, and the lease ran out before it was written"
            );
        }
        // Never passed here: flush carries it, write_alone tries it again.
        Finalized::Busy | Finalized::LeaseLost => {
            bump(&shared.counters.lease_lost, 1);
            c.labels.lease_lost();
            tracing::warn!(
                id = c.info.id,
                kind = %c.info.kind,
                outcome = c.finalize.outcome.name(),
                "stale lease: outcome dropped, not applied"
            );
        }
    }
    shared.inflight.remove(&c.finalize.lease);
    shared.crashes_at(FaultPoint::AfterFinalize, &c.info);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{ErrorClass, Failure};

    #[test]
    fn a_breaker_counts_ended_attempts_and_not_snoozes_or_cancellations() {
        let failure = || Failure {
            attempt: 1,
            class: ErrorClass::Error,
            message: "down".into(),
        };
        assert_eq!(breaker_counts(&Outcome::Complete), Some(false));
        let retry = Outcome::Retry {
            delay: Duration::ZERO,
            failure: failure(),
        };
        assert_eq!(breaker_counts(&retry), Some(true));
        let discard = Outcome::Discard { failure: failure() };
        assert_eq!(breaker_counts(&discard), Some(true));
        let snooze = Outcome::Snooze {
            delay: Duration::ZERO,
        };
        assert_eq!(breaker_counts(&snooze), None);
        let cancel = Outcome::Cancel {
            reason: "asked".into(),
        };
        assert_eq!(breaker_counts(&cancel), None);
    }
}
