//! Running one attempt, shared by the worker and the testkit: the registry of handlers, the
//! context a handler gets (durable steps, blocking work, stop signals), the fault points, and
//! the one pipeline from a stored payload to an outcome. Above the contract.

pub(crate) mod context;
pub(crate) mod fault;
pub(crate) mod pipeline;
pub(crate) mod registry;
pub(crate) mod step;
