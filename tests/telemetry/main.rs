//! Telemetry against real PostgreSQL, with real recorders: the metrics of a scripted run
//! with every outcome (exact counters and labels), the saturation gauges, the reporter's
//! database-derived gauges and its one-at-a-time role, progress stored with the heartbeat,
//! a trace that crosses the queue, and the alert rules.

mod support;

mod alerts;
mod metrics;
mod progress;
mod reporter;
mod trace;
