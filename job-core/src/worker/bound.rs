//! Every call the worker makes to its store has a bound ([`WorkerConfig::store_timeout`]).
//!
//! A connection can go silent: the database's host vanishes, or a firewall or NAT drops the
//! flow, and no reset ever comes. A statement sent on it is never answered and never fails
//! (the kernel gives up on a socket with nothing unacknowledged never, and on one with
//! something unacknowledged after about 15 minutes with Linux's defaults). Unbounded, one
//! such call stalls the loop that made it: a claim stops the queue's claims, a batch of
//! outcomes stops every outcome (while the lease keeper renews those jobs' leases, so no
//! other worker takes them either), a step write stops every step of the worker. Given up
//! after the bound, the call fails like a lost connection: each loop already treats that as
//! passing and tries again, on another connection (the pool closes the silent one; see
//! `job_postgres::pool_options`).
//!
//! [`WorkerConfig::store_timeout`]: crate::WorkerConfig::store_timeout

use std::time::Duration;

use crate::contract::layer::{BoxFuture, Call, Returned, StoreLayer};
use crate::model::error::StoreError;

/// The bound of the pruner's `vacuum` call, which legitimately runs long (a VACUUM of a large
/// table takes minutes): 6 hours, or `store_timeout` when that is longer. Its store bounds the
/// quick look at whether a VACUUM is needed on its own (PostgreSQL: 60 seconds).
const VACUUM_BOUND: Duration = Duration::from_secs(6 * 3600);

/// The layer of the worker's own store: each call is given up after `timeout`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// `None`: calls pass through unbounded (the lease keeper's, which bounds each of its
    /// calls by its heartbeat period on its own).
    pub(crate) timeout: Option<Duration>,
}

/// A call given up because the store did not answer within the bound.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database did not answer `{call}` within {after:?} (store_timeout): given up as if \
     the connection were lost; it may or may not have been applied"
)]
pub(crate) struct Unanswered {
    call: &'static str,
    after: Duration,
}

impl StoreLayer for Bound {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let Some(timeout) = self.timeout else {
            return run;
        };
        let after = if call.name == "vacuum" {
            timeout.max(VACUUM_BOUND)
        } else {
            timeout
        };
        Box::pin(async move {
            match tokio::time::timeout(after, run).await {
                Ok(answered) => answered,
                Err(_) => {
                    tracing::warn!(
                        call = call.name,
                        ?after,
                        "the database did not answer a call within store_timeout: given up \
                         (a silent connection, or a server too busy to answer)"
                    );
                    Err(StoreError::new(Unanswered {
                        call: call.name,
                        after,
                    }))
                }
            }
        })
    }
}
