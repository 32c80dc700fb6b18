//! Job types the worker contract tests register.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job_core::{Job, JobContext, JobError, JobId, JobOptions, RateLimit};
use serde::{Deserialize, Serialize};

/// What each handler ran with, by job id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<Vec<(JobId, String)>>>);

impl Seen {
    fn record(&self, ctx: &JobContext, what: String) {
        self.0.lock().unwrap().push((ctx.id(), what));
    }

    /// What job `id` ran with, once per run.
    pub(crate) fn runs_of(&self, id: JobId) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(job, _)| *job == id)
            .map(|(_, what)| what.clone())
            .collect()
    }
}

/// Version 1 of `conformance.greet`: records its name.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Greet {
    pub(crate) name: String,
}

impl Job for Greet {
    const KIND: &'static str = "conformance.greet";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Seen>()?.record(&ctx, self.name);
        Ok(())
    }
}

/// Version 3 of `conformance.person`: version 2 was `{"name": "First Last"}` and upgrades;
/// version 1 is no longer supported and does not.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Person {
    pub(crate) first: String,
    pub(crate) last: String,
}

impl Job for Person {
    const KIND: &'static str = "conformance.person";
    const VERSION: i32 = 3;

    fn upgrade(
        from_version: i32,
        payload: serde_json::Value,
    ) -> Result<serde_json::Value, JobError> {
        if from_version != 2 {
            return Err(JobError::terminal(format!(
                "version {from_version} is no longer supported"
            )));
        }
        let name = payload["name"]
            .as_str()
            .ok_or_else(|| JobError::terminal("version 2 has no name"))?;
        let (first, last) = name.split_once(' ').unwrap_or((name, ""));
        Ok(serde_json::json!({ "first": first, "last": last }))
    }

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Seen>()?
            .record(&ctx, format!("{}/{}", self.first, self.last));
        Ok(())
    }
}

/// `conformance.sleepy`: snoozes every time it runs.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Sleepy {}

impl Job for Sleepy {
    const KIND: &'static str = "conformance.sleepy";

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Err(JobError::snooze(std::time::Duration::from_millis(1)))
    }
}

/// `conformance.rated`: at most two starts in any 200 ms, across every worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Rated {}

impl Job for Rated {
    const KIND: &'static str = "conformance.rated";
    const OPTIONS: JobOptions = JobOptions {
        rate: Some(RateLimit::new(2, Duration::from_millis(200))),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}
