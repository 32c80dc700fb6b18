//! Waiting for jobs: until one reaches a state, until a queue has nothing left to run. Bounded,
//! and a timeout says what was seen.

use std::panic::Location;
use std::time::Duration;

use job_core::{JobId, JobRow, JobState, Store};
#[cfg(feature = "postgres")]
use job_postgres::PgStore;
use tokio::time::Instant;

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

/// Waits until `queue` of `store` is idle (at most [`WAIT`]): no job running, none due, and
/// no pending job that nothing active holds back any more (its dependencies all finished, no
/// job of its ordering key waiting or running: the stager moves it on by itself). Jobs
/// scheduled for later, or retrying after a backoff that has not run out, do not count.
///
/// # Panics
/// When the queue stays busy, with what it still holds per state and the caller's line.
#[cfg(feature = "postgres")]
#[track_caller]
pub fn wait_until_idle<'a>(
    store: &'a PgStore,
    queue: &'a str,
) -> impl std::future::Future<Output = ()> + 'a {
    let at = Location::caller();
    async move {
        let deadline = Instant::now() + WAIT;
        loop {
            // A pending job counts once nothing it waits for is active: every job it depends
            // on finished, and no job of its ordering key waits or runs. The next stager pass
            // moves it on by itself (a dependent or a batch callback ran after "idle").
            let busy: Vec<(String, i64)> = sqlx::query_as(
                "SELECT state::text, count(*) FROM job.jobs j
                 WHERE queue = $1 AND (state = 'running'
                       OR (state IN ('available', 'scheduled', 'retryable') AND run_at <= now())
                       OR (state = 'pending'
                           AND NOT EXISTS (
                               SELECT 1 FROM job.dependencies d
                               JOIN job.jobs w ON w.id = d.depends_on
                               WHERE d.job_id = j.id
                                 AND w.state NOT IN ('completed', 'cancelled', 'discarded'))
                           AND NOT EXISTS (
                               SELECT 1 FROM job.jobs h
                               WHERE j.ordering_key IS NOT NULL
                                 AND h.ordering_key = j.ordering_key
                                 AND h.state IN ('scheduled', 'available', 'running',
                                                 'retryable'))))
                 GROUP BY state ORDER BY state",
            )
            .bind(queue)
            .fetch_all(store.pool())
            .await
            .unwrap_or_else(|e| panic!("{at}: reading queue `{queue}`: {e}"));
            if busy.is_empty() {
                warn_if_the_queue_is_unknown(store, queue, at).await;
                return;
            }
            if Instant::now() > deadline {
                panic!("{at}: queue `{queue}` was not idle within {WAIT:?}: still {busy:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Says on stderr when `queue` never held a job while other queues have jobs waiting or
/// running: `wait_until_idle` of a misspelled queue, or of `"default"` for jobs whose `#[job]`
/// names another, returns at once and would let the test go on before its jobs ran.
#[cfg(feature = "postgres")]
async fn warn_if_the_queue_is_unknown(store: &PgStore, queue: &str, at: &Location<'_>) {
    let elsewhere: Vec<(String, i64)> = sqlx::query_as(
        "SELECT o.queue, count(*) FROM job.jobs o
         WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.queue = $1)
           AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable')
         GROUP BY o.queue ORDER BY o.queue LIMIT 10",
    )
    .bind(queue)
    .fetch_all(store.pool())
    .await
    .unwrap_or_default();
    if !elsewhere.is_empty() {
        let list: Vec<String> = elsewhere
            .iter()
            .map(|(q, n)| format!("`{q}` ({n})"))
            .collect();
        eprintln!(
            "job-testkit wait_until_idle ({at}): queue `{queue}` holds no job at all, so it is \
             idle at once; jobs wait or run in other queues: {}. Wait on the queue the jobs' \
             `#[job(queue = ..)]` names.",
            list.join(", ")
        );
    }
}
