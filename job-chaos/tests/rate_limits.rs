//! Rate limits under real crashes: `chaos.rated` jobs (`KEYS` rate keys of `PER_KEY` jobs each,
//! and `UNKEYED` jobs without a key, which share one window) are worked through by `job-chaos`
//! worker processes (`--rated`) that are SIGKILLed every few hundred milliseconds and
//! restarted, until every job is completed. Some jobs fail an attempt or two first, and a
//! killed worker's jobs are rescued once their lease expires and claimed again: every retry
//! and every re-claim is a new start, and must fit the limit as much as a first attempt.
//!
//! A trigger on `job.jobs` records, by the database's clock, every time a claim makes a
//! `chaos.rated` row `running` (`chaos.rated_starts`). Then:
//!
//! - No job lost: every enqueued job is completed, its effect committed once, by its final
//!   attempt (`chaos.effects`).
//! - Every claim recorded once: a job's recorded starts are exactly its attempts 1 to
//!   `attempt`, so the starts below are all of them.
//! - The limit holds: for each rate key (and the unkeyed jobs, as one more), no window of
//!   `LIMIT.per` holds more than `LIMIT.starts` starts: by time, each start is at least
//!   `LIMIT.per` after the one `LIMIT.starts` before it. `job.rate_windows` keeps no more than
//!   `LIMIT.starts` starts of a key either.
//! - Handlers run only after a counted start: every execution in the ledger
//!   (`chaos.executions`) has its attempt's start recorded before it.
//! - The run means something: kills made jobs start again after a rescue, and every key's
//!   window was full at least once (the limit held jobs back). A single kill takes a worker
//!   that holds a lease when the one drawn holds none (`Chaos::kill_busy`): a run lasts only
//!   a few kills, and one of 2026-12-05 killed only workers that held nothing yet.
//!
//! `LIMIT` restates `job_chaos::RATED_LIMIT` instead of reading it, so that a worker built
//! with a looser limit fails the test rather than loosening it. Workers are only killed,
//! never paused: a paused worker starts nothing, so pauses would only slow the run. Seeded like
//! `sigkill.rs`: `CHAOS_SEED=<n>` replays the jobs and the schedule of kills. The workers'
//! output, the job rows and the recorded starts (`rated_starts.txt`) are kept under
//! `target/tmp/rate_limits-*` when the test fails. A run takes 4 to 10 seconds: about 30
//! starts per key at 5 per 500 ms, and the lease expiries before a killed worker's jobs are
//! claimed again.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::{ledger_db, Audit, Chaos, Violations};
use job_chaos::{ChaosRated, ChaosWork};
use job_core::{Enqueue, Job, RateLimit};
use sqlx::PgPool;

/// The limit the workers must keep: `job_chaos::RATED_LIMIT`, restated.
const LIMIT: RateLimit = RateLimit::new(5, Duration::from_millis(500));
/// Rate keys in a run.
const KEYS: u32 = 3;
/// Jobs of each key.
const PER_KEY: u32 = 20;
/// Jobs without a key.
const UNKEYED: u32 = 20;

const CHAOS: Chaos = Chaos {
    name: "rate_limits",
    workers: 3,
    concurrency: 8,
    kill_every_ms: 200..=700,
    mass_kill_one_in: 20,
    pause_one_in: None,
    pause_ms: 0..=0,
    silence_one_in: None,
    deadline: Duration::from_secs(60),
    rated: true,
    kill_busy: true,
};

/// Records every claim of a `chaos.rated` row (the row becoming `running`), by the database's
/// clock, with the claim's transaction id.
///
/// A BEFORE trigger, so that each start is stamped as its row is written: before the claim
/// stamps the starts it appends to `job.rate_windows` (after its update, in the same
/// statement). An AFTER trigger fires only once the whole statement is done, one row after the
/// other, so its stamps trail the limiter's by the time that takes: milliseconds under the
/// chaos' load, enough to show 6 starts in 0.49 s where the limiter's own window held 5.
/// Stamped this way, a correct limiter keeps every window exactly: the claim that took start
/// `i + 5` of a key, under the kind's lock, saw start `i`'s limiter stamp at or before its
/// window's beginning (else the window would have held six), and start `i`'s row was stamped
/// here no later than that, while start `i + 5`'s row was written after the window was read.
fn starts_ddl() -> String {
    format!(
        "CREATE TABLE chaos.rated_starts (
             job_id   bigint      NOT NULL,
             attempt  integer     NOT NULL,
             rate_key text,
             worker   text,
             claim    bigint      NOT NULL,
             at       timestamptz NOT NULL
         );
         CREATE FUNCTION chaos.record_rated_start() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO chaos.rated_starts
             VALUES (NEW.id, NEW.attempt, NEW.rate_key, NEW.locked_by, txid_current(),
                     clock_timestamp());
             RETURN NEW;
         END $$;
         CREATE TRIGGER record_rated_start BEFORE UPDATE OF state ON job.jobs FOR EACH ROW
         WHEN (NEW.state = 'running' AND OLD.state <> 'running' AND NEW.kind = '{}')
         EXECUTE FUNCTION chaos.record_rated_start();",
        ChaosRated::KIND
    )
}

/// The jobs, fixed by the seed, in a random order (so that a key's ids are not adjacent):
/// most complete at their first attempt, some fail one or two first; each works 20 to 400 ms.
fn plan(rng: &mut fastrand::Rng) -> Vec<ChaosRated> {
    let keys = (0..KEYS).flat_map(|k| (0..PER_KEY).map(move |_| Some(k)));
    let mut jobs: Vec<ChaosRated> = keys
        .chain((0..UNKEYED).map(|_| None))
        .map(|key| ChaosRated {
            key,
            work: ChaosWork {
                n: 0,
                fail_first: match rng.u8(..100) {
                    0..=19 => 1,
                    20..=24 => 2,
                    _ => 0,
                },
                work_ms: rng.u64(20..=400),
                blocking: false,
            },
        })
        .collect();
    rng.shuffle(&mut jobs);
    for (n, job) in jobs.iter_mut().enumerate() {
        job.work.n = n as u32;
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_never_start_more_than_the_rate_limit_per_key() {
    let seed = common::seed();
    eprintln!(
        "rate_limits chaos: seed {seed} (replay with CHAOS_SEED={seed}), {KEYS} keys of \
         {PER_KEY} jobs and {UNKEYED} without a key, at most {} starts per {:?} each",
        LIMIT.starts, LIMIT.per
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    let db = ledger_db(seed).await;
    let pool = db.pool();
    sqlx::raw_sql(&starts_ddl())
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("[CHAOS_SEED={seed}] creating the starts' trigger: {e}"));
    let ids = Enqueue::<ChaosRated>::many(&pool, plan(&mut rng))
        .await
        .unwrap_or_else(|e| panic!("[CHAOS_SEED={seed}] enqueueing: {e}"));

    // No plan of `chaos.work`: the run lasts until the jobs enqueued above are all terminal.
    let run = CHAOS.run(seed, &db, &mut rng, &[]).await;
    let records = Rated::load(&pool).await;
    let mut violations = Violations::default();
    let stats = records.audit(&ids, &mut violations);

    let mut summary = format!(
        "rate_limits chaos: seed {seed}: {} jobs, {} starts in {:.1?}, {} kills ({} of all \
         workers at once), {} worker processes; {} starts after a rescue (a killed worker's \
         lease expired), {} after a planned failure",
        ids.len(),
        records.starts.len(),
        run.run_time,
        run.fleet.kills,
        run.fleet.mass_kills,
        run.fleet.incarnations.len(),
        stats.after_rescue,
        stats.after_failure,
    );
    for (key, group) in &stats.groups {
        let _ = write!(
            summary,
            "\n  {}: {} starts, over {:.2}s; the tightest {} consecutive starts spanned {}",
            key.as_deref().unwrap_or("(no key)"),
            group.starts,
            group.spread.as_seconds_f64(),
            LIMIT.starts + 1,
            group
                .tightest
                .map_or("-".to_owned(), |t| format!("{:.4}s", t.as_seconds_f64())),
        );
    }
    for line in &run.last_words {
        let _ = write!(summary, "\n  {line}");
    }
    if !violations.is_empty() {
        records.dump(&run.fleet.dir);
    }
    let audit = Audit {
        violations,
        ..Audit::default()
    };
    run.conclude(db, audit, summary).await;
}

/// A `chaos.rated` row, as much as the checks need.
struct Row {
    id: i64,
    state: String,
    attempt: i32,
    /// Its attempts rescued after their lease expired.
    rescued: i64,
    /// Its attempts that failed as planned.
    failed: i64,
}

/// One recorded start.
#[derive(Debug)]
struct Start {
    job_id: i64,
    attempt: i32,
    rate_key: Option<String>,
    worker: Option<String>,
    /// The claim's transaction id.
    claim: i64,
    at: DateTime<Utc>,
}

impl std::fmt::Display for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} job {} attempt {} key {} by {} (claim {})",
            self.at.format("%H:%M:%S%.6f"),
            self.job_id,
            self.attempt,
            self.rate_key.as_deref().unwrap_or("(none)"),
            self.worker.as_deref().unwrap_or("?"),
            self.claim
        )
    }
}

type StartTuple = (i64, i32, Option<String>, Option<String>, i64, DateTime<Utc>);

/// What the database holds after the run.
struct Rated {
    rows: Vec<Row>,
    /// By time.
    starts: Vec<Start>,
    /// Each execution's job, attempt and start, from the ledger.
    executions: Vec<(i64, i32, DateTime<Utc>)>,
    /// Each effect's job and attempt.
    effects: Vec<(i64, i32)>,
    /// The starts `job.rate_windows` keeps, per key (`''`: no key).
    windows: Vec<(String, i32)>,
}

/// Per rate key: its starts and how closely they followed each other.
struct Group {
    starts: usize,
    /// From its first start to its last.
    spread: TimeDelta,
    /// The shortest span of `LIMIT.starts + 1` consecutive starts, if it had that many.
    tightest: Option<TimeDelta>,
}

#[derive(Default)]
struct Stats {
    groups: BTreeMap<Option<String>, Group>,
    after_rescue: i64,
    after_failure: i64,
}

impl Rated {
    async fn load(pool: &PgPool) -> Rated {
        let rows = sqlx::query_as::<_, (i64, String, i32, i64, i64)>(
            "SELECT id, state::text, attempt,
                    (SELECT count(*) FROM jsonb_array_elements(errors) e
                     WHERE e->>'class' = 'lease_expired'),
                    (SELECT count(*) FROM jsonb_array_elements(errors) e
                     WHERE e->>'class' = 'error')
             FROM job.jobs WHERE kind = $1 ORDER BY id",
        )
        .bind(ChaosRated::KIND)
        .fetch_all(pool)
        .await
        .expect("loading the jobs")
        .into_iter()
        .map(|(id, state, attempt, rescued, failed)| Row {
            id,
            state,
            attempt,
            rescued,
            failed,
        })
        .collect();
        let starts = sqlx::query_as::<_, StartTuple>(
            "SELECT job_id, attempt, rate_key, worker, claim, at FROM chaos.rated_starts
             ORDER BY at, job_id",
        )
        .fetch_all(pool)
        .await
        .expect("loading the starts")
        .into_iter()
        .map(|(job_id, attempt, rate_key, worker, claim, at)| Start {
            job_id,
            attempt,
            rate_key,
            worker,
            claim,
            at,
        })
        .collect();
        let executions = sqlx::query_as("SELECT job_id, attempt, started_at FROM chaos.executions")
            .fetch_all(pool)
            .await
            .expect("loading the ledger");
        let effects = sqlx::query_as("SELECT job_id, attempt FROM chaos.effects")
            .fetch_all(pool)
            .await
            .expect("loading the effects");
        let windows = sqlx::query_as(
            "SELECT rate_key, cardinality(starts) FROM job.rate_windows WHERE kind = $1",
        )
        .bind(ChaosRated::KIND)
        .fetch_all(pool)
        .await
        .expect("loading the rate windows");
        Rated {
            rows,
            starts,
            executions,
            effects,
            windows,
        }
    }

    /// The checks of the module's documentation, added to `v`.
    fn audit(&self, ids: &[i64], v: &mut Violations) -> Stats {
        let mut stats = Stats::default();
        let per = TimeDelta::from_std(LIMIT.per).expect("a short period");
        let n = LIMIT.starts as usize;

        // No job lost, every claim recorded once, effects once.
        let enqueued: HashSet<i64> = ids.iter().copied().collect();
        let stored: HashSet<i64> = self.rows.iter().map(|r| r.id).collect();
        if enqueued != stored {
            v.push(
                "no job lost",
                format!(
                    "{} jobs enqueued but {} stored; missing {:?}, unexpected {:?}",
                    enqueued.len(),
                    stored.len(),
                    enqueued.difference(&stored).take(10).collect::<Vec<_>>(),
                    stored.difference(&enqueued).take(10).collect::<Vec<_>>()
                ),
            );
        }
        let mut attempts_of: HashMap<i64, Vec<i32>> = HashMap::new();
        for s in &self.starts {
            attempts_of.entry(s.job_id).or_default().push(s.attempt);
        }
        let mut effects_of: HashMap<i64, Vec<i32>> = HashMap::new();
        for &(job, attempt) in &self.effects {
            effects_of.entry(job).or_default().push(attempt);
        }
        for row in &self.rows {
            stats.after_rescue += row.rescued;
            stats.after_failure += row.failed;
            if row.state != "completed" {
                v.push(
                    "no job lost",
                    format!(
                        "job {}: {} after {} attempts, expected completed",
                        row.id, row.state, row.attempt
                    ),
                );
            }
            let mut recorded = attempts_of.remove(&row.id).unwrap_or_default();
            recorded.sort_unstable();
            if recorded != (1..=row.attempt).collect::<Vec<_>>() {
                v.push(
                    "every claim recorded once",
                    format!(
                        "job {}: {} attempts, but starts recorded for attempts {recorded:?}",
                        row.id, row.attempt
                    ),
                );
            }
            let effects = effects_of.remove(&row.id).unwrap_or_default();
            if row.state == "completed" && effects != [row.attempt] {
                v.push(
                    "effects once",
                    format!(
                        "job {}: completed by attempt {}, with effects of attempts {effects:?}",
                        row.id, row.attempt
                    ),
                );
            }
        }
        for (job, attempts) in attempts_of {
            v.push(
                "every claim recorded once",
                format!("job {job}: starts of attempts {attempts:?} but no row"),
            );
        }

        // Handlers run only after a counted start.
        let started: HashMap<(i64, i32), DateTime<Utc>> = self
            .starts
            .iter()
            .map(|s| ((s.job_id, s.attempt), s.at))
            .collect();
        for &(job, attempt, at) in &self.executions {
            match started.get(&(job, attempt)) {
                Some(start) if *start <= at => {}
                start => v.push(
                    "handlers run only after a counted start",
                    format!(
                        "job {job} attempt {attempt}: its handler started at {at}, its claim's \
                         start is {start:?}"
                    ),
                ),
            }
        }

        // The limit holds, per key.
        let mut by_key: BTreeMap<Option<String>, Vec<&Start>> = BTreeMap::new();
        for s in &self.starts {
            by_key.entry(s.rate_key.clone()).or_default().push(s);
        }
        for (key, starts) in &by_key {
            let name = key.as_deref().unwrap_or("(no key)");
            for w in starts.windows(n + 1) {
                let span = w[n].at - w[0].at;
                if span < per {
                    let list: Vec<String> = w.iter().map(ToString::to_string).collect();
                    v.push(
                        "rate limit per key",
                        format!(
                            "{name}: {} starts within {:.6}s, but at most {n} may start in any \
                             {:?}: {}",
                            n + 1,
                            span.as_seconds_f64(),
                            LIMIT.per,
                            list.join(", ")
                        ),
                    );
                }
            }
            let full = starts.windows(n).any(|w| w[n - 1].at - w[0].at < per);
            if !full {
                v.push(
                    "the limit held jobs back",
                    format!(
                        "{name}: never {n} starts within {:?}, so the run did not test the limit",
                        LIMIT.per
                    ),
                );
            }
            stats.groups.insert(
                key.clone(),
                Group {
                    starts: starts.len(),
                    spread: starts[starts.len() - 1].at - starts[0].at,
                    tightest: starts.windows(n + 1).map(|w| w[n].at - w[0].at).min(),
                },
            );
        }
        let expected_groups = KEYS as usize + usize::from(UNKEYED > 0);
        if by_key.len() != expected_groups {
            v.push(
                "rate limit per key",
                format!(
                    "starts of {} rate keys recorded, expected {expected_groups}: {:?}",
                    by_key.len(),
                    by_key.keys().collect::<Vec<_>>()
                ),
            );
        }
        for (key, kept) in &self.windows {
            if *kept > LIMIT.starts as i32 {
                v.push(
                    "rate limit per key",
                    format!(
                        "job.rate_windows keeps {kept} starts of key {key:?}, more than the \
                         limit's {}",
                        LIMIT.starts
                    ),
                );
            }
        }

        if stats.after_rescue == 0 {
            v.push(
                "kills reached the rated jobs",
                "no job was rescued from a killed worker and claimed again".to_owned(),
            );
        }
        stats
    }

    /// Writes the starts next to the workers' logs, for a failed run's post-mortem.
    fn dump(&self, dir: &std::path::Path) {
        let lines: Vec<String> = self.starts.iter().map(ToString::to_string).collect();
        let _ = std::fs::write(dir.join("rated_starts.txt"), lines.join("\n"));
    }
}
