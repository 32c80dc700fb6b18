//! Batches and dependencies under real crashes: `BATCHES` batches of 5 to 15 members, each
//! with a callback (`job_core::Batch`: members and callback in one transaction), and a few
//! `Enqueue::depends_on` chains `a -> b -> c`, enqueued in three waves (before the workers
//! start, and twice while they run) and worked through by `job-chaos` worker processes that
//! are SIGKILLed every few hundred milliseconds and restarted, until every job is terminal.
//! The members are `common::fate`'s mix (some fail an attempt or two first, a few fail every
//! attempt and end discarded), mostly short, some a good part of the lease, a few longer than
//! it; one in five has an ordering key shared across batches. Callbacks are `chaos.work` jobs
//! like the members, so the ledger (`chaos.executions`, see `src/ledger.sql`) records their
//! executions and each commits its effect with its completion; some fail their first
//! attempt, some are scheduled for later, a few outlast the lease. Two chains start with a
//! job that is discarded, one with a job that completes.
//!
//! Besides everything `common::audit` checks of each job (no job lost: every member
//! finalized as its payload dictates; attempts counted; never twice at once; effects once:
//! so a callback completes once, with one effect, although an attempt killed after its work
//! may have run it before; and the chains' `b` and `c` discarded with class `dependency`
//! naming their predecessor, never run), it checks:
//!
//! - Runs after what it waits for: every execution of a callback started after every member
//!   of its batch was finalized (its `finalized_at`), and every execution of a dependent after
//!   the job it depends on was; and a dependency discard's own `finalized_at` is not before
//!   its dependency's.
//! - Callbacks complete once: every callback completed, with exactly one effect.
//! - Dependencies listed: `PgStore::dependencies` gives a callback its members' ids and a
//!   dependent the id of the job it depends on.
//! - Held back: after the first wave is enqueued, before any worker runs, its callbacks and
//!   dependents are pending (and the ordering keys' later members), the rest available.
//! - Never stranded (checked by `common::Chaos::run` at every tick, in one snapshot): no
//!   dependent is pending without an unresolved edge, which no stager would ever look at
//!   again; and every callback and dependent reaches its end by the deadline, once the jobs it
//!   waits for have ended.
//!
//! Workers are only killed, never paused (see `ordering.rs`). Seeded like `sigkill.rs`:
//! `CHAOS_SEED=<n>` replays the jobs and the schedule of kills. The workers' output is kept
//! under `target/tmp/batches-*` when the test fails. A run takes 5 to 25 seconds on two
//! cores.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::{audit, fate, ledger_db, After, Chaos, End, JobRow, Planned, Records, Run};
use common::{Execution, Violations};
use job_chaos::{ChaosWork, MAX_ATTEMPTS};
use job_postgres::PgStore;

/// Batches in a run.
const BATCHES: u32 = 10;
/// Members of a batch, at random.
const MEMBERS: std::ops::RangeInclusive<u32> = 5..=15;
/// When each wave is enqueued: the first before any worker starts, so the holding back is
/// checked exactly; the later ones while the workers are busy.
const WAVES: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(1500),
    Duration::from_millis(3000),
];
/// Ordering keys some members share, across batches and waves.
const KEYS: u32 = 4;

const CHAOS: Chaos = Chaos {
    name: "batches",
    workers: 3,
    concurrency: 8,
    kill_every_ms: 200..=700,
    mass_kill_one_in: 8,
    pause_one_in: None,
    pause_ms: 0..=0,
    silence_one_in: None,
    deadline: Duration::from_secs(60),
    rated: false,
    kill_busy: false,
};

/// A member's or a chain link's work (numbered by [`add`]): mostly short, some a good part of the lease, a few
/// longer than it (only heartbeats keep them, and kills hit them most).
fn work(rng: &mut fastrand::Rng, fail_first: i32) -> ChaosWork {
    let work_ms = match rng.u8(..100) {
        0..=2 => rng.u64(1000..=1150),
        3..=22 => rng.u64(100..=400),
        _ => rng.u64(5..=60),
    };
    ChaosWork {
        n: 0,
        fail_first,
        work_ms,
        blocking: rng.u8(..10) == 0,
    }
}

/// Adds `work` (numbered next) to `plan`, in wave `wave`, due at once and without a key, and
/// returns it.
fn add(
    plan: &mut Vec<Planned>,
    wave: usize,
    work: ChaosWork,
    max_attempts: i32,
    after: After,
) -> &mut Planned {
    let n = plan.len() as u32;
    plan.push(Planned {
        work: ChaosWork { n, ..work },
        max_attempts,
        due_in: Duration::ZERO,
        ordering_key: None,
        enqueue_after: WAVES[wave],
        after,
    });
    plan.last_mut().expect("just pushed")
}

/// The plan, fixed by the seed, wave by wave: the wave's part of the chains, then its
/// batches (members, then the callback). Chain 0 is wholly in the first wave, chain 1 in the
/// second, both starting with a job that fails its only two attempts; chain 2 completes, one
/// link per wave.
fn plan(rng: &mut fastrand::Rng) -> Vec<Planned> {
    let mut plan: Vec<Planned> = Vec::new();
    let mut chain_2 = None;
    for wave in 0..WAVES.len() {
        if wave < 2 {
            let doomed = ChaosWork {
                n: 0,
                fail_first: 2,
                work_ms: rng.u64(5..=30),
                blocking: false,
            };
            let a = add(&mut plan, wave, doomed, 2, After::Nothing).work.n;
            let b = work(rng, 0);
            let b = add(&mut plan, wave, b, MAX_ATTEMPTS, After::DependsOn(a))
                .work
                .n;
            let c = work(rng, 0);
            add(&mut plan, wave, c, MAX_ATTEMPTS, After::DependsOn(b));
        }
        let fail_first = rng.i32(0..=1);
        let link = work(rng, fail_first);
        let after = chain_2.map_or(After::Nothing, After::DependsOn);
        chain_2 = Some(add(&mut plan, wave, link, MAX_ATTEMPTS, after).work.n);

        let per_wave = BATCHES as usize;
        let batches = per_wave * wave / WAVES.len()..per_wave * (wave + 1) / WAVES.len();
        for b in batches.map(|b| b as u32) {
            for _ in 0..rng.u32(MEMBERS) {
                let (fail_first, max_attempts) = fate(rng);
                let member = work(rng, fail_first);
                let member = add(&mut plan, wave, member, max_attempts, After::Member(b));
                if rng.u8(..5) == 0 {
                    member.ordering_key = Some(format!("account:{}", rng.u32(..KEYS)));
                }
            }
            // Some callbacks fail their first attempt, a few outlast the lease, some are
            // scheduled for later than their members may take.
            let callback = ChaosWork {
                n: 0,
                fail_first: i32::from(rng.u8(..4) == 0),
                work_ms: match rng.u8(..10) {
                    0 => rng.u64(1000..=1150),
                    1..=2 => rng.u64(100..=400),
                    _ => rng.u64(5..=60),
                },
                blocking: false,
            };
            let callback = add(&mut plan, wave, callback, MAX_ATTEMPTS, After::Callback(b));
            if rng.u8(..5) == 0 {
                callback.due_in = Duration::from_millis(rng.u64(500..=2500));
            }
        }
    }
    plan
}

/// What each job that waits waits for, by the plan's numbers: a callback its batch's members,
/// a dependent the job it depends on.
fn waits(plan: &[Planned]) -> HashMap<u32, Vec<u32>> {
    let mut waits: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in plan {
        match p.after {
            After::Nothing | After::Member(_) => {}
            After::DependsOn(on) => {
                waits.insert(p.work.n, vec![on]);
            }
            After::Callback(b) => {
                let members = plan.iter().filter(|m| m.after == After::Member(b));
                waits.insert(p.work.n, members.map(|m| m.work.n).collect());
            }
        }
    }
    waits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_run_each_callback_once_after_all_its_members() {
    let seed = common::seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = ledger_db(seed).await;
    let plan = plan(&mut rng);
    eprintln!(
        "batches chaos: seed {seed} (replay with CHAOS_SEED={seed}), {BATCHES} batches, {} jobs",
        plan.len()
    );
    let waits = waits(&plan);

    let run = CHAOS.run(seed, &db, &mut rng, &plan).await;
    let records = run.records(&db.pool()).await;
    let listed = listed_dependencies(&db.store(), &waits, &records).await;
    let mut audit = audit(&run, &plan, &records);
    let stats = audit_waits(
        &run,
        &plan,
        &waits,
        &listed,
        &records,
        &mut audit.violations,
    );
    let mut summary = run.summary(&records, &audit);
    let _ = write!(
        summary,
        "\n  batches: {BATCHES} of {} members; before the workers: {:?}; {} callback \
         executions for {} callbacks ({} run more than once, {} after a discarded member); \
         from the last member finalized \
         to the callback's first start: {} to {} ms; longest a dependent was seen ready but \
         pending: {:?}; dependency discards stamped before their dependency's finalize: \
         {:?}",
        plan.iter()
            .filter(|p| matches!(p.after, After::Member(_)))
            .count(),
        run.before_workers,
        stats.callback_executions,
        stats.callbacks,
        stats.callbacks_rerun,
        stats.after_discarded,
        stats.shortest_wait.map_or(-1, |w| w.num_milliseconds()),
        stats.longest_wait.map_or(-1, |w| w.num_milliseconds()),
        run.longest_ready,
        stats.discards_stamped_early,
    );
    run.conclude(db, audit, summary).await;
}

/// `PgStore::dependencies` of every job that waits, by its id.
async fn listed_dependencies(
    store: &PgStore,
    waits: &HashMap<u32, Vec<u32>>,
    records: &Records,
) -> HashMap<i64, Vec<i64>> {
    let mut listed = HashMap::new();
    for row in records
        .rows
        .iter()
        .filter(|r| waits.contains_key(&r.payload.n))
    {
        let ids = store
            .dependencies(row.id)
            .await
            .unwrap_or_else(|e| panic!("listing the dependencies of job {}: {e}", row.id));
        listed.insert(row.id, ids);
    }
    listed
}

/// What the audit of the waiting jobs counted.
#[derive(Default)]
struct WaitStats {
    callbacks: usize,
    callback_executions: usize,
    /// Callbacks executed more than once (a killed attempt, or one that failed by design).
    callbacks_rerun: usize,
    /// Callbacks of batches with a discarded member (which they wait for all the same).
    after_discarded: usize,
    /// From the last member of a batch finalized to its callback's first start.
    shortest_wait: Option<TimeDelta>,
    longest_wait: Option<TimeDelta>,
    /// Dependency discards whose `finalized_at` precedes their dependency's.
    discards_stamped_early: Vec<String>,
}

/// The checks of the module's documentation, added to `v`.
fn audit_waits(
    run: &Run,
    plan: &[Planned],
    waits: &HashMap<u32, Vec<u32>>,
    listed: &HashMap<i64, Vec<i64>>,
    records: &Records,
    v: &mut Violations,
) -> WaitStats {
    let mut stats = WaitStats::default();
    let by_n: HashMap<u32, &JobRow> = records.rows.iter().map(|r| (r.payload.n, r)).collect();
    let planned: HashMap<u32, &Planned> = plan.iter().map(|p| (p.work.n, p)).collect();
    let mut executions_of: HashMap<i64, Vec<&Execution>> = HashMap::new();
    for e in &records.executions {
        executions_of.entry(e.job_id).or_default().push(e);
    }
    let mut effects_of: HashMap<i64, usize> = HashMap::new();
    for e in &records.effects {
        *effects_of.entry(e.job_id).or_default() += 1;
    }

    held_back(run, plan, v);

    let mut waiting: Vec<(&u32, &Vec<u32>)> = waits.iter().collect();
    waiting.sort();
    for (n, on) in waiting {
        // Missing rows are `common::audit`'s.
        let Some(row) = by_n.get(n) else { continue };
        let id = row.id;
        let what = match planned[n].after {
            After::Callback(b) => format!("callback {id} of batch {b}"),
            _ => format!("dependent {id}"),
        };
        let on: Vec<&JobRow> = on.iter().filter_map(|m| by_n.get(m).copied()).collect();
        let mut expected: Vec<i64> = on.iter().map(|r| r.id).collect();
        expected.sort_unstable();
        if listed.get(&id) != Some(&expected) {
            v.push(
                "dependencies listed",
                format!(
                    "{what}: PgStore::dependencies gives {:?}, expected {expected:?}",
                    listed.get(&id)
                ),
            );
        }

        // Every job waited for finalized, and the latest of those moments.
        let mut finalized: Option<DateTime<Utc>> = None;
        for r in &on {
            match r.finalized_at {
                Some(at) => finalized = Some(finalized.map_or(at, |f| f.max(at))),
                None => v.push(
                    "runs after what it waits for",
                    format!(
                        "{what}: job {} it waits for is {}, never finalized",
                        r.id, r.state
                    ),
                ),
            }
        }
        let Some(finalized) = finalized else { continue };
        let mut execs = executions_of.get(&id).cloned().unwrap_or_default();
        execs.sort_by_key(|e| (e.started_at, e.id));
        for e in &execs {
            if e.started_at <= finalized {
                v.push(
                    "runs after what it waits for",
                    format!(
                        "{what}: attempt {} on {} started at {}, before the last job it waits \
                         for ({:?}) was finalized at {finalized}",
                        e.attempt,
                        e.worker,
                        e.started_at,
                        on.iter().map(|r| (r.id, &r.state)).collect::<Vec<_>>()
                    ),
                );
            }
        }
        // The stager stamps a dependency discard with `clock_timestamp()`, read after it saw
        // the dependency finalized: never before it (it once used `now()`, the start of its
        // statement, which a finalize committed while the statement ran could follow).
        if let End::Dependency(_) = planned[n].end(&planned) {
            if row.finalized_at.is_some_and(|at| at < finalized) {
                let early = format!(
                    "{what} discarded at {:?}, its dependency finalized at {finalized}",
                    row.finalized_at
                );
                v.push("discarded after what it waits for", early.clone());
                stats.discards_stamped_early.push(early);
            }
        }

        if let After::Callback(_) = planned[n].after {
            stats.callbacks += 1;
            stats.callback_executions += execs.len();
            if execs.len() > 1 {
                stats.callbacks_rerun += 1;
            }
            if on.iter().any(|r| r.state == "discarded") {
                stats.after_discarded += 1;
            }
            if let Some(first) = execs.first() {
                let wait = first.started_at - finalized;
                stats.shortest_wait = Some(stats.shortest_wait.map_or(wait, |s| s.min(wait)));
                stats.longest_wait = Some(stats.longest_wait.map_or(wait, |l| l.max(wait)));
            }
            let effects = effects_of.get(&id).copied().unwrap_or(0);
            if row.state != "completed" || effects != 1 {
                v.push(
                    "callbacks complete once",
                    format!(
                        "{what}: {} after {} attempts, with {effects} effects",
                        row.state, row.attempt
                    ),
                );
            }
        }
    }
    stats
}

/// After the first wave, before any worker ran: its callbacks and dependents pending, and
/// every job of an ordering key but the key's first; the rest available.
fn held_back(run: &Run, plan: &[Planned], v: &mut Violations) {
    let first: Vec<&Planned> = plan.iter().filter(|p| p.enqueue_after.is_zero()).collect();
    let mut keyed: HashMap<&str, i64> = HashMap::new();
    let mut waiting = 0;
    for p in &first {
        match (&p.after, &p.ordering_key) {
            (After::Callback(_) | After::DependsOn(_), _) => waiting += 1,
            (_, Some(key)) => *keyed.entry(key).or_default() += 1,
            (_, None) => {}
        }
    }
    let pending = waiting + keyed.values().map(|n| n - 1).sum::<i64>();
    let available = first.len() as i64 - pending;
    let held = |state: &str| run.before_workers.get(state).copied().unwrap_or(0);
    if held("pending") != pending || held("available") != available {
        v.push(
            "held back",
            format!(
                "after the first {} jobs were enqueued, {:?} per state, expected {pending} \
                 pending ({waiting} callbacks and dependents, the rest behind their ordering \
                 key's first job) and {available} available",
                first.len(),
                run.before_workers
            ),
        );
    }
}
