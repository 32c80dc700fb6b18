//! Every SQL statement the store runs, one file each under `src/sql/` (River's rule: no ad-hoc
//! SQL). Each file's header comment says what the statement does and which guard it applies.

pub(crate) const ENQUEUE: &str = include_str!("sql/enqueue.sql");
pub(crate) const ENQUEUE_MANY: &str = include_str!("sql/enqueue_many.sql");
pub(crate) const CLAIM: &str = include_str!("sql/claim.sql");
pub(crate) const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");
pub(crate) const FINALIZE: &str = include_str!("sql/finalize.sql");
pub(crate) const RESCUE_EXPIRED: &str = include_str!("sql/rescue_expired.sql");
pub(crate) const RELEASE: &str = include_str!("sql/release.sql");
pub(crate) const GET: &str = include_str!("sql/get.sql");
pub(crate) const ENQUEUE_UNIQUE: &str = include_str!("sql/enqueue_unique.sql");
pub(crate) const CLAIM_LOCK: &str = include_str!("sql/claim_lock.sql");
pub(crate) const CANCEL: &str = include_str!("sql/cancel.sql");
pub(crate) const STATE: &str = include_str!("sql/state.sql");
pub(crate) const PAUSE: &str = include_str!("sql/pause.sql");
pub(crate) const RESUME: &str = include_str!("sql/resume.sql");
pub(crate) const PAUSED: &str = include_str!("sql/paused.sql");
pub(crate) const LIST: &str = include_str!("sql/list.sql");
pub(crate) const REDRIVE: &str = include_str!("sql/redrive.sql");
pub(crate) const PURGE: &str = include_str!("sql/purge.sql");
pub(crate) const PRUNE: &str = include_str!("sql/prune.sql");
pub(crate) const EXPIRE: &str = include_str!("sql/expire.sql");
pub(crate) const VACUUM_NEEDED: &str = include_str!("sql/vacuum_needed.sql");
pub(crate) const VACUUM: &str = include_str!("sql/vacuum.sql");
pub(crate) const STATS_COUNTS: &str = include_str!("sql/stats_counts.sql");
pub(crate) const STATS_OLDEST: &str = include_str!("sql/stats_oldest.sql");
pub(crate) const STEP_LOAD: &str = include_str!("sql/step_load.sql");
pub(crate) const STEP_SAVE: &str = include_str!("sql/step_save.sql");
pub(crate) const COMPLETE_IN: &str = include_str!("sql/complete_in.sql");

pub(crate) const MIGRATE_LOCK: &str = include_str!("sql/migrate_lock.sql");
pub(crate) const MIGRATE_INSTALLED: &str = include_str!("sql/migrate_installed.sql");
pub(crate) const MIGRATE_BOOTSTRAP: &str = include_str!("sql/migrate_bootstrap.sql");
pub(crate) const MIGRATE_APPLIED: &str = include_str!("sql/migrate_applied.sql");
pub(crate) const MIGRATE_RECORD: &str = include_str!("sql/migrate_record.sql");
pub(crate) const POOL_IN_TRANSACTION: &str = include_str!("sql/pool_in_transaction.sql");
pub(crate) const STATS_STUCK: &str = include_str!("sql/stats_stuck.sql");

// Operator reads (inspect.rs): steps, listing pages, the queues at a glance, the reconcile.
pub(crate) const INSPECT_STEPS: &str = include_str!("sql/inspect_steps.sql");
pub(crate) const INSPECT_WINDOW: &str = include_str!("sql/inspect_window.sql");
pub(crate) const INSPECT_PAGE: &str = include_str!("sql/inspect_page.sql");
pub(crate) const INSPECT_OVERVIEW: &str = include_str!("sql/inspect_overview.sql");
pub(crate) const CHECK_COUNTS: &str = include_str!("sql/check_counts.sql");
pub(crate) const CHECK_LEASES: &str = include_str!("sql/check_leases.sql");
pub(crate) const CHECK_ORPHAN_STEPS: &str = include_str!("sql/check_orphan_steps.sql");
pub(crate) const CHECK_DEAD_CLASSES: &str = include_str!("sql/check_dead_classes.sql");
pub(crate) const JIT_OFF: &str = include_str!("sql/jit_off.sql");
