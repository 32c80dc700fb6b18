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

pub(crate) const MIGRATE_LOCK: &str = include_str!("sql/migrate_lock.sql");
pub(crate) const MIGRATE_INSTALLED: &str = include_str!("sql/migrate_installed.sql");
pub(crate) const MIGRATE_BOOTSTRAP: &str = include_str!("sql/migrate_bootstrap.sql");
pub(crate) const MIGRATE_APPLIED: &str = include_str!("sql/migrate_applied.sql");
pub(crate) const MIGRATE_RECORD: &str = include_str!("sql/migrate_record.sql");
