//! Every SQL statement the store runs, one file each under `src/sql/` (River's rule: no ad-hoc
//! SQL). Each file's header comment says what the statement does and which guard it applies.
//! Two predicates that several statements share live in fragments of their own
//! (`job_filter.sql`, `dead_letters.sql`, `stats_filter.sql`, the summary columns of
//! `job_summary.sql`, and `verdicts.sql`), spliced once where a statement
//! has the fragment's marker line (`-- @job_filter`, ...).

use std::sync::LazyLock;

/// The `JobFilter` predicate of list, purge and redrive.
const JOB_FILTER: &str = include_str!("sql/job_filter.sql");
/// The dead letters purge and redrive act on (itself holding the `JobFilter` predicate).
const DEAD_LETTERS: &str = include_str!("sql/dead_letters.sql");
/// The filter of the stats statements.
const STATS_FILTER: &str = include_str!("sql/stats_filter.sql");
/// The summary a listing shows of a job: its columns, from `job.jobs j`.
const JOB_SUMMARY: &str = include_str!("sql/job_summary.sql");
/// What the jobs prune and purge delete meant for the edges still pointing at them.
const VERDICTS: &str = include_str!("sql/verdicts.sql");

/// `statement` with its fragments spliced in.
fn splice(statement: &str) -> String {
    statement
        .replace("-- @dead_letters\n", DEAD_LETTERS)
        .replace("-- @job_filter\n", JOB_FILTER)
        .replace("-- @stats_filter\n", STATS_FILTER)
        .replace("-- @job_summary\n", JOB_SUMMARY)
        .replace("-- @verdicts\n", VERDICTS)
}

pub(crate) const ENQUEUE: &str = include_str!("sql/enqueue.sql");
pub(crate) const ENQUEUE_MANY: &str = include_str!("sql/enqueue_many.sql");
pub(crate) const DEPENDENCIES_ADD: &str = include_str!("sql/dependencies_add.sql");
pub(crate) const DEPENDENCIES_OF: &str = include_str!("sql/dependencies_of.sql");
pub(crate) const CLAIM: &str = include_str!("sql/claim.sql");
pub(crate) const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");
/// `heartbeat.sql` waiting for the rows other transactions hold instead of skipping them
/// (under a `lock_timeout` set by its caller).
pub(crate) static HEARTBEAT_WAITING: LazyLock<String> = LazyLock::new(|| {
    let waiting = HEARTBEAT.replace(
        "FOR NO KEY UPDATE OF j SKIP LOCKED",
        "FOR NO KEY UPDATE OF j",
    );
    assert_ne!(waiting, HEARTBEAT, "heartbeat.sql skips locked rows");
    waiting
});
pub(crate) const FINALIZE: &str = include_str!("sql/finalize.sql");
pub(crate) const FINALIZE_BUSY: &str = include_str!("sql/finalize_busy.sql");
pub(crate) const RESCUE_EXPIRED: &str = include_str!("sql/rescue_expired.sql");
pub(crate) const STAGE: &str = include_str!("sql/stage.sql");
pub(crate) const RELEASE: &str = include_str!("sql/release.sql");
pub(crate) const RECORD_START: &str = include_str!("sql/record_start.sql");
pub(crate) const GET: &str = include_str!("sql/get.sql");
pub(crate) const ENQUEUE_UNIQUE: &str = include_str!("sql/enqueue_unique.sql");
pub(crate) const CLAIM_LOCK: &str = include_str!("sql/claim_lock.sql");
pub(crate) const CLAIM_LIMITED_DUE: &str = include_str!("sql/claim_limited_due.sql");
pub(crate) const CLAIM_RATED: &str = include_str!("sql/claim_rated.sql");
pub(crate) const ORDERING_LOCK: &str = include_str!("sql/ordering_lock.sql");
pub(crate) const BREAKER_RECORD: &str = include_str!("sql/breaker_record.sql");
pub(crate) const PAUSES: &str = include_str!("sql/pauses.sql");
pub(crate) const PAUSES_TENANT: &str = include_str!("sql/pauses_tenant.sql");
pub(crate) const CANCEL: &str = include_str!("sql/cancel.sql");
pub(crate) const STATE: &str = include_str!("sql/state.sql");
pub(crate) const PAUSE: &str = include_str!("sql/pause.sql");
pub(crate) const RESUME: &str = include_str!("sql/resume.sql");
pub(crate) const PAUSED: &str = include_str!("sql/paused.sql");
pub(crate) static LIST: LazyLock<String> = LazyLock::new(|| splice(include_str!("sql/list.sql")));
pub(crate) static LIST_SUMMARY: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/list_summary.sql")));
pub(crate) const REDRIVE_ORDER: &str = include_str!("sql/redrive_order.sql");
pub(crate) const REDRIVE_LOCK: &str = include_str!("sql/redrive_lock.sql");
pub(crate) static REDRIVE: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/redrive.sql")));
pub(crate) static PURGE: LazyLock<String> = LazyLock::new(|| splice(include_str!("sql/purge.sql")));
pub(crate) const PRUNE_PICK: &str = include_str!("sql/prune_pick.sql");
pub(crate) static PRUNE: LazyLock<String> = LazyLock::new(|| splice(include_str!("sql/prune.sql")));
pub(crate) const PRUNE_RATE_WINDOWS: &str = include_str!("sql/prune_rate_windows.sql");
pub(crate) const EXPIRE: &str = include_str!("sql/expire.sql");
pub(crate) const VACUUM_NEEDED: &str = include_str!("sql/vacuum_needed.sql");
pub(crate) const VACUUM: &str = include_str!("sql/vacuum.sql");
pub(crate) const ANALYZE: &str = include_str!("sql/analyze.sql");
pub(crate) static STATS_COUNTS: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/stats_counts.sql")));
pub(crate) static STATS_OLDEST: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/stats_oldest.sql")));
pub(crate) const STEP_LOAD: &str = include_str!("sql/step_load.sql");
pub(crate) const STEP_LOAD_UP_TO: &str = include_str!("sql/step_load_up_to.sql");
pub(crate) const STEP_LOAD_ONE: &str = include_str!("sql/step_load_one.sql");
pub(crate) const STEP_SAVE: &str = include_str!("sql/step_save.sql");
pub(crate) const COMPLETE_IN: &str = include_str!("sql/complete_in.sql");
pub(crate) const PROGRESS_SAVE: &str = include_str!("sql/progress_save.sql");
pub(crate) const REGISTER_KINDS: &str = include_str!("sql/register_kinds.sql");
pub(crate) const REPORT_OWNERS: &str = include_str!("sql/report_owners.sql");
pub(crate) const REPORT_LEAD: &str = include_str!("sql/report_lead.sql");
pub(crate) const REPORT: &str = include_str!("sql/report.sql");

pub(crate) const MIGRATE_LOCK: &str = include_str!("sql/migrate_lock.sql");
pub(crate) const MIGRATE_ENCODING: &str = include_str!("sql/migrate_encoding.sql");
pub(crate) const MIGRATE_INSTALLED: &str = include_str!("sql/migrate_installed.sql");
pub(crate) const MIGRATE_BOOTSTRAP: &str = include_str!("sql/migrate_bootstrap.sql");
pub(crate) const MIGRATE_APPLIED: &str = include_str!("sql/migrate_applied.sql");
pub(crate) const MIGRATE_RECORDED: &str = include_str!("sql/migrate_recorded.sql");
pub(crate) const MIGRATE_RECORD: &str = include_str!("sql/migrate_record.sql");
pub(crate) const POOL_IN_TRANSACTION: &str = include_str!("sql/pool_in_transaction.sql");
pub(crate) static STATS_STUCK: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/stats_stuck.sql")));

// Operator reads (inspect.rs): steps, listing pages, the queues at a glance, the reconcile.
pub(crate) const INSPECT_STEPS: &str = include_str!("sql/inspect_steps.sql");
pub(crate) const INSPECT_STEPS_SHOWN: &str = include_str!("sql/inspect_steps_shown.sql");
pub(crate) const INSPECT_WINDOW: &str = include_str!("sql/inspect_window.sql");
pub(crate) static INSPECT_PAGE: LazyLock<String> =
    LazyLock::new(|| splice(include_str!("sql/inspect_page.sql")));
pub(crate) const INSPECT_OVERVIEW: &str = include_str!("sql/inspect_overview.sql");
pub(crate) const CHECK_COUNTS: &str = include_str!("sql/check_counts.sql");
pub(crate) const CHECK_LEASES: &str = include_str!("sql/check_leases.sql");
pub(crate) const CHECK_ORPHAN_STEPS: &str = include_str!("sql/check_orphan_steps.sql");
pub(crate) const CHECK_PENDING_STRANDED: &str = include_str!("sql/check_pending_stranded.sql");
pub(crate) const CHECK_DEAD_CLASSES: &str = include_str!("sql/check_dead_classes.sql");
pub(crate) const JIT_OFF: &str = include_str!("sql/jit_off.sql");
pub(crate) const REPORT_SETTINGS: &str = include_str!("sql/report_settings.sql");
pub(crate) const JIT_OFF_SESSION: &str = include_str!("sql/jit_off_session.sql");
pub(crate) const WORKER_IDLE_TIMEOUT: &str = include_str!("sql/worker_idle_timeout.sql");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spliced_statements_hold_their_fragments_and_no_marker() {
        for (statement, fragment) in [
            (&*LIST, JOB_FILTER),
            (&*LIST_SUMMARY, JOB_FILTER),
            (&*LIST_SUMMARY, JOB_SUMMARY),
            (&*INSPECT_PAGE, JOB_SUMMARY),
            (&*PURGE, JOB_FILTER),
            (&*REDRIVE, JOB_FILTER),
            (&*PURGE, "WHERE j.state = 'discarded'"),
            (&*PURGE, VERDICTS),
            (&*PRUNE, VERDICTS),
            (&*REDRIVE, "WHERE j.state = 'discarded'"),
            (&*STATS_COUNTS, STATS_FILTER),
            (&*STATS_OLDEST, STATS_FILTER),
            (&*STATS_STUCK, STATS_FILTER),
        ] {
            assert!(statement.contains(fragment), "{statement}");
            assert!(!statement.contains("-- @"), "{statement}");
        }
    }
}
