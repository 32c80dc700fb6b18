//! A crash at each named point, once per job, on its first attempt.

use job::{FaultPoint, Store};
use job_testkit::Faults;

use crate::support::*;

/// Runs 12 jobs with a crash at `point` on each job's first attempt and returns what happened.
async fn crash_everyone_at(point: FaultPoint, job_ms: u64) -> (Chaos, Vec<job::JobRow>, u64) {
    let chaos = Chaos::new().await;
    let ids = chaos.enqueue(12, job_ms).await;
    let faults = Faults::new().crash_at(point).attempt(1);
    // Leases of 1.5 s, renewed every 100 ms: a crashed attempt's lease still expires soon, a
    // 250 ms job still sees heartbeats, and a loaded run's late heartbeat fences no other
    // attempt (at `Traced`'s 300 ms, a third of it was all a heartbeat had).
    let worker = chaos
        .worker(chaos.store.clone())
        .configure(|c| {
            c.lease = Some(std::time::Duration::from_millis(1500));
            c.heartbeat_interval = Some(std::time::Duration::from_millis(100));
        })
        .faults(faults.clone())
        .build()
        .unwrap()
        .start();
    let rows = chaos.all_terminal(&ids).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        faults.crashes().len(),
        12,
        "every job crashed once at {point}"
    );
    assert_eq!(stats.completed, 12, "each job is finalized exactly once");
    chaos.timeline.assert_never_concurrent();
    assert_each_completed(&rows);
    (chaos, rows, stats.lease_lost)
}

/// Checks a crash that happened before the outcome was written: the job ran again on attempt 2
/// after its lease expired, with the lost attempt recorded.
fn assert_rerun_after_expiry(rows: &[job::JobRow]) {
    for row in rows {
        assert_eq!(row.attempt, 2, "job {}: the crashed attempt counts", row.id);
        assert_eq!(row.errors.len(), 1);
        assert_eq!(row.errors[0].class, "lease_expired");
        assert_eq!(row.errors[0].attempt, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_claim_reruns_the_job_once_its_lease_expires() {
    let (chaos, rows, _) = crash_everyone_at(FaultPoint::AfterClaim, 1).await;
    assert_rerun_after_expiry(&rows);
    for row in &rows {
        assert_eq!(
            chaos.timeline.executions(row.id).len(),
            1,
            "the handler never ran on attempt 1"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_perform_reruns_the_job_once_its_lease_expires() {
    let (chaos, rows, _) = crash_everyone_at(FaultPoint::BeforePerform, 1).await;
    assert_rerun_after_expiry(&rows);
    for row in &rows {
        assert_eq!(chaos.timeline.executions(row.id).len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_perform_runs_the_side_effect_again_but_never_concurrently() {
    let (chaos, rows, _) = crash_everyone_at(FaultPoint::AfterPerform, 1).await;
    assert_rerun_after_expiry(&rows);
    for row in &rows {
        let runs = chaos.timeline.executions(row.id);
        assert_eq!(
            runs.len(),
            2,
            "at least once: the side effect happens again"
        );
        assert!(
            runs.iter().all(|r| r.ended.is_some()),
            "both executions returned"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_finalize_runs_the_job_again() {
    let (chaos, rows, _) = crash_everyone_at(FaultPoint::BeforeFinalize, 1).await;
    assert_rerun_after_expiry(&rows);
    for row in &rows {
        assert_eq!(chaos.timeline.executions(row.id).len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_finalize_changes_nothing() {
    let (chaos, rows, lost) = crash_everyone_at(FaultPoint::AfterFinalize, 1).await;
    assert_eq!(lost, 0);
    for row in &rows {
        assert_eq!(row.attempt, 1, "the outcome was already written");
        assert!(row.errors.is_empty());
        assert_eq!(chaos.timeline.executions(row.id).len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_heartbeat_kills_the_execution_and_the_job_is_rescued() {
    // Jobs run for longer than a heartbeat period (100 ms).
    let (chaos, rows, _) = crash_everyone_at(FaultPoint::Heartbeat, 250).await;
    let mut killed_mid_run = 0;
    for row in &rows {
        // Attempt 1 crashed and its lease expired. A machine loaded enough to starve the lease
        // keeper for a second can fence a later attempt too: every attempt
        // before the last ended by its lease expiring, none by an outcome.
        assert!(
            row.attempt >= 2,
            "job {}: the crashed attempt counts",
            row.id
        );
        assert_eq!(row.errors.len() as i32, row.attempt - 1, "job {}", row.id);
        assert!(
            row.errors.iter().all(|e| e.class == "lease_expired"),
            "job {}: {:?}",
            row.id,
            row.errors
        );
        assert_eq!(row.errors[0].attempt, 1);
        let runs = chaos.timeline.executions(row.id);
        let last = runs.last().expect("every job ran");
        assert_eq!(
            last.attempt, row.attempt,
            "job {}: the last attempt ran",
            row.id
        );
        assert!(last.ended.is_some(), "job {}: and returned", row.id);
        match runs.first() {
            // The crash killed attempt 1 while its handler ran.
            Some(first) if first.attempt == 1 => {
                assert!(
                    first.killed_at.is_some(),
                    "job {}: the first execution was killed mid-run",
                    row.id
                );
                killed_mid_run += 1;
            }
            // The crash came while attempt 1 was claimed but not started (prefetched, or its
            // task not yet polled on a loaded machine): a crashed process never runs it.
            _ => {}
        }
    }
    assert!(
        killed_mid_run > 0,
        "no execution was running when the crash came: the test proves nothing"
    );
}

/// Runs 6 jobs of one attempt each, crashing each once at `point`; returns the rows.
async fn crash_last_attempts_at(point: FaultPoint) -> (Chaos, Vec<job::JobRow>) {
    use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
    let chaos = Chaos::new().await;
    let jobs = (0..6)
        .map(|_| {
            let options = EnqueueOptions {
                max_attempts: Some(1),
                ..EnqueueOptions::default()
            };
            NewJob::build(&Traced { ms: 1 }, options, DEFAULT_PAYLOAD_LIMIT).unwrap()
        })
        .collect();
    let ids = chaos.store.enqueue_many(jobs).await.unwrap();
    let faults = Faults::new();
    let faults = ids
        .iter()
        .fold(faults, |f, id| f.crash_at(point).job(*id).times(1));
    let worker = chaos
        .worker(chaos.store.clone())
        .faults(faults.clone())
        .build()
        .unwrap()
        .start();
    let rows = chaos.all_terminal(&ids).await;
    worker.shutdown().await;
    assert_eq!(
        faults.crashes().len(),
        6,
        "every job crashed once at {point}"
    );
    chaos.timeline.assert_never_concurrent();
    (chaos, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_claim_of_a_last_attempt_is_not_counted() {
    // The job never started (a killed worker's prefetched job): it runs, not a dead letter.
    let (chaos, rows) = crash_last_attempts_at(FaultPoint::AfterClaim).await;
    for row in &rows {
        assert_eq!(row.state, job::JobState::Completed, "job {}", row.id);
        assert_eq!((row.attempt, row.errors.len()), (1, 0), "job {}", row.id);
        assert_eq!(chaos.timeline.executions(row.id).len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_perform_of_a_last_attempt_makes_a_dead_letter() {
    // Its start was recorded: the attempt is spent, as one that ran.
    let (chaos, rows) = crash_last_attempts_at(FaultPoint::BeforePerform).await;
    for row in &rows {
        assert_eq!(row.state, job::JobState::Discarded, "job {}", row.id);
        assert_eq!(row.errors.len(), 1);
        assert_eq!(row.errors[0].class, "lease_expired");
        assert!(chaos.timeline.executions(row.id).is_empty());
    }
}
