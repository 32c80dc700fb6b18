//! What the reporter (`maintenance/reporter.rs`) asks of a store: the database-derived gauges,
//! from one worker at a time.

use std::time::Duration;

use crate::model::state::JobState;

/// One pass of the reporter: take or keep the reporter's role, and read the gauges if held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRequest {
    /// The worker asking (its id): the role's holder when it gets it.
    pub holder: String,
    /// How long the role stays this worker's without another pass.
    pub hold_for: Duration,
    /// The owners of the kinds this worker runs, `(kind, owner)`, to record with the kinds.
    pub owners: Vec<(String, String)>,
    /// Whether to read the gauges when the role is held. `false` only takes or keeps the
    /// role: the report is then empty, not a reading (the holder keeps its role every pass and
    /// reads the gauges less often when reading them is slow).
    pub read: bool,
}

/// Jobs of one queue in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueCount {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: JobState,
    /// How many.
    pub count: u64,
}

/// Dead letters of one queue and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterCount {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// The kind's owner, when a worker that runs it recorded one.
    pub owner: Option<String>,
    /// How many.
    pub count: u64,
}

/// The database-derived gauges: jobs per queue and state (waiting, running and discarded
/// ones; finished ones are counted as they finish), the age of the oldest due job per queue,
/// dead letters per queue, kind and owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Jobs per queue and state.
    pub jobs: Vec<QueueCount>,
    /// Per queue with waiting jobs, how long its oldest due job has been due (zero when none
    /// is due).
    pub oldest_due: Vec<(String, Duration)>,
    /// Dead letters per queue and kind.
    pub dead_letters: Vec<DeadLetterCount>,
    /// The pauses in force (by operators, and by breakers whose cool-down has not ended).
    pub paused: Vec<crate::PauseEntry>,
}
