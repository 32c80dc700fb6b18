//! Jobs whose side effects are counted, and a worker with a fast rescuer to run them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{Job, JobContext, JobError, JobId, JobOptions, PgStore};
use job_core::RescuerConfig;
use job_core::WorkerBuilder;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::common::FAST_BACKOFF;

/// Side effects per job and name, and what each execution saw.
#[derive(Clone, Default)]
pub struct Effects(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    counts: HashMap<(JobId, String), u32>,
    executions: HashMap<JobId, u32>,
    seen: HashMap<JobId, Vec<String>>,
}

impl Effects {
    pub fn happen(&self, id: JobId, what: &str) {
        *self
            .0
            .lock()
            .unwrap()
            .counts
            .entry((id, what.to_owned()))
            .or_default() += 1;
    }

    pub fn count(&self, id: JobId, what: &str) -> u32 {
        let inner = self.0.lock().unwrap();
        inner
            .counts
            .get(&(id, what.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    pub fn executed(&self, id: JobId) {
        *self.0.lock().unwrap().executions.entry(id).or_default() += 1;
    }

    pub fn executions(&self, id: JobId) -> u32 {
        let inner = self.0.lock().unwrap();
        inner.executions.get(&id).copied().unwrap_or(0)
    }

    pub fn saw(&self, id: JobId, what: String) {
        self.0
            .lock()
            .unwrap()
            .seen
            .entry(id)
            .or_default()
            .push(what);
    }

    pub fn seen(&self, id: JobId) -> Vec<String> {
        let inner = self.0.lock().unwrap();
        inner.seen.get(&id).cloned().unwrap_or_default()
    }
}

/// Charges a card, then emails a receipt: two durable steps, each counting its side effect.
#[derive(Debug, Serialize, Deserialize)]
pub struct Checkout {
    pub order: i64,
}

impl Job for Checkout {
    const KIND: &'static str = "steps.checkout";
    const OPTIONS: JobOptions = JobOptions {
        // A crashed attempt's lease expires after this: short, but a heartbeat still has a
        // third of it (333 ms) to renew it on a loaded machine.
        lease: Duration::from_millis(1000),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let id = ctx.id();
        effects.executed(id);
        let charge: String = ctx
            .step("charge", || async {
                effects.happen(id, "charge");
                Ok(format!("ch_{}", self.order))
            })
            .await?;
        let emails: u32 = ctx
            .step("email", || async {
                effects.happen(id, "email");
                Ok(1)
            })
            .await?;
        effects.saw(id, format!("attempt {}: {charge}, {emails}", ctx.attempt()));
        Ok(())
    }
}

/// On attempt 1, changes its own lease token in the database (as a rescue and a new claim
/// would) and then runs a step; records what the step returned.
#[derive(Debug, Serialize, Deserialize)]
pub struct StaleCharge {}

impl Job for StaleCharge {
    const KIND: &'static str = "steps.stale_charge";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let id = ctx.id();
        effects.executed(id);
        steal_lease(pool, id).await;
        let result = ctx
            .step("charge", || async {
                effects.happen(id, "charge");
                Ok("ch_1".to_owned())
            })
            .await;
        effects.saw(id, format!("{result:?}"));
        result.map(drop)
    }
}

/// Gives job `id` a new lease token with an hour to run, as if it had been rescued and
/// claimed by another worker.
pub async fn steal_lease(pool: &PgPool, id: JobId) {
    sqlx::query(
        "UPDATE job.jobs SET lock_token = gen_random_uuid(), locked_until = now() + interval '1 hour' \
         WHERE id = $1",
    )
        .bind(id)
        .execute(pool)
        .await
        .expect("steal the lease");
}

/// The recorded steps of job `id`: (name, output as text, attempt), by name.
pub async fn recorded_steps(pool: &PgPool, id: JobId) -> Vec<(String, String, i32)> {
    sqlx::query_as(
        "SELECT name, output::text, attempt FROM job.steps WHERE job_id = $1 ORDER BY name",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .expect("read steps")
}

/// A worker for these tests: a fast rescuer (crashed leases of 300 ms come back quickly),
/// fast polling, the effects and the pool as state.
pub fn steps_worker(store: &PgStore, effects: &Effects) -> WorkerBuilder<PgStore> {
    steps_worker_over(store.clone(), store, effects)
}

/// [`steps_worker`] over any store wrapping `pg`.
pub fn steps_worker_over<S: job::Store>(
    store: S,
    pg: &PgStore,
    effects: &Effects,
) -> WorkerBuilder<S> {
    let mut config = job::WorkerConfig::default();
    config.poll_interval = Duration::from_millis(10);
    config.drain_timeout = Duration::from_secs(5);
    config.rescuer = RescuerConfig {
        interval: Duration::from_millis(50),
        ..RescuerConfig::default()
    };
    job::Worker::builder(store)
        .queue("default", 8)
        .config(config)
        .state(effects.clone())
        .state(pg.pool().clone())
}
