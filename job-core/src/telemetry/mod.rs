//! Telemetry: the metrics the framework emits through the `metrics` facade (names, units and
//! labels in one table, [`METRICS`]), the W3C trace context stored with each job so that its
//! attempts join the enqueuing code's trace, and the progress a handler reports.
//!
//! Used by every layer above; uses none of them.

mod metrics;
mod progress;
mod trace;

pub(crate) use self::metrics::{
    breaker_tripped, expired, names, rescued, rescues_counted_from_zero, JobLabels, LabelCache,
    QueueSlots,
};
pub use self::metrics::{
    describe_metrics, record_enqueued, MetricInfo, MetricKind, METRICS, NO_OWNER,
};
pub(crate) use progress::{fraction_json, value_json};
pub use progress::{MAX_PROGRESS, MAX_PROGRESS_MESSAGE};
pub(crate) use trace::attempt_span;
pub use trace::{current_traceparent, valid_traceparent, TRACEPARENT_LEN};
