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
/// When the job does not get there in time, with the row last seen (state, attempt, errors)
/// and the caller's line; or when it does not exist.
#[track_caller]
pub fn wait_for<'a, S: Store>(
    store: &'a S,
    id: JobId,
    state: JobState,
) -> impl std::future::Future<Output = JobRow> + 'a {
    let at = Location::caller();
    async move {
        let deadline = Instant::now() + WAIT;
        loop {
            let row = store
                .get(id)
                .await
                .unwrap_or_else(|e| panic!("{at}: reading job {id}: {e}"))
                .unwrap_or_else(|| panic!("{at}: job {id} does not exist"));
            if row.state == state {
                return row;
            }
            if Instant::now() > deadline {
                panic!(
                    "{at}: job {id} did not become {state} within {WAIT:?}; it is {} at attempt \
                     {} of {}, errors {:?}",
                    row.state,
                    row.attempt,
                    row.max_attempts,
                    row.errors
                        .iter()
                        .map(|e| format!("#{} {}: {}", e.attempt, e.class, e.message))
                        .collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
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
            let busy = store
                .busy(queue)
                .await
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
