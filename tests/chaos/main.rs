//! Crash faults at every named point and store outages: after recovery every job ends in
//! exactly one terminal state, none is lost, none is finalized twice, and no two executions of
//! a job ever overlap.
#![allow(unreachable_pub)]

mod faults;
mod outage;
mod support;
