//! The real-process chaos test: worker processes (the `job-chaos` binary) are SIGKILLed at
//! random moments while they work through thousands of jobs, and restarted, or paused with
//! SIGSTOP for longer than a lease and resumed, until every job is terminal. Some jobs block
//! their runtime's threads instead of awaiting. Then the database is audited against the
//! ledger the handlers wrote (`chaos.executions`, see `src/ledger.sql`) and the effects they
//! committed with their completions (`chaos.effects`).
//!
//! Seeded: the seed is printed at the start and in every failure; `CHAOS_SEED=<n>` replays
//! the same jobs and the same schedule of kills (the timing of the machine still varies).
//! `CHAOS_JOBS=<n>` runs more (or fewer) jobs than the default 2,000. The workers' output is
//! kept under `target/tmp/sigkill-*` when the test fails. A run takes 10 to 40 seconds: jobs
//! arrive over 10, and the long ones, which kills hit most, need several attempts.
//!
//! What is checked, and why it holds under at-least-once delivery, is on `common::audit`; the
//! fleet of workers and the chaos loop are in `common` too, shared with `ordering.rs`.

mod common;

use std::time::Duration;

use common::{audit, ledger_db, mixed_plan, Chaos};

/// Jobs in a run unless `CHAOS_JOBS` says otherwise.
const DEFAULT_JOBS: usize = 2000;
/// Jobs become due over this long.
const SPREAD: Duration = Duration::from_secs(10);

const CHAOS: Chaos = Chaos {
    name: "sigkill",
    workers: 3,
    concurrency: 8,
    kill_every_ms: 100..=700,
    mass_kill_one_in: 20,
    // One chaos action in four pauses a worker for more than a lease, so that its leases
    // expire and other workers take its jobs over while it cannot run.
    pause_one_in: Some(4),
    pause_ms: 1500..=2500,
    silence_one_in: None,
    deadline: Duration::from_secs(120),
    rated: false,
    kill_busy: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_job_and_never_run_one_twice_at_once() {
    let seed = common::seed();
    let jobs: usize = std::env::var("CHAOS_JOBS")
        .ok()
        .map(|s| s.parse().expect("CHAOS_JOBS must be a number"))
        .unwrap_or(DEFAULT_JOBS);
    eprintln!("sigkill chaos: seed {seed} (replay with CHAOS_SEED={seed}), {jobs} jobs");
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = ledger_db(seed).await;

    let plan = mixed_plan(&mut rng, jobs, SPREAD, true);

    let run = CHAOS.run(seed, &db, &mut rng, &plan).await;
    let records = run.records(&db.pool()).await;
    let audit = audit(&run, &plan, &records);
    let summary = run.summary(&records, &audit);
    run.conclude(db, audit, summary).await;
}
