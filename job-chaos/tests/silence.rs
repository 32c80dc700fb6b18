//! The real-process chaos test of connections that go silent: each worker process (the
//! `job-chaos` binary) connects through a proxy of its own, and at random moments every
//! connection a worker holds stops carrying bytes for good, without a reset (a database host
//! or a network flow gone: no error ever comes); its new connections pass. No worker is
//! killed or restarted: each must recover by itself. Then the database is audited against the ledger the handlers
//! wrote, as in `sigkill.rs`: no job lost, none finalized twice, no two executions of one job
//! at once, every effect once.
//!
//! A silenced worker gives up the calls it had in flight after `store_timeout` (2 s here) and
//! its connections' checks after `POOL_CHECK_TIMEOUT`, and goes on with new connections; its
//! lease keeper, which cannot renew for that long, fences its executions (leases of 1 s) and
//! other workers take the jobs over. A handler cut off inside its own transaction (the
//! effect and `complete_in`) leaves that transaction open at the server, holding the job's
//! row, until the server finds the client unreachable (its TCP keepalive, set by
//! `pool_options()`; the proxy plays it after 5 s); the job is rescued then. Without that
//! verdict such a job stayed `running` for good. No job blocks its thread here: code that does not stop
//! when fenced, cut off from the database for longer than its lease, is the case the README
//! leaves open ("What is guaranteed"); `sigkill.rs` runs such jobs under pauses.
//!
//! Seeded like `sigkill.rs` (`CHAOS_SEED`, `CHAOS_JOBS`, default 1,000).

mod common;

use std::time::Duration;

use common::{audit, ledger_db, mixed_plan, Chaos};

/// Jobs in a run unless `CHAOS_JOBS` says otherwise.
const DEFAULT_JOBS: usize = 1000;
/// Jobs become due over this long.
const SPREAD: Duration = Duration::from_secs(8);

const CHAOS: Chaos = Chaos {
    name: "silence",
    workers: 3,
    concurrency: 8,
    // Between two silences of one worker, time to give up its calls and go on.
    kill_every_ms: 1500..=4000,
    mass_kill_one_in: 50,
    pause_one_in: None,
    pause_ms: 0..=0,
    // Every chaos action silences a worker's connections: no kill restarts a worker, so each
    // must recover by itself (a call it had in flight is given up after `store_timeout`).
    silence_one_in: Some(1),
    deadline: Duration::from_secs(150),
    rated: false,
    kill_busy: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silenced_connections_lose_no_job_and_never_run_one_twice_at_once() {
    let seed = common::seed();
    let jobs: usize = std::env::var("CHAOS_JOBS")
        .ok()
        .map(|s| s.parse().expect("CHAOS_JOBS must be a number"))
        .unwrap_or(DEFAULT_JOBS);
    eprintln!("silence chaos: seed {seed} (replay with CHAOS_SEED={seed}), {jobs} jobs");
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = ledger_db(seed).await;
    let plan = mixed_plan(&mut rng, jobs, SPREAD, false);
    let run = CHAOS.run(seed, &db, &mut rng, &plan).await;
    assert!(
        run.fleet.silences > 0,
        "[CHAOS_SEED={seed}] no connection was silenced"
    );
    let records = run.records(&db.pool()).await;
    let audit = audit(&run, &plan, &records);
    let summary = run.summary(&records, &audit);
    run.conclude(db, audit, summary).await;
}
