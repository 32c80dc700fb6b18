//! Deterministic crash faults at the runtime's named points.
//!
//! A crash behaves like a killed process for that one job: its execution stops where it is,
//! nothing more is written for it (no finalize, no heartbeat, no release), and its lease runs
//! out in the database until the rescuer puts it back to work.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job_core::{AttemptInfo, Fault, FaultInjector, FaultPoint, Job, JobId, Rescuer, RescuerConfig};

use crate::backend::TestStore;

/// Where in an execution a crash goes, with [`Faults::crash_before`] / [`Faults::crash_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Point {
    /// The claim (only `crash_after`: the job is claimed and nothing else happened). On a
    /// job's last attempt such a crash is not counted, as a killed worker's prefetched job is
    /// not: the job never started, so the rescuer retries it rather than discarding it (a rule
    /// without [`Faults::times`] then crashes it for ever). `crash_before(Point::Perform)`,
    /// after the attempt's start is recorded, is counted.
    Claim,
    /// The handler (`crash_before`: claimed, decoded, not run; `crash_after`: its side effects
    /// are done, its outcome is not written).
    Perform,
    /// The outcome's write (`crash_before`: classified, not written; `crash_after`: written,
    /// by the worker or by the handler's own transaction with `complete_in`). A crash after it
    /// comes after the job's row shows the outcome: [`wait_for`](crate::wait_for) may return
    /// before it has happened, so assert it once `worker.shutdown().await` has returned.
    Finalize,
    /// The heartbeat that would renew the lease (either word: the execution dies there).
    Heartbeat,
    /// A durable step (`crash_before`: its closure has not run; `crash_after`: its closure
    /// ran and its output is recorded). Narrow it to one step with [`Faults::step`]. Steps
    /// already recorded are skipped and never crash.
    Step,
}

impl Point {
    #[track_caller]
    fn before(self) -> FaultPoint {
        match self {
            Point::Claim => panic!(
                "there is no job before a claim: use crash_after(Point::Claim) or crash_before(Point::Perform)"
            ),
            Point::Perform => FaultPoint::BeforePerform,
            Point::Finalize => FaultPoint::BeforeFinalize,
            Point::Heartbeat => FaultPoint::Heartbeat,
            Point::Step => FaultPoint::BeforeStep,
        }
    }

    fn after(self) -> FaultPoint {
        match self {
            Point::Claim => FaultPoint::AfterClaim,
            Point::Perform => FaultPoint::AfterPerform,
            Point::Finalize => FaultPoint::AfterFinalize,
            Point::Heartbeat => FaultPoint::Heartbeat,
            Point::Step => FaultPoint::AfterStep,
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    point: FaultPoint,
    kind: Option<String>,
    job: Option<JobId>,
    attempt: Option<i32>,
    step: Option<String>,
    remaining: Option<u32>,
    fired: u32,
}

impl Rule {
    /// `step` is the step's name at step points, `None` elsewhere.
    fn matches(&self, point: FaultPoint, step: Option<&str>, job: &AttemptInfo) -> bool {
        self.point == point
            && self.remaining != Some(0)
            && self.step.as_deref().is_none_or(|s| Some(s) == step)
            && self.kind.as_deref().is_none_or(|k| k == job.kind)
            && self.job.is_none_or(|id| id == job.id)
            && self.attempt.is_none_or(|a| a == job.attempt)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash at {}", self.point)?;
        if let Some(kind) = &self.kind {
            write!(f, ", kind `{kind}`")?;
        }
        if let Some(step) = &self.step {
            write!(f, ", step `{step}`")?;
        }
        if let Some(job) = self.job {
            write!(f, ", job {job}")?;
        }
        if let Some(attempt) = self.attempt {
            write!(f, ", attempt {attempt}")?;
        }
        Ok(())
    }
}

/// A crash that happened, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// Where.
    pub point: FaultPoint,
    /// Which job.
    pub job: JobId,
    /// Which attempt.
    pub attempt: i32,
    /// Which step, at a step point.
    pub step: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<Rule>,
    crashes: Vec<Crash>,
    /// The kinds and the steps the injector was asked about, in the order first seen: what
    /// [`Faults::assert_fired`] names next to a rule that never fired.
    kinds_seen: Vec<String>,
    steps_seen: Vec<String>,
    rescue: Option<RescueHook>,
}

/// What a crash does beyond stopping the execution: [`Faults::rescue_at_once`].
#[derive(Clone)]
struct RescueHook(Arc<dyn Fn(JobId, i32) + Send + Sync>);

impl fmt::Debug for RescueHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RescueHook")
    }
}

/// A fault plan: which executions crash where. Install it with `WorkerBuilder::faults`.
///
/// Each `crash_*` call starts a rule; `kind`, `job`, `attempt`, `step` and `times` narrow the
/// rule before them. A rule without `times` fires every time it matches.
///
/// ```
/// use job_testkit::{Faults, Point};
/// # use job_core::{Job, JobContext, JobError};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice;
/// # impl Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
/// let faults = Faults::new()
///     .crash_after(Point::Perform).kind::<SendInvoice>().times(1)
///     .crash_before(Point::Finalize).attempt(2).times(1)
///     .crash_after(Point::Step).step("charge").times(1);
/// // Worker::builder(store).faults(faults.clone()) ... then `faults.crashes()` tells what
/// // fired, and `faults.assert_fired()` fails the test for a rule that never did.
/// ```
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Mutex<Inner>>,
}

impl Faults {
    /// A plan with no faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Crashes just before `point`.
    #[track_caller]
    pub fn crash_before(self, point: Point) -> Self {
        self.push(point.before())
    }

    /// Crashes just after `point`.
    #[track_caller]
    pub fn crash_after(self, point: Point) -> Self {
        self.push(point.after())
    }

    /// Crashes at the runtime's own `point`.
    pub fn crash_at(self, point: FaultPoint) -> Self {
        self.push(point)
    }

    /// Narrows the last rule to jobs of type `J`.
    #[track_caller]
    pub fn kind<J: Job>(self) -> Self {
        self.kind_named(J::KIND)
    }

    /// Narrows the last rule to jobs of the kind named `kind`. A name no job has never
    /// matches, and nothing says so while the test runs: [`assert_fired`](Self::assert_fired)
    /// does (the worker's registered kinds are not in the injector's reach).
    #[track_caller]
    pub fn kind_named(self, kind: &str) -> Self {
        self.edit(|r| r.kind = Some(kind.to_owned()))
    }

    /// Narrows the last rule to the job `id`.
    #[track_caller]
    pub fn job(self, id: JobId) -> Self {
        self.edit(|r| r.job = Some(id))
    }

    /// Narrows the last rule to attempt number `attempt`.
    #[track_caller]
    pub fn attempt(self, attempt: i32) -> Self {
        self.edit(|r| r.attempt = Some(attempt))
    }

    /// Narrows the last rule to the durable step named `name` (a rule at a step point without
    /// it fires at every step).
    ///
    /// # Panics
    /// When the last rule is not at a step point (it would never fire).
    #[track_caller]
    pub fn step(self, name: &str) -> Self {
        let point = self.lock().rules.last().map(|r| r.point);
        if let Some(point) =
            point.filter(|p| !matches!(p, FaultPoint::BeforeStep | FaultPoint::AfterStep))
        {
            panic!(
                "step({name:?}) narrows a rule at a step point (Point::Step), not one at {point}: \
                 it would never fire"
            );
        }
        self.edit(|r| r.step = Some(name.to_owned()))
    }

    /// The last rule fires at most `n` times.
    #[track_caller]
    pub fn times(self, n: u32) -> Self {
        self.edit(|r| r.remaining = Some(n))
    }

    /// Every crash so far, in order. A crash after the outcome's write
    /// ([`Point::Finalize`]) is in the list only once the worker has seen that write, after the
    /// job's row shows it: read the list after `worker.shutdown().await`, which waits for every
    /// execution and outcome, not just after [`wait_for`](crate::wait_for).
    pub fn crashes(&self) -> Vec<Crash> {
        self.lock().crashes.clone()
    }

    /// Rescues each crashed execution at once in `store` (the worker's store): on a crash, the
    /// job's lease is made to run out and a rescue pass runs, as [`rescue_now`] would, so a
    /// crash test does not wait out the lease ([`TEST_LEASE`] under
    /// [`for_tests`](crate::TestWorker::for_tests), the job's own otherwise). Without it, a
    /// crashed job comes back when its lease runs out, as after a killed process.
    ///
    /// The lease taken is the crashed attempt's only, and only while that attempt runs: a
    /// rescue already done, or a later claim of the job, is left alone. Needs a Tokio
    /// runtime, which every worker has.
    ///
    /// [`rescue_now`]: crate::rescue_now
    /// [`TEST_LEASE`]: crate::TEST_LEASE
    pub fn rescue_at_once<S: TestStore>(self, store: &S) -> Self {
        let store = store.clone();
        let hook = move |id: JobId, attempt: i32| {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            runtime.spawn(expire_and_rescue(store.clone(), id, attempt));
        };
        self.lock().rescue = Some(RescueHook(Arc::new(hook)));
        self
    }

    /// Fails the test when a rule never fired (a misspelled kind or step name, a step rule
    /// for a job without that step, a rule shadowed by an earlier one): the panic lists each
    /// such rule and the kinds and steps the executions had. Call it after
    /// `worker.shutdown().await`: see [`crashes`](Self::crashes).
    ///
    /// # Panics
    /// When a rule never fired, at the caller's line.
    #[track_caller]
    pub fn assert_fired(&self) {
        let inner = self.lock();
        let idle: Vec<String> = inner
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.fired == 0)
            .map(|(i, r)| format!("rule {} ({r})", i + 1))
            .collect();
        if idle.is_empty() {
            return;
        }
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        panic!(
            "{} of {} fault rule(s) never fired: {}; the executions seen had kinds {} and steps {}",
            idle.len(),
            inner.rules.len(),
            idle.join("; "),
            list(&inner.kinds_seen),
            list(&inner.steps_seen)
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(self, point: FaultPoint) -> Self {
        self.lock().rules.push(Rule {
            point,
            kind: None,
            job: None,
            attempt: None,
            step: None,
            remaining: None,
            fired: 0,
        });
        self
    }

    #[track_caller]
    fn edit(self, f: impl FnOnce(&mut Rule)) -> Self {
        {
            let mut inner = self.lock();
            let rule = inner
                .rules
                .last_mut()
                .expect("call crash_before, crash_after or crash_at before narrowing a rule");
            f(rule);
        }
        self
    }
}

impl Faults {
    fn decide(&self, point: FaultPoint, step: Option<&str>, job: &AttemptInfo) -> Fault {
        let mut inner = self.lock();
        if !inner.kinds_seen.contains(&job.kind) {
            inner.kinds_seen.push(job.kind.clone());
        }
        if let Some(step) = step.filter(|s| !inner.steps_seen.iter().any(|k| k == s)) {
            inner.steps_seen.push(step.to_owned());
        }
        let Some(rule) = inner.rules.iter_mut().find(|r| r.matches(point, step, job)) else {
            return Fault::Continue;
        };
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
        }
        rule.fired += 1;
        inner.crashes.push(Crash {
            point,
            job: job.id,
            attempt: job.attempt,
            step: step.map(str::to_owned),
        });
        let rescue = inner.rescue.clone();
        drop(inner);
        if let Some(RescueHook(rescue)) = rescue {
            rescue(job.id, job.attempt);
        }
        Fault::Crash
    }
}

/// Makes the lease of attempt `attempt` of job `id` run out and rescues it. The runtime
/// forgets the execution just after the crash, and a heartbeat already under way may renew
/// the lease once more: so again, under the same lease only, until it is rescued (at most a
/// second; past that the lease runs out by itself).
async fn expire_and_rescue<S: TestStore>(store: S, id: JobId, attempt: i32) {
    let mut token: Option<String> = None;
    for _ in 0..20 {
        let Some(expired) = store.expire_lease(id, attempt, token.as_deref()).await else {
            return;
        };
        token = Some(expired);
        let _ = Rescuer::new(store.clone(), RescuerConfig::default())
            .run_once()
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl FaultInjector for Faults {
    fn at(&self, point: FaultPoint, job: &AttemptInfo) -> Fault {
        self.decide(point, None, job)
    }

    fn at_step(&self, point: FaultPoint, step: &str, job: &AttemptInfo) -> Fault {
        self.decide(point, Some(step), job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    trait Tap: Sized {
        fn tap(self, f: impl FnOnce(&Self)) -> Self {
            f(&self);
            self
        }
    }
    impl Tap for Faults {}

    fn info(kind: &str, id: JobId, attempt: i32) -> AttemptInfo {
        AttemptInfo {
            id,
            kind: kind.into(),
            queue: "default".into(),
            attempt,
            max_attempts: 5,
        }
    }

    #[test]
    fn a_rule_fires_only_where_it_matches_and_only_as_often_as_told() {
        let faults = Faults::new()
            .crash_before(Point::Finalize)
            .kind_named("mail")
            .times(1);
        let mail = info("mail", 1, 1);
        assert_eq!(faults.at(FaultPoint::AfterPerform, &mail), Fault::Continue);
        assert_eq!(
            faults.at(FaultPoint::BeforeFinalize, &info("other", 2, 1)),
            Fault::Continue
        );
        assert_eq!(faults.at(FaultPoint::BeforeFinalize, &mail), Fault::Crash);
        assert_eq!(
            faults.at(FaultPoint::BeforeFinalize, &mail),
            Fault::Continue
        );
        assert_eq!(
            faults.crashes(),
            [Crash {
                point: FaultPoint::BeforeFinalize,
                job: 1,
                attempt: 1,
                step: None,
            }]
        );
    }

    #[test]
    fn a_step_rule_fires_only_at_its_step() {
        let faults = Faults::new().crash_after(Point::Step).step("charge");
        let job = info("k", 1, 1);
        assert_eq!(
            faults.at_step(FaultPoint::AfterStep, "email", &job),
            Fault::Continue
        );
        assert_eq!(
            faults.at_step(FaultPoint::BeforeStep, "charge", &job),
            Fault::Continue
        );
        assert_eq!(faults.at(FaultPoint::AfterStep, &job), Fault::Continue);
        assert_eq!(
            faults.at_step(FaultPoint::AfterStep, "charge", &job),
            Fault::Crash
        );
        assert_eq!(faults.crashes()[0].step.as_deref(), Some("charge"));
    }

    #[test]
    fn attempt_and_job_narrow_a_rule() {
        let faults = Faults::new().crash_after(Point::Claim).job(7).attempt(2);
        assert_eq!(
            faults.at(FaultPoint::AfterClaim, &info("k", 7, 1)),
            Fault::Continue
        );
        assert_eq!(
            faults.at(FaultPoint::AfterClaim, &info("k", 8, 2)),
            Fault::Continue
        );
        assert_eq!(
            faults.at(FaultPoint::AfterClaim, &info("k", 7, 2)),
            Fault::Crash
        );
        assert_eq!(
            faults.at(FaultPoint::AfterClaim, &info("k", 7, 2)),
            Fault::Crash
        );
    }

    #[test]
    fn assert_fired_names_the_rules_that_never_fired_and_what_ran() {
        let faults = Faults::new()
            .crash_after(Point::Perform)
            .kind_named("settle")
            .times(1)
            .crash_after(Point::Step)
            .step("authorise")
            .crash_after(Point::Perform)
            .kind_named("Settle");
        let settle = info("settle", 1, 1);
        assert_eq!(
            faults.at_step(FaultPoint::AfterStep, "authorize", &settle),
            Fault::Continue
        );
        assert_eq!(faults.at(FaultPoint::AfterPerform, &settle), Fault::Crash);
        let said =
            std::panic::catch_unwind(|| faults.assert_fired()).expect_err("two rules never fired");
        let said = said.downcast_ref::<String>().unwrap();
        assert_eq!(
            said,
            "2 of 3 fault rule(s) never fired: rule 2 (crash at after_step, step `authorise`); \
             rule 3 (crash at after_perform, kind `Settle`); the executions seen had kinds \
             `settle` and steps `authorize`"
        );
        // Every rule fired: nothing to say.
        Faults::new()
            .crash_after(Point::Perform)
            .times(1)
            .tap(|f| assert_eq!(f.at(FaultPoint::AfterPerform, &settle), Fault::Crash))
            .assert_fired();
    }

    #[test]
    #[should_panic(
        expected = "narrows a rule at a step point (Point::Step), not one at after_perform"
    )]
    fn a_step_name_on_a_rule_at_another_point_is_refused() {
        let _ = Faults::new().crash_after(Point::Perform).step("charge");
    }

    /// Where a panic of `f` points: the line its message is reported at.
    fn panic_location(f: impl FnOnce() + std::panic::UnwindSafe) -> u32 {
        use std::sync::Mutex;
        static SEEN: Mutex<Option<u32>> = Mutex::new(None);
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::thread::current().id();
        let previous = std::sync::Arc::new(std::panic::take_hook());
        let forward = previous.clone();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().id() == me {
                *SEEN.lock().unwrap() = info.location().map(|l| l.line());
            } else {
                forward(info);
            }
        }));
        let result = std::panic::catch_unwind(f);
        let _ = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| previous(info)));
        assert!(result.is_err(), "it did not panic");
        SEEN.lock().unwrap().take().expect("a location")
    }

    #[test]
    fn a_misplaced_narrowing_points_at_the_test_not_the_testkit() {
        // Every panic below is reported at a line of this test, not of the code above.
        let start = line!();
        for location in [
            panic_location(|| drop(Faults::new().times(1))),
            panic_location(|| drop(Faults::new().kind_named("mail"))),
            panic_location(|| drop(Faults::new().crash_before(Point::Claim))),
            panic_location(|| drop(Faults::new().crash_after(Point::Claim).step("charge"))),
            panic_location(|| Faults::new().crash_after(Point::Claim).assert_fired()),
        ] {
            assert!(location > start, "reported at line {location}");
        }
    }

    #[test]
    #[should_panic(expected = "no job before a claim")]
    fn there_is_no_crash_before_a_claim() {
        let _ = Faults::new().crash_before(Point::Claim);
    }
}
