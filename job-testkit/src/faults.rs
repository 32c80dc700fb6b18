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
    /// The claim (only `crash_after`: the job is claimed and nothing else happened).
    Claim,
    /// The handler (`crash_before`: claimed, decoded, not run; `crash_after`: its side effects
    /// are done, its outcome is not written).
    Perform,
    /// The outcome's write (`crash_before`: classified, not written; `crash_after`: written).
    Finalize,
    /// The heartbeat that would renew the lease (either word: the execution dies there).
    Heartbeat,
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
        }
    }

    fn after(self) -> FaultPoint {
        match self {
            Point::Claim => FaultPoint::AfterClaim,
            Point::Perform => FaultPoint::AfterPerform,
            Point::Finalize => FaultPoint::AfterFinalize,
            Point::Heartbeat => FaultPoint::Heartbeat,
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    point: FaultPoint,
    kind: Option<String>,
    job: Option<JobId>,
    attempt: Option<i32>,
    remaining: Option<u32>,
}

impl Rule {
    fn matches(&self, point: FaultPoint, job: &AttemptInfo) -> bool {
        self.point == point
            && self.remaining != Some(0)
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
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<Rule>,
    crashes: Vec<Crash>,
}

/// A fault plan: which executions crash where. Install it with `WorkerBuilder::faults`.
///
/// Each `crash_*` call starts a rule; `kind`, `job`, `attempt` and `times` narrow the rule
/// before them. A rule without `times` fires every time it matches.
///
/// ```
/// use job_testkit::{Faults, Point};
/// # use job_core::{Job, JobContext, JobError};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice;
/// # impl Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
/// let faults = Faults::new()
///     .crash_after(Point::Perform).kind::<SendInvoice>().times(1)
///     .crash_before(Point::Finalize).attempt(2).times(1);
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

impl FaultInjector for Faults {
    fn at(&self, point: FaultPoint, job: &AttemptInfo) -> Fault {
        let mut inner = self.lock();
        let Some(rule) = inner.rules.iter_mut().find(|r| r.matches(point, job)) else {
            return Fault::Continue;
        };
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
        }
        inner.crashes.push(Crash {
            point,
            job: job.id,
            attempt: job.attempt,
        });
        Fault::Crash
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
                attempt: 1
            }]
        );
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
