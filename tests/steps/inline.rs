//! Durable steps in inline execution: the testkit's in-memory steps behave as the store's.

use job::{Job, JobContext, JobError, JobOptions, Outcome};
use job_testkit::{Inline, StepMemory};
use serde::{Deserialize, Serialize};

use crate::support::Effects;

/// Charges, then fails its email on the first attempt.
#[derive(Debug, Serialize, Deserialize)]
pub struct Bounce {}

impl Job for Bounce {
    const KIND: &'static str = "steps.bounce";
    const OPTIONS: JobOptions = JobOptions::DEFAULT;

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let id = ctx.id();
        let charge: u64 = ctx
            .step("charge", || async {
                effects.happen(id, "charge");
                Ok(4200)
            })
            .await?;
        ctx.step("email", || async {
            effects.happen(id, "email");
            if ctx.attempt() == 1 {
                return Err(JobError::retryable("mailbox full"));
            }
            Ok(())
        })
        .await?;
        effects.saw(id, format!("charged {charge}"));
        Ok(())
    }
}

#[tokio::test]
async fn a_retry_with_the_same_step_memory_skips_the_recorded_steps() {
    let effects = Effects::default();
    let steps = StepMemory::new();
    let inline = Inline::new().state(effects.clone()).steps(steps.clone());
    let first = inline.clone().perform(Bounce {}).await;
    assert_eq!(first.name(), "retry");
    assert_eq!(steps.names(), ["charge"], "a failed step records nothing");
    assert_eq!(steps.get::<u64>("charge"), Some(4200));
    let second = inline.attempt(2).perform(Bounce {}).await;
    assert_eq!(second, Outcome::Complete);
    assert_eq!(effects.count(1, "charge"), 1);
    assert_eq!(effects.count(1, "email"), 2);
    assert_eq!(effects.seen(1), ["charged 4200"]);
    assert_eq!(steps.names(), ["charge", "email"]);
}

#[tokio::test]
async fn one_inline_keeps_its_steps_across_performs_and_a_new_one_starts_afresh() {
    let effects = Effects::default();
    let inline = Inline::new().state(effects.clone()).attempt(2);
    assert_eq!(inline.perform(Bounce {}).await, Outcome::Complete);
    assert_eq!(inline.perform(Bounce {}).await, Outcome::Complete);
    assert_eq!(
        effects.count(1, "charge"),
        1,
        "one job's life: its steps are kept"
    );
    let another = Inline::new().state(effects.clone()).attempt(2);
    assert_eq!(another.perform(Bounce {}).await, Outcome::Complete);
    assert_eq!(effects.count(1, "charge"), 2, "a new Inline is a new job");
}

#[tokio::test]
async fn a_recorded_output_of_another_type_is_a_terminal_error() {
    let effects = Effects::default();
    let steps = StepMemory::new();
    steps.record("charge", &"not a number");
    let outcome = Inline::new()
        .state(effects.clone())
        .steps(steps)
        .perform(Bounce {})
        .await;
    match outcome {
        Outcome::Discard { failure } => assert!(
            failure
                .message
                .contains("the recorded output of step `charge` does not decode as `u64`"),
            "{}",
            failure.message
        ),
        other => panic!("expected a discard, got {other:?}"),
    }
    assert_eq!(effects.count(1, "charge"), 0);
}

#[tokio::test]
async fn inline_applies_the_snooze_limit() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Later {}
    impl Job for Later {
        const KIND: &'static str = "steps.later";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Err(JobError::snooze(std::time::Duration::from_secs(1)))
        }
    }
    assert_eq!(Inline::new().perform(Later {}).await.name(), "snooze");
    let outcome = Inline::new()
        .snoozes(job::DEFAULT_MAX_SNOOZES)
        .perform(Later {})
        .await;
    assert!(
        matches!(&outcome, Outcome::Discard { failure } if failure.class == job::ErrorClass::SnoozeLimit),
        "{outcome:?}"
    );
}

/// Inline steps keep the stores' limits: a new step whose output would take the job past
/// `MAX_STEPS_TOTAL` bytes is refused, nothing recorded, and the job ends as in production
/// (`step_unstorable`, discarded), not completed with more steps than a store would keep.
#[tokio::test]
async fn inline_steps_refuse_a_step_past_the_jobs_bytes_of_output() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Hoard {}
    impl Job for Hoard {
        const KIND: &'static str = "steps.hoard";
        async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
            let chunk = "x".repeat(1_000_000);
            for i in 0..100 {
                ctx.step(&format!("chunk-{i:03}"), || async { Ok(chunk.clone()) })
                    .await?;
            }
            Ok(())
        }
    }
    let steps = StepMemory::new();
    let outcome = Inline::new()
        .id(77)
        .steps(steps.clone())
        .perform(Hoard {})
        .await;
    // Each output is 1,000,002 bytes of JSON: 67 of them fit in 64 MiB, the 68th does not.
    let fit = job::MAX_STEPS_TOTAL / 1_000_002;
    assert_eq!(steps.names().len(), fit, "steps recorded");
    match outcome {
        Outcome::Discard { failure } => {
            assert_eq!(
                failure.class,
                job::ErrorClass::StepUnstorable,
                "{failure:?}"
            );
            assert!(
                failure
                    .message
                    .contains(&format!("job 77 has recorded {fit} steps"))
                    && failure.message.contains("job::MAX_STEPS_TOTAL")
                    && failure.message.contains(&format!("chunk-{fit:03}")),
                "{}",
                failure.message
            );
        }
        other => panic!("expected a discard, got {other:?}"),
    }
}
