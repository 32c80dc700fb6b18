//! Waiting for jobs: until one reaches a state, until a queue has nothing left to run. Bounded,
//! and a timeout says what was seen.

use std::panic::Location;
use std::time::Duration;

use job_core::{JobId, JobRow, JobState, Store};
use tokio::time::Instant;

use crate::backend::TestStore;

/// How long the waits wait unless told otherwise.
pub const WAIT: Duration = Duration::from_secs(10);

/// Waits until job `id` of `store` is in `state` (at most [`WAIT`]) and returns its row.
///
/// ```no_run
/// # async fn demo(store: job_postgres::PgStore, id: i64) {
/// use job_core::JobState;
/// let row = job_testkit::wait_for(&store, id, JobState::Completed).await;
/// assert_eq!(row.attempt, 2);
/// # }
/// ```
///
/// # Panics
/// When the job does not get there in time, with the row last seen (kind, queue, state,
/// attempt, errors; for a job still waiting, whether it is due, as when no worker runs its
/// kind in its queue) and the caller's line; at once when it is in a final state other than
/// `state` (a job `discarded` never becomes `completed`); when it does not exist; when a read
/// does not finish by the deadline (every connection of the pool taken).
#[track_caller]
pub fn wait_for<'a, S: Store>(
    store: &'a S,
    id: JobId,
    state: JobState,
) -> impl std::future::Future<Output = JobRow> + 'a {
    let at = Location::caller();
    wait_for_within(store, id, state, WAIT, at)
}

pub(crate) async fn wait_for_within<S: Store>(
    store: &S,
    id: JobId,
    state: JobState,
    limit: Duration,
    at: &'static Location<'static>,
) -> JobRow {
    let deadline = Instant::now() + limit;
    let mut last: Option<JobRow> = None;
    loop {
        // Each read ends by the deadline: one waiting for a connection of an exhausted pool
        // would otherwise take the pool's own timeout (30 s for a TestDb's).
        let left = deadline.saturating_duration_since(Instant::now());
        let read = match tokio::time::timeout(left, store.get(id)).await {
            Ok(read) => read,
            Err(_) => panic!(
                "{at}: job {id} did not become {state} within {limit:?}: reading it did not \
                 finish in time (every connection of the store's pool taken?); last seen: {}",
                last.as_ref().map_or_else(
                    || "nothing yet".to_owned(),
                    |row| seen(row, chrono::Utc::now())
                )
            ),
        };
        let row = read
            .unwrap_or_else(|e| panic!("{at}: reading job {id}: {e}"))
            .unwrap_or_else(|| panic!("{at}: job {id} does not exist"));
        if row.state == state {
            return row;
        }
        if row.state.is_terminal() {
            panic!(
                "{at}: job {id} is {}, a final state: it can no longer become {state}; {}",
                row.state,
                seen(&row, chrono::Utc::now())
            );
        }
        if Instant::now() > deadline {
            panic!(
                "{at}: job {id} did not become {state} within {limit:?}; {}",
                seen(&row, chrono::Utc::now())
            );
        }
        last = Some(row);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a wait's failure says of the row it saw last.
fn seen(row: &JobRow, now: chrono::DateTime<chrono::Utc>) -> String {
    let errors: Vec<String> = row
        .errors
        .iter()
        .map(|e| format!("#{} {}: {}", e.attempt, e.class, e.message))
        .collect();
    let mut said = format!(
        "it is {} at attempt {} of {} (kind `{}`, queue `{}`), errors {errors:?}",
        row.state, row.attempt, row.max_attempts, row.kind, row.queue
    );
    let waiting = matches!(
        row.state,
        JobState::Available | JobState::Scheduled | JobState::Retryable
    );
    if waiting && row.run_at <= now {
        said.push_str(&format!(
            "; due since {} and not claimed: does a running worker register kind `{}` and \
             run queue `{}` (`.register::<..>()`, `.queue(\"{}\", n)`), with the kind and \
             the queue not paused?",
            row.run_at, row.kind, row.queue, row.queue
        ));
    } else if waiting {
        said.push_str(&format!("; due at {}", row.run_at));
    }
    said
}

/// Waits until `queue` of `store` (a `PgStore` or a `SqliteStore`) is idle (at most
/// [`WAIT`]): no job running, none due, and no pending job that nothing active holds back any
/// more (its dependencies all finished, no job of its ordering key waiting or running: the
/// stager moves it on by itself). Jobs scheduled for later, or retrying after a backoff that
/// has not run out, do not count. A queue that holds no job at all is idle at once: it then
/// says on stderr which other queues have jobs waiting or running (a misspelled queue, or a
/// `#[job(queue = ..)]` forgotten).
///
/// # Panics
/// When the queue stays busy, with what it still holds per state and the caller's line.
#[track_caller]
pub fn wait_until_idle<'a, S: TestStore>(
    store: &'a S,
    queue: &'a str,
) -> impl std::future::Future<Output = ()> + 'a {
    let at = Location::caller();
    async move {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let busy = tokio::time::timeout(left, store.busy(queue))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{at}: queue `{queue}` was not idle within {WAIT:?}: reading it did not \
                         finish in time (every connection of the store's pool taken?)"
                    )
                })
                .unwrap_or_else(|e| panic!("{at}: reading queue `{queue}`: {e}"));
            if busy.is_empty() {
                let elsewhere = store.busy_elsewhere(queue).await;
                if !elsewhere.is_empty() {
                    let list: Vec<String> = elsewhere
                        .iter()
                        .map(|(q, n)| format!("`{q}` ({n})"))
                        .collect();
                    eprintln!(
                        "job-testkit wait_until_idle ({at}): queue `{queue}` holds no job at \
                         all, so it is idle at once; jobs wait or run in other queues: {}. \
                         Wait on the queue the jobs' `#[job(queue = ..)]` names.",
                        list.join(", ")
                    );
                }
                return;
            }
            if Instant::now() > deadline {
                panic!("{at}: queue `{queue}` was not idle within {WAIT:?}: still {busy:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;
    use crate::TestDb;
    use job_core::{Admin, NewJob};

    /// What `f` panicked with, `f` run as a task of its own.
    async fn panic_of(f: impl std::future::Future<Output = JobRow> + Send + 'static) -> String {
        let panic = tokio::spawn(f).await.expect_err("it panicked").into_panic();
        match panic.downcast::<String>() {
            Ok(said) => *said,
            Err(panic) => panic.downcast_ref::<&str>().unwrap().to_string(),
        }
    }

    #[tokio::test]
    async fn a_wait_for_a_state_a_final_job_cannot_reach_fails_at_once() {
        let db = TestDb::new().await;
        let store = db.store();
        let id = store.enqueue(NewJob::new("noop", "{}")).await.unwrap();
        store.cancel(id).await.unwrap();
        // Only the final state ends it before the 20 s.
        let said = panic_of(async move {
            wait_for_within(
                &store,
                id,
                JobState::Completed,
                Duration::from_secs(20),
                Location::caller(),
            )
            .await
        })
        .await;
        assert!(
            said.contains("is cancelled, a final state: it can no longer become completed"),
            "{said}"
        );
        db.close().await;
    }

    #[tokio::test]
    async fn a_job_no_worker_claims_is_named_with_its_kind_and_queue() {
        let db = TestDb::new().await;
        let store = db.store();
        let mut job = NewJob::new("send_invoice", "{}");
        job.queue = "billing".into();
        let id = store.enqueue(job).await.unwrap();
        let said = panic_of(async move {
            wait_for_within(
                &store,
                id,
                JobState::Completed,
                Duration::from_millis(100),
                Location::caller(),
            )
            .await
        })
        .await;
        for needle in [
            "did not become completed within 100ms",
            "(kind `send_invoice`, queue `billing`)",
            "not claimed: does a running worker register kind `send_invoice` and run queue `billing`",
        ] {
            assert!(said.contains(needle), "{needle:?} in {said}");
        }
        db.close().await;
    }

    #[tokio::test]
    async fn a_wait_on_an_exhausted_pool_ends_by_its_deadline() {
        let db = TestDb::new().await;
        let store = db.store();
        let id = store.enqueue(NewJob::new("noop", "{}")).await.unwrap();
        let mut held = Vec::new();
        while let Ok(Ok(conn)) =
            tokio::time::timeout(Duration::from_millis(500), db.pool().acquire()).await
        {
            held.push(conn);
        }
        assert_eq!(held.len(), 12, "the pool's connections, all taken");
        // The pool would make the read wait 30 s for a connection.
        let said = panic_of(async move {
            wait_for_within(
                &store,
                id,
                JobState::Completed,
                Duration::from_millis(200),
                Location::caller(),
            )
            .await
        })
        .await;
        assert!(
            said.contains("did not become completed within 200ms: reading it did not finish"),
            "{said}"
        );
        drop(held);
        db.close().await;
    }
}
