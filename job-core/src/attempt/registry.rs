//! The kinds a worker can run, each behind a type-erased handler.

use std::any::type_name;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use crate::attempt::context::JobContext;
use crate::contract::store::ClaimKind;
use crate::model::error::{BuildError, JobError};
use crate::model::job::{Job, JobOptions};
use crate::model::new_job::{name_problem, MAX_NAME_LEN};

/// A handler's future, boxed so handlers of many types share one map.
pub type BoxJobFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send + 'static>>;

/// A payload that cannot become the job's type. The job is discarded with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Poison(pub String);

/// One registered kind, with its type erased.
pub trait Handler: Send + Sync + 'static {
    /// The kind name.
    fn kind(&self) -> &'static str;
    /// The Rust type registered, for error messages.
    fn type_name(&self) -> &'static str;
    /// The newest payload version it decodes.
    fn version(&self) -> i32;
    /// Its options.
    fn options(&self) -> &'static JobOptions;
    /// Decodes `payload` (upgrading older versions) and starts the handler.
    fn start(&self, payload: &str, version: i32, ctx: JobContext) -> Result<BoxJobFuture, Poison>;
    /// Why a compensating job's payload (`{"discarded": ..}`, see
    /// [`JobOptions::compensate`]) would not reach this kind whole, if it would not.
    fn refuses_compensation(&self) -> Option<String> {
        None
    }
}

struct Typed<J>(PhantomData<fn() -> J>);

impl<J: Job> Handler for Typed<J> {
    fn kind(&self) -> &'static str {
        J::KIND
    }

    fn type_name(&self) -> &'static str {
        type_name::<J>()
    }

    fn version(&self) -> i32 {
        J::VERSION
    }

    fn options(&self) -> &'static JobOptions {
        &J::OPTIONS
    }

    fn start(&self, payload: &str, version: i32, ctx: JobContext) -> Result<BoxJobFuture, Poison> {
        let job = decode::<J>(payload, version)?;
        Ok(Box::pin(job.perform(ctx)))
    }

    fn refuses_compensation(&self) -> Option<String> {
        // What a discard enqueues (the database builds it: job.compensate), at this kind's
        // version: it must decode, and keep the discarded job (serialized back, a
        // `discarded` field holds it), or the compensation ran on nothing.
        let sample = crate::model::job::Discarded {
            job_id: 1,
            kind: "k".to_owned(),
            payload: serde_json::json!({}),
            error: None,
            error_omitted: false,
        };
        let payload = serde_json::json!({ "discarded": sample }).to_string();
        let job = match decode::<J>(&payload, J::VERSION) {
            Ok(job) => job,
            Err(Poison(why)) => return Some(why),
        };
        let kept = serde_json::to_value(&job)
            .ok()
            .and_then(|v| v.get("discarded").cloned())
            .and_then(|d| serde_json::from_value::<crate::model::job::Discarded>(d).ok());
        match kept {
            Some(d) if d == sample => None,
            _ => Some(
                "its payload does not keep the discarded job: a compensating job takes it as \
                 `discarded: job::Discarded` (its `#[job]` function's argument)"
                    .to_owned(),
            ),
        }
    }
}

/// Turns a stored payload of `version` into `J`, through [`Job::upgrade`] for older versions.
///
/// A payload that does not decode is [`Poison`] whose message names the field's path and the
/// type expected there, never a value from the payload: it is logged and kept in the job's
/// error history, where a secret that slipped into a payload must not follow it.
pub fn decode<J: Job>(payload: &str, version: i32) -> Result<J, Poison> {
    use std::cmp::Ordering;
    match version.cmp(&J::VERSION) {
        Ordering::Equal => serde_json::from_str(payload).map_err(|e| {
            Poison(format!(
                "payload of `{}` (version {version}) does not decode: {}",
                J::KIND,
                crate::model::decode::explain::<J>(payload, &e)
            ))
        }),
        Ordering::Less => {
            let old: serde_json::Value = serde_json::from_str(payload).map_err(|e| {
                Poison(format!(
                    "payload of `{}` (version {version}) is not JSON: {e}",
                    J::KIND
                ))
            })?;
            let upgraded = J::upgrade(version, old).map_err(|e| {
                Poison(format!(
                    "upgrade of `{}` from version {version} failed: {e}",
                    J::KIND
                ))
            })?;
            J::deserialize(&upgraded).map_err(|e| {
                let why =
                    crate::model::decode::explain_value::<J>(&upgraded).unwrap_or_else(|| {
                        let _ = e; // serde_json's message may quote the value
                        "a value does not fit its field".into()
                    });
                Poison(format!(
                    "payload of `{}` upgraded from version {version} does not decode: {why}",
                    J::KIND
                ))
            })
        }
        Ordering::Greater => Err(Poison(format!(
            "payload version {version} of `{}` is newer than this worker's {}",
            J::KIND,
            J::VERSION
        ))),
    }
}

/// The handlers a worker runs, by kind.
#[derive(Default, Clone)]
pub struct Registry {
    handlers: HashMap<&'static str, Arc<dyn Handler>>,
    /// The first registration mistake: a kind registered twice, or a bad name.
    duplicate: Option<BuildError>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shortest lease of the registered kinds, if any is registered.
    pub fn shortest_lease(&self) -> Option<std::time::Duration> {
        self.handlers().map(|h| h.options().lease).min()
    }

    /// Adds `J`. A second type under the same kind, a kind or default queue that breaks the
    /// name rule ([`name_problem`]: no enqueue could ever fill it), or an owner the store
    /// cannot record (empty, over 128 bytes, a NUL), is remembered and reported by
    /// [`Registry::check`], so the worker refuses to start.
    pub fn register<J: Job>(&mut self) {
        let mut names = vec![("kind", J::KIND), ("queue", J::OPTIONS.queue)];
        if let Some(c) = J::OPTIONS.compensate {
            names.extend([("compensate", c.kind), ("compensate", c.queue)]);
        }
        // Recorded with the kind by the reporter on every pass, which the store refuses whole
        // for an owner it cannot store (`job.kind_owners`: 1 to 128 bytes).
        if let Some(owner) = J::OPTIONS.owner {
            if owner.is_empty() || owner.len() > MAX_NAME_LEN || owner.contains('\0') {
                self.duplicate.get_or_insert(BuildError::InvalidOption {
                    option: "owner",
                    reason: format!(
                        "owner {owner:?} of `{}` must be 1 to {MAX_NAME_LEN} bytes without a NUL \
                         character, got {} bytes",
                        type_name::<J>(),
                        owner.len()
                    ),
                });
            }
        }
        for (option, name) in names {
            if let Some(problem) = name_problem(name) {
                self.duplicate.get_or_insert(BuildError::InvalidOption {
                    option,
                    reason: format!("{option} {name:?} of `{}` {problem}", type_name::<J>()),
                });
            }
        }
        let handler: Arc<dyn Handler> = Arc::new(Typed::<J>(PhantomData));
        if let Some(existing) = self.handlers.get(J::KIND) {
            if self.duplicate.is_none() {
                self.duplicate = Some(BuildError::DuplicateKind {
                    kind: J::KIND.to_owned(),
                    first: existing.type_name(),
                    second: handler.type_name(),
                });
            }
            return;
        }
        self.handlers.insert(J::KIND, handler);
    }

    /// The first registration mistake, if any.
    pub fn check(&self) -> Result<(), BuildError> {
        match &self.duplicate {
            Some(err) => return Err(err.clone()),
            None if self.handlers.is_empty() => return Err(BuildError::NoJobs),
            None => {}
        }
        // A compensating kind registered here must take what a discard gives it: the wrong
        // job named (one taking the original's arguments) compiled, and each compensation
        // then failed to decode, or ran on `None`s.
        let mut kinds: Vec<&Arc<dyn Handler>> = self.handlers.values().collect();
        kinds.sort_by_key(|h| h.kind());
        for handler in kinds {
            let Some(compensate) = handler.options().compensate else {
                continue;
            };
            let Some(target) = self.handlers.get(compensate.kind) else {
                continue;
            };
            if let Some(why) = target.refuses_compensation() {
                return Err(BuildError::InvalidOption {
                    option: "compensate",
                    reason: format!(
                        "`{}` names `{}` ({}) as its compensating job, which cannot take the \
                         discarded job: {why}",
                        handler.kind(),
                        target.kind(),
                        target.type_name()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The handler for `kind`.
    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(kind)
    }

    /// Every kind as the claim needs it, sorted by name.
    pub fn claim_kinds(&self) -> Vec<ClaimKind> {
        let mut kinds: Vec<_> = self
            .handlers
            .values()
            .map(|h| ClaimKind {
                kind: h.kind().to_owned(),
                max_version: h.version(),
                lease: h.options().lease,
                concurrency: h.options().concurrency,
                rate: h.options().rate,
            })
            .collect();
        kinds.sort_by(|a, b| a.kind.cmp(&b.kind));
        kinds
    }

    /// Every handler.
    pub fn handlers(&self) -> impl Iterator<Item = &Arc<dyn Handler>> {
        self.handlers.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{Compensate, Discarded};
    use serde::{Deserialize, Serialize};

    /// Fails; compensated by `C`.
    #[derive(Serialize, Deserialize)]
    struct Charge<C: Job> {
        order_id: i64,
        #[serde(skip)]
        _by: PhantomData<C>,
    }

    impl<C: Job> Job for Charge<C> {
        const KIND: &'static str = "charge";
        const OPTIONS: JobOptions = JobOptions {
            compensate: Some(Compensate::of::<C>()),
            ..JobOptions::DEFAULT
        };
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }

    macro_rules! compensating {
        ($name:ident { $($field:ident: $ty:ty),* }) => {
            #[derive(Serialize, Deserialize)]
            struct $name {
                $($field: $ty),*
            }

            impl Job for $name {
                const KIND: &'static str = stringify!($name);
                async fn perform(self, _: JobContext) -> Result<(), JobError> {
                    Ok(())
                }
            }
        };
    }

    compensating!(Refund {
        discarded: Discarded
    });
    compensating!(RefundWithNote { discarded: Discarded, note: Option<String> });
    compensating!(RefundOrder { order_id: i64 });
    compensating!(ReleaseStock { sku: Option<String> });

    fn checked<C: Job>() -> Result<(), BuildError> {
        let mut registry = Registry::new();
        registry.register::<Charge<C>>();
        registry.register::<C>();
        registry.check()
    }

    #[test]
    fn a_compensating_job_must_take_the_discarded_job() {
        assert!(checked::<Refund>().is_ok());
        assert!(checked::<RefundWithNote>().is_ok());
        for (err, said) in [
            (checked::<RefundOrder>(), "missing field `order_id`"),
            (checked::<ReleaseStock>(), "does not keep the discarded job"),
        ] {
            match err {
                Err(BuildError::InvalidOption { option, reason }) => {
                    assert_eq!(option, "compensate");
                    assert!(
                        reason.starts_with("`charge` names `") && reason.contains(said),
                        "{reason}"
                    );
                }
                other => panic!("expected `compensate` refused, got {other:?}"),
            }
        }
        // Not registered here (run by another worker): not checked here.
        let mut registry = Registry::new();
        registry.register::<Charge<RefundOrder>>();
        assert!(registry.check().is_ok());
    }
}
