//! Every SQL statement the store runs, one file each under `src/sql/` (River's rule: no ad-hoc
//! SQL). Each file's header comment says what the statement does and which guard it applies.

pub(crate) const NOW: &str = include_str!("sql/now.sql");
pub(crate) const INSERT: &str = include_str!("sql/insert.sql");
pub(crate) const INSERT_UNIQUE: &str = include_str!("sql/insert_unique.sql");
pub(crate) const INSERT_REPLACE: &str = include_str!("sql/insert_replace.sql");
pub(crate) const UNIQUE_HOLDER: &str = include_str!("sql/unique_holder.sql");
pub(crate) const GET: &str = include_str!("sql/get.sql");
pub(crate) const PAUSED: &str = include_str!("sql/paused.sql");
pub(crate) const CLAIM_RUNNING: &str = include_str!("sql/claim_running.sql");
pub(crate) const CLAIM_PICK: &str = include_str!("sql/claim_pick.sql");
pub(crate) const CLAIM_TAKE: &str = include_str!("sql/claim_take.sql");
pub(crate) const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");
pub(crate) const LEASE_READ: &str = include_str!("sql/lease_read.sql");
pub(crate) const FINALIZE: &str = include_str!("sql/finalize.sql");
pub(crate) const RESCUE_PICK: &str = include_str!("sql/rescue_pick.sql");
pub(crate) const RESCUE: &str = include_str!("sql/rescue.sql");
pub(crate) const RELEASE: &str = include_str!("sql/release.sql");
pub(crate) const PRUNE: &str = include_str!("sql/prune.sql");
pub(crate) const EXPIRE_PICK: &str = include_str!("sql/expire_pick.sql");
pub(crate) const EXPIRE: &str = include_str!("sql/expire.sql");
pub(crate) const STEP_LOAD: &str = include_str!("sql/step_load.sql");
pub(crate) const STEP_SAVE: &str = include_str!("sql/step_save.sql");
pub(crate) const COMPLETE_IN: &str = include_str!("sql/complete_in.sql");
pub(crate) const MIGRATE_BOOKS: &str = include_str!("sql/migrate_books.sql");
pub(crate) const MIGRATE_APPLIED: &str = include_str!("sql/migrate_applied.sql");
pub(crate) const MIGRATE_RECORD: &str = include_str!("sql/migrate_record.sql");
