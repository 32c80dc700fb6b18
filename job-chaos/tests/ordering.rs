//! Per-key ordering under real crashes: jobs with ordering keys (`KEYS` keys of `PER_KEY` jobs
//! each, enqueued in three batches: before the workers start, and twice while they run) are
//! worked through by `job-chaos` worker processes that are SIGKILLed every few hundred
//! milliseconds and restarted, until every job is terminal. Then, besides everything `common::audit` checks of each job (no job lost,
//! attempts counted, never twice at once, effects once), each key is audited against the
//! ledger (`chaos.executions`, see `src/ledger.sql`):
//!
//! - One at a time: every execution of a key's jobs, by start, started only after every
//!   earlier one of that key had ended: its last ledger write (its finish, or its abort when a
//!   lost lease or a fence dropped it), else the death of its worker. A key's execution cut
//!   short by a kill or a lost lease therefore must not overlap the next one of the key either.
//! - In enqueue order: a key's executions, by start, belong to its jobs in id order, and each
//!   job's first execution started after the key's previous job was finalized (completed or
//!   discarded: a retrying job keeps holding its key).
//! - Held back: after the first batch is enqueued, before any worker runs, exactly the first
//!   job of each key is available and the others are pending.
//! - Never stranded (checked by `common::Chaos::run` at every tick, in one snapshot): a key
//!   with pending jobs has a head, or is on the wake-up list for a stager to promote its next
//!   job; else nothing would run them until the key's next enqueue.
//!
//! Workers are only killed, never paused: a paused worker's handler runs on past its lease
//! when resumed (see `sigkill.rs`), which nothing can prevent and ordering cannot either.
//! Seeded like `sigkill.rs`: `CHAOS_SEED=<n>` replays the jobs and the schedule of kills. The
//! workers' output is kept under `target/tmp/ordering-*` when the test fails. A run takes 8 to
//! 25 seconds on two cores, most of it spent on the keys whose long jobs kills hit repeatedly.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::Violations;
use common::{audit, fate, ledger_db, After, Chaos, Execution, JobRow, Planned, Records, Run};
use job_chaos::ChaosWork;

/// Ordering keys in a run.
const KEYS: u32 = 20;
/// Jobs of each key.
const PER_KEY: u32 = 10;
/// The jobs of every key are enqueued in these batches: each one's first job (its place in
/// its key) and when it is enqueued. The first before any worker starts, so the admission is
/// checked exactly; the later ones while the keys are busy, or idle if they ran dry.
const BATCHES: [(u32, Duration); 5] = [
    (0, Duration::ZERO),
    (3, Duration::from_millis(1500)),
    (5, Duration::from_millis(3000)),
    (7, Duration::from_millis(4500)),
    (9, Duration::from_millis(6000)),
];

const CHAOS: Chaos = Chaos {
    name: "ordering",
    workers: 3,
    concurrency: 8,
    kill_every_ms: 200..=700,
    mass_kill_one_in: 20,
    pause_one_in: None,
    pause_ms: 0..=0,
    silence_one_in: None,
    deadline: Duration::from_secs(90),
    rated: false,
    kill_busy: false,
};

/// The ordering key of job `n` of the plan.
fn key_of(n: u32) -> String {
    format!("account:{}", n / PER_KEY)
}

/// The plan, fixed by the seed: per key, `PER_KEY` jobs of `common::fate`'s mix (some fail an
/// attempt or two first, holding their key while they retry; a few are discarded), mostly
/// short, some a good part of the lease, a few longer than it. Within a batch the keys'
/// jobs are interleaved at random, each key's in order, so that a key's ids are not adjacent.
fn plan(rng: &mut fastrand::Rng) -> Vec<Planned> {
    let mut plan = Vec::new();
    for (b, &(first, enqueue_after)) in BATCHES.iter().enumerate() {
        let end = BATCHES.get(b + 1).map_or(PER_KEY, |next| next.0);
        let mut next: Vec<u32> = vec![first; KEYS as usize];
        loop {
            let open: Vec<usize> = (0..KEYS as usize).filter(|&k| next[k] < end).collect();
            if open.is_empty() {
                break;
            }
            let key = open[rng.usize(..open.len())];
            let n = key as u32 * PER_KEY + next[key];
            next[key] += 1;
            let (fail_first, max_attempts) = fate(rng);
            let work_ms = match rng.u8(..100) {
                0..=2 => rng.u64(1000..=1150),
                3..=22 => rng.u64(100..=400),
                _ => rng.u64(5..=60),
            };
            let work = ChaosWork {
                n,
                fail_first,
                work_ms,
                blocking: rng.u8(..10) == 0,
            };
            plan.push(Planned {
                work,
                max_attempts,
                due_in: Duration::ZERO,
                ordering_key: Some(key_of(n)),
                enqueue_after,
                after: After::Nothing,
            });
        }
    }
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_keep_each_key_one_at_a_time_in_enqueue_order() {
    let seed = common::seed();
    eprintln!(
        "ordering chaos: seed {seed} (replay with CHAOS_SEED={seed}), {KEYS} keys of {PER_KEY} \
         jobs"
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = ledger_db(seed).await;
    let plan = plan(&mut rng);

    let run = CHAOS.run(seed, &db, &mut rng, &plan).await;
    let records = run.records(&db.pool()).await;
    let mut audit = audit(&run, &plan, &records);
    let keys = audit_keys(&run, &records, &mut audit.violations);
    let mut summary = run.summary(&records, &audit);
    let _ = write!(
        summary,
        "\n  keys: {KEYS} of {PER_KEY} jobs; before the workers: {:?}; {} executions ended by \
         their worker's death and {} aborted (lease lost or fenced); {} of {} hand-overs to the \
         key's next job on another worker, {} right after a killed execution; shortest gap \
         between two executions of a key {:?}",
        run.before_workers,
        keys.killed,
        keys.aborted,
        keys.handovers_across_workers,
        keys.handovers,
        keys.handovers_after_kill,
        keys.shortest_gap,
    );
    run.conclude(db, audit, summary).await;
}

/// What the per-key audit counted.
#[derive(Default)]
struct KeyStats {
    /// Executions ended by the death of their worker (no finish, no abort).
    killed: usize,
    /// Executions dropped unfinished by their live worker.
    aborted: usize,
    /// Pairs of a key's consecutive jobs.
    handovers: usize,
    /// ... whose later job first ran on another worker than the earlier one last ran on.
    handovers_across_workers: usize,
    /// ... whose earlier job's last execution was ended by its worker's death.
    handovers_after_kill: usize,
    /// The least time between the end of an execution and the start of the key's next one.
    shortest_gap: Option<TimeDelta>,
}

/// The checks of the module's documentation, per key, added to `v`.
fn audit_keys(run: &Run, records: &Records, v: &mut Violations) -> KeyStats {
    let mut stats = KeyStats::default();
    let killed_at: HashMap<&str, Option<DateTime<Utc>>> = run
        .fleet
        .incarnations
        .iter()
        .map(|i| (i.id.as_str(), i.killed_at))
        .collect();
    let end = |e: &Execution| e.end(killed_at.get(e.worker.as_str()).copied().flatten());

    let first_batch = i64::from(KEYS * (BATCHES[1].0 - BATCHES[0].0));
    let held = |state: &str| run.before_workers.get(state).copied().unwrap_or(0);
    if held("available") != i64::from(KEYS) || held("pending") != first_batch - i64::from(KEYS) {
        v.push(
            "held back",
            format!(
                "after the first {first_batch} jobs were enqueued, {:?} per state, expected \
                 {KEYS} available (one per key) and the rest pending",
                run.before_workers
            ),
        );
    }

    let by_n: HashMap<u32, &JobRow> = records.rows.iter().map(|r| (r.payload.n, r)).collect();
    let mut executions_of: HashMap<i64, Vec<&Execution>> = HashMap::new();
    for e in &records.executions {
        executions_of.entry(e.job_id).or_default().push(e);
    }
    for k in 0..KEYS {
        let key = key_of(k * PER_KEY);
        // The key's jobs in their planned order (missing ones are `common::audit`'s).
        let jobs: Vec<&JobRow> = (k * PER_KEY..(k + 1) * PER_KEY)
            .filter_map(|n| by_n.get(&n).copied())
            .collect();
        if !jobs.windows(2).all(|w| w[0].id < w[1].id) {
            v.push(
                "enqueued in order",
                format!(
                    "{key}: its jobs' ids {:?} do not ascend in its order",
                    jobs.iter().map(|j| j.id).collect::<Vec<_>>()
                ),
            );
            continue;
        }
        let place: HashMap<i64, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
        let mut execs: Vec<&Execution> = jobs
            .iter()
            .flat_map(|j| executions_of.get(&j.id).into_iter().flatten().copied())
            .collect();
        execs.sort_by_key(|e| (e.started_at, e.id));
        let describe = |e: &Execution| {
            format!(
                "job {} (#{} of {key}) attempt {} on {} (execution {})",
                e.job_id, place[&e.job_id], e.attempt, e.worker, e.id
            )
        };

        // One at a time, and in enqueue order.
        for (j, later) in execs.iter().enumerate() {
            for earlier in &execs[..j] {
                match end(earlier) {
                    None => v.push(
                        "one at a time per key",
                        format!(
                            "{} never ended (no finish, no abort, its worker was not killed)",
                            describe(earlier)
                        ),
                    ),
                    Some(ended) if ended >= later.started_at => v.push(
                        "one at a time per key",
                        format!(
                            "{} started at {} while {} ran until {ended}",
                            describe(later),
                            later.started_at,
                            describe(earlier)
                        ),
                    ),
                    Some(_) => {}
                }
            }
            if let Some(previous) = j.checked_sub(1).map(|p| execs[p]) {
                if place[&previous.job_id] > place[&later.job_id] {
                    v.push(
                        "in enqueue order",
                        format!(
                            "{} started at {}, after {} started at {}",
                            describe(later),
                            later.started_at,
                            describe(previous),
                            previous.started_at
                        ),
                    );
                }
                if let Some(ended) = end(previous) {
                    let gap = later.started_at - ended;
                    stats.shortest_gap = Some(stats.shortest_gap.map_or(gap, |g| g.min(gap)));
                }
            }
        }
        for e in &execs {
            match (e.finished_at, e.aborted_at) {
                (None, None) => stats.killed += 1,
                (None, Some(_)) => stats.aborted += 1,
                _ => {}
            }
        }

        // Each job's first start after its predecessor was finalized.
        for pair in jobs.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            let earlier_execs = executions_of.get(&earlier.id);
            let last = earlier_execs.and_then(|es| es.iter().max_by_key(|e| (e.started_at, e.id)));
            let Some(first) = executions_of
                .get(&later.id)
                .and_then(|es| es.iter().min_by_key(|e| (e.started_at, e.id)))
            else {
                continue; // never ran: `common::audit` says whether it should have
            };
            stats.handovers += 1;
            if let Some(last) = last {
                if last.worker != first.worker {
                    stats.handovers_across_workers += 1;
                }
                if last.finished_at.is_none() && last.aborted_at.is_none() {
                    stats.handovers_after_kill += 1;
                }
            }
            match earlier.finalized_at {
                Some(done) if done < first.started_at => {}
                done => v.push(
                    "in enqueue order",
                    format!(
                        "{} started at {} but job {} before it in {key} ({}) was finalized at \
                         {done:?}",
                        describe(first),
                        first.started_at,
                        earlier.id,
                        earlier.state
                    ),
                ),
            }
        }
    }
    stats
}
