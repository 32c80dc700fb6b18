//! Deterministic crash faults at the runtime's named points.
//!
//! A crash behaves like a killed process for that one job: its execution stops where it is,
//! nothing more is written for it (no finalize, no heartbeat, no release), and its lease runs
//! out in the database until the rescuer puts it back to work.

use std::sync::{Arc, Mutex};

use job_core::{AttemptInfo, Fault, FaultInjector, FaultPoint, Job, JobId};

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
    /// The outcome's write (`crash_before`: classified, not written; `crash_after`: written).
    Finalize,
    /// The heartbeat that would renew the lease (either word: the execution dies there).
    Heartbeat,
    /// A durable step (`crash_before`: its closure has not run; `crash_after`: its closure
    /// ran and its output is recorded). Narrow it to one step with [`Faults::step`]. Steps
    /// already recorded are skipped and never crash.
    Step,
}

impl Point {
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
/// // Worker::builder(store).faults(faults.clone()) ... then `faults.crashes()` tells what fired.
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
    pub fn crash_before(self, point: Point) -> Self {
        self.push(point.before())
    }

    /// Crashes just after `point`.
    pub fn crash_after(self, point: Point) -> Self {
        self.push(point.after())
    }

    /// Crashes at the runtime's own `point`.
    pub fn crash_at(self, point: FaultPoint) -> Self {
        self.push(point)
    }

    /// Narrows the last rule to jobs of type `J`.
    pub fn kind<J: Job>(self) -> Self {
        self.kind_named(J::KIND)
    }

    /// Narrows the last rule to jobs of the kind named `kind`.
    pub fn kind_named(self, kind: &str) -> Self {
        self.edit(|r| r.kind = Some(kind.to_owned()))
    }

    /// Narrows the last rule to the job `id`.
    pub fn job(self, id: JobId) -> Self {
        self.edit(|r| r.job = Some(id))
    }

    /// Narrows the last rule to attempt number `attempt`.
    pub fn attempt(self, attempt: i32) -> Self {
        self.edit(|r| r.attempt = Some(attempt))
    }

    /// Narrows the last rule to the durable step named `name` (a rule at a step point without
    /// it fires at every step).
    pub fn step(self, name: &str) -> Self {
        self.edit(|r| r.step = Some(name.to_owned()))
    }

    /// The last rule fires at most `n` times.
    pub fn times(self, n: u32) -> Self {
        self.edit(|r| r.remaining = Some(n))
    }

    /// Every crash so far, in order.
    pub fn crashes(&self) -> Vec<Crash> {
        self.lock().crashes.clone()
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
        });
        self
    }

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
        let Some(rule) = inner.rules.iter_mut().find(|r| r.matches(point, step, job)) else {
            return Fault::Continue;
        };
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
        }
        inner.crashes.push(Crash {
            point,
            job: job.id,
            attempt: job.attempt,
            step: step.map(str::to_owned),
        });
        Fault::Crash
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
    #[should_panic(expected = "no job before a claim")]
    fn there_is_no_crash_before_a_claim() {
        let _ = Faults::new().crash_before(Point::Claim);
    }
}
