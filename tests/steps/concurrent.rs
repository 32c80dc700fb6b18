//! One step name called twice at once in an attempt (`join!`, `join_all` over items with a
//! repeated id): the effect runs once and both calls get its recorded output.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::future::join_all;
use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::*;

/// Every effect run of the jobs below, in order: each run's output carries its number.
#[derive(Clone, Default)]
pub struct Runs(Arc<AtomicUsize>);

/// Charges each of `items` in its own step (`charge:<item>`), all at once with `join_all`;
/// an item listed twice is one charge.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChargeAll {
    pub items: Vec<i64>,
}

impl Job for ChargeAll {
    const KIND: &'static str = "steps.charge_all";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let runs = ctx.state::<Runs>()?;
        let id = ctx.id();
        let charges = self.items.iter().map(|item| {
            let name = format!("charge:{item}");
            let ctx = &ctx;
            async move {
                let charge: String = ctx
                    .step(&name, || async {
                        effects.happen(id, &name);
                        let run = runs.0.fetch_add(1, Ordering::SeqCst) + 1;
                        // Lets the other calls reach their steps while this effect runs.
                        tokio::task::yield_now().await;
                        Ok(format!("ch_{item}_run{run}"))
                    })
                    .await?;
                Ok::<_, JobError>(charge)
            }
        });
        for charge in join_all(charges).await {
            effects.saw(id, charge?);
        }
        Ok(())
    }
}

/// Sends one receipt through two calls of the same step joined with `tokio::join!`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReceiptTwice {}

impl Job for ReceiptTwice {
    const KIND: &'static str = "steps.receipt_twice";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let runs = ctx.state::<Runs>()?;
        let id = ctx.id();
        let send = || {
            ctx.step("receipt", || async {
                effects.happen(id, "receipt");
                let run = runs.0.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::task::yield_now().await;
                Ok(format!("sent_run{run}"))
            })
        };
        let (first, second): (Result<String, _>, Result<String, _>) = tokio::join!(send(), send());
        effects.saw(id, first?);
        effects.saw(id, second?);
        Ok(())
    }
}

#[tokio::test]
async fn a_repeated_item_in_join_all_runs_its_step_once_and_every_call_gets_its_output() {
    let h = Harness::new().await;
    let (effects, runs) = (Effects::default(), Runs::default());
    let id = enqueue(
        &h.store,
        ChargeAll {
            items: vec![1, 2, 1, 3, 2],
        },
    )
    .await;
    let worker = steps_worker(&h.store, &effects)
        .register::<ChargeAll>()
        .state(runs.clone())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 1);
    assert_eq!(
        runs.0.load(Ordering::SeqCst),
        3,
        "one effect per distinct item (per item: 1 → {}, 2 → {}, 3 → {})",
        effects.count(id, "charge:1"),
        effects.count(id, "charge:2"),
        effects.count(id, "charge:3")
    );
    let seen = effects.seen(id);
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(seen[0], seen[2], "both calls of item 1 got one output");
    assert_eq!(seen[1], seen[4], "both calls of item 2 got one output");
    let recorded: Vec<(String, String)> = recorded_steps(h.store.pool(), id)
        .await
        .into_iter()
        .map(|(name, output, _)| (name, output))
        .collect();
    assert_eq!(
        recorded,
        [
            ("charge:1".to_owned(), format!("{:?}", seen[0])),
            ("charge:2".to_owned(), format!("{:?}", seen[1])),
            ("charge:3".to_owned(), format!("{:?}", seen[3])),
        ],
        "each call returned what was recorded"
    );
}

#[tokio::test]
async fn one_step_joined_with_itself_runs_once_and_both_calls_get_its_output() {
    let h = Harness::new().await;
    let (effects, runs) = (Effects::default(), Runs::default());
    let id = enqueue(&h.store, ReceiptTwice {}).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<ReceiptTwice>()
        .state(runs.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(
        runs.0.load(Ordering::SeqCst),
        1,
        "the receipt was sent once"
    );
    assert_eq!(effects.seen(id), ["sent_run1", "sent_run1"]);
    let recorded = recorded_steps(h.store.pool(), id).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].1, "\"sent_run1\"");
}

/// A store layer that records how many step writes are in the store at once (each takes 20 ms
/// there).
#[derive(Clone, Default)]
struct StepWrites {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl job::StoreLayer for StepWrites {
    fn call<'a, T: job::Returned + Send + 'a>(
        &'a self,
        call: job::Call,
        run: job::BoxFuture<'a, Result<T, job::StoreError>>,
    ) -> job::BoxFuture<'a, Result<T, job::StoreError>> {
        if call.name != "save_step" {
            return run;
        }
        Box::pin(async move {
            let at_once = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(at_once, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let answer = run.await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            answer
        })
    }
}

#[tokio::test]
async fn steps_run_at_once_share_one_connection_of_the_worker() {
    // Two jobs, each recording eight steps at once (join_all): their writes used to take up to
    // sixteen connections of the worker's pool (six by default), and its claims, outcomes and
    // rescues waited for them. They take the one the worker's budget gives steps.
    let h = Harness::new().await;
    let (effects, runs) = (Effects::default(), Runs::default());
    let first = enqueue(
        &h.store,
        ChargeAll {
            items: (1..=8).collect(),
        },
    )
    .await;
    let second = enqueue(
        &h.store,
        ChargeAll {
            items: (11..=18).collect(),
        },
    )
    .await;
    let writes = StepWrites::default();
    let store = job::Layered::new(h.store.clone(), writes.clone());
    let worker = steps_worker_over(store, &h.store, &effects)
        .register::<ChargeAll>()
        .state(runs.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(first, JobState::Completed).await;
    h.reaches(second, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(runs.0.load(Ordering::SeqCst), 16, "every step ran once");
    assert_eq!(recorded_steps(h.store.pool(), first).await.len(), 8);
    assert_eq!(
        writes.most.load(Ordering::SeqCst),
        1,
        "step writes in the store at once"
    );
}

/// Opened by a test to let [`StepAfterGate`] reach its step.
#[derive(Clone)]
struct StepGate(Arc<tokio::sync::Semaphore>);

impl Default for StepGate {
    fn default() -> Self {
        StepGate(Arc::new(tokio::sync::Semaphore::new(0)))
    }
}

/// Waits for [`StepGate`], then records one step.
#[derive(Debug, Serialize, Deserialize)]
struct StepAfterGate {}

impl Job for StepAfterGate {
    const KIND: &'static str = "steps.after_gate";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let gate = ctx.state::<StepGate>()?.0.clone();
        let _open = gate.acquire().await;
        let _: String = ctx
            .step("after", || async { Ok("done".to_owned()) })
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_step_whose_row_another_transaction_holds_holds_up_no_other_jobs_steps() {
    // The worker's step writes share one connection: a step write waiting for a row lock (an
    // operator's open session holding the job's row) held up every step of the worker.
    let h = Harness::new().await;
    let (effects, runs) = (Effects::default(), Runs::default());
    let gate = StepGate::default();
    let held = enqueue(&h.store, StepAfterGate {}).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<StepAfterGate>()
        .register::<ChargeAll>()
        .state(runs.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(held, JobState::Running).await;
    let mut session = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job.jobs WHERE id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *session)
        .await
        .unwrap();
    gate.0.add_permits(1);
    // Another job's steps go on while the held job's step waits for its row.
    let other = enqueue(&h.store, ChargeAll { items: vec![1, 2] }).await;
    h.reaches(other, JobState::Completed).await;
    assert_eq!(
        worker.stats().fenced,
        0,
        "the other job's steps did not wait for the held job to lose its lease"
    );
    assert_eq!(recorded_steps(h.store.pool(), held).await.len(), 0);
    session.rollback().await.unwrap();
    h.reaches(held, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(recorded_steps(h.store.pool(), held).await.len(), 1);
}
