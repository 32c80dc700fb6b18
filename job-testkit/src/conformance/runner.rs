//! Running the suite: every test on its own fresh store, several at once, failures collected.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use job_core::{Admin, Store};
use tokio::sync::Semaphore;
use tokio::task::{JoinError, JoinSet};

use super::factory::StoreFactory;

/// How many tests run at once, each on its own store.
const CONCURRENCY: usize = 8;

/// The longest one test may take before it fails as hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The variable [`run`] reads to run only the tests whose name contains it.
pub const FILTER_VAR: &str = "JOB_CONFORMANCE";

type TestFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

struct ContractTest<S> {
    name: &'static str,
    run: fn(S) -> TestFuture,
}

macro_rules! suite {
    ($($module:ident :: $test:ident),* $(,)?) => {
        /// Every test's name, `module::test`, in suite order.
        const NAMES: &[&str] = &[$(concat!(stringify!($module), "::", stringify!($test))),*];

        fn all<S: Store + Admin>() -> Vec<ContractTest<S>> {
            vec![$(ContractTest {
                name: concat!(stringify!($module), "::", stringify!($test)),
                run: |store| Box::pin(super::$module::$test(store)),
            }),*]
        }
    };
}

suite![
    enqueue::enqueue_stores_the_job_as_given,
    enqueue::enqueue_then_claim_returns_it_running_with_attempt_one_and_a_token,
    enqueue::get_returns_none_for_an_unknown_id,
    enqueue::a_scheduled_job_is_not_claimed,
    enqueue::a_scheduled_job_is_claimed_once_due,
    enqueue::a_job_at_a_past_instant_is_available_at_once,
    enqueue::enqueue_many_keeps_input_order,
    enqueue::enqueue_refuses_an_invalid_job_and_a_batch_with_one_writes_nothing,
    claim::claim_order_is_priority_then_run_at_then_id,
    claim::claim_takes_at_most_the_limit_and_only_from_its_queue,
    claim::unknown_kinds_are_never_claimed_and_stay_untouched,
    claim::a_row_with_a_payload_version_above_the_workers_max_is_never_claimed,
    claim::each_kind_is_claimed_with_its_own_lease_and_max_version,
    claim::a_claim_with_a_lease_out_of_bounds_is_refused_and_takes_nothing,
    claim::a_claimed_job_is_not_claimed_again,
    claim::a_kind_concurrency_limit_caps_its_running_jobs,
    claim::claims_by_8_concurrent_tasks_never_hand_one_job_to_two_claimers,
    finalize::complete_marks_the_job_completed_and_finalized,
    finalize::retry_moves_run_at_keeps_the_attempt_and_appends_the_failure,
    finalize::retries_accumulate_errors_and_count_attempts,
    finalize::cancel_marks_the_job_cancelled_with_its_reason,
    finalize::snooze_reschedules_and_refunds_the_attempt,
    finalize::a_snoozed_job_runs_again_with_the_same_attempt_number,
    finalize::discard_dead_letters_the_job_with_its_failure,
    finalize::finalize_with_a_stale_token_returns_lease_lost_and_changes_nothing,
    finalize::a_finished_job_cannot_be_finalized_again,
    finalize::a_batch_reports_each_item_in_order,
    finalize::a_duplicate_id_in_one_batch_is_applied_once_without_error,
    finalize::a_stale_and_a_held_lease_of_one_job_in_a_batch_apply_only_the_held_one,
    finalize::error_messages_are_stored_without_nul_and_cut_to_the_limit,
    finalize::the_error_history_keeps_the_first_and_latest_entries,
    finalize::a_completion_stores_its_result_and_no_other_outcome_does,
    heartbeat::heartbeat_renews_and_reports_lost_leases,
    heartbeat::of_two_leases_of_one_job_only_the_stale_one_is_lost,
    heartbeat::a_renewal_never_shortens_a_lease,
    heartbeat::a_renewal_out_of_bounds_is_refused_and_renews_nothing,
    heartbeat::a_renewed_lease_is_not_rescued_after_its_first_expiry,
    heartbeat::a_stuck_renewal_is_recorded_until_it_is_not,
    rescue::rescue_only_touches_expired_leases,
    rescue::rescue_discards_an_expired_lease_with_no_attempts_left,
    rescue::rescue_retries_a_last_attempt_that_never_started,
    rescue::rescue_takes_at_most_its_limit,
    rescue::the_rescuer_recovers_every_expired_lease_in_batches,
    rescue::an_expired_lease_that_was_rescued_cannot_finalize,
    rescue::release_makes_a_job_available_at_once_with_the_attempt_not_counted,
    rescue::releasing_an_execution_that_ran_records_it_without_counting_the_attempt,
    rescue::interruptions_are_given_back_uncounted_a_bounded_number_of_times,
    rescue::a_rescued_job_is_claimed_before_jobs_due_after_it,
    rescue::release_with_a_stale_token_changes_nothing,
    worker::a_worker_leaves_unknown_kinds_untouched,
    worker::a_payload_that_does_not_decode_is_discarded_as_poison,
    worker::a_newer_payload_version_is_left_for_a_newer_worker,
    worker::an_older_payload_version_is_upgraded_before_it_runs,
    worker::a_payload_version_that_does_not_upgrade_is_discarded_as_poison,
    worker::a_job_that_snoozes_forever_is_discarded_at_the_snooze_limit,
    worker::a_kind_at_its_rate_limit_is_claimed_again_when_its_window_has_room,
    unique::a_duplicate_key_is_refused_with_the_holders_id,
    unique::until_finished_holds_the_key_while_running_and_frees_it_when_finished,
    unique::until_started_frees_the_key_at_the_first_claim_for_good,
    unique::until_pruned_holds_the_key_after_the_job_finished,
    unique::replace_updates_a_waiting_holder_and_refuses_a_running_one,
    unique::replace_leaves_a_holder_with_recorded_steps_or_a_requested_cancel_alone,
    unique::until_started_holds_the_key_again_when_given_back_unstarted,
    unique::until_started_holds_the_key_again_when_rescued_unstarted,
    unique::eight_concurrent_enqueues_of_one_key_make_one_job,
    ordering::one_job_of_a_key_at_a_time_in_enqueue_order,
    flow::a_rate_limit_caps_the_starts_of_its_kind_per_window,
    flow::a_rate_key_gives_each_key_its_own_window,
    flow::a_rate_limited_kind_keeps_claim_order_with_the_other_kinds,
    flow::a_tripped_breaker_pauses_its_kind_until_resumed,
    flow::a_breaker_pause_ends_after_its_cool_down_and_yields_to_an_operator,
    lifecycle::a_job_past_its_deadline_is_never_claimed_and_expire_discards_it,
    lifecycle::a_paused_queue_or_kind_is_not_claimed_until_resumed,
    lifecycle::a_pause_of_a_name_no_queue_or_kind_can_have_is_refused,
    lifecycle::cancel_ends_a_waiting_job_at_once_and_requests_a_running_ones,
    lifecycle::an_expired_lease_whose_cancel_was_requested_ends_cancelled,
    lifecycle::snoozes_are_counted_and_handed_to_each_claim,
    lifecycle::prune_deletes_finished_jobs_past_retention_and_keeps_dead_letters,
    lifecycle::a_job_cancelled_before_its_time_is_pruned_only_after_it,
    lifecycle::expire_never_touches_a_running_job,
    lifecycle::a_discard_enqueues_the_kinds_compensating_job,
    lifecycle::a_discard_after_a_cancel_request_ends_the_job_cancelled,
    steps::a_step_is_recorded_once_under_the_lease,
    steps::steps_load_in_name_order_up_to_a_bound_and_one_by_name,
    steps::a_step_under_a_lost_lease_is_not_recorded,
    steps::steps_outlive_a_retry_and_go_with_the_job,
    steps::a_new_step_past_the_jobs_output_bytes_is_refused,
    admin::list_matches_every_filter_field_oldest_first,
    admin::redrive_restores_dead_letters_and_skips_held_keys,
    admin::a_redrive_gives_fresh_interruptions,
    admin::a_filter_field_holding_a_nul_is_refused_naming_it,
    admin::purge_deletes_only_matching_dead_letters,
    admin::stats_count_per_queue_and_state_with_the_oldest_due_age,
    wakeups::an_enqueue_wakes_a_listener,
    wakeups::a_release_wakes_a_listener,
];

/// The name of every contract test, `module::test`, in suite order.
pub fn names() -> &'static [&'static str] {
    NAMES
}

/// Runs every contract test against fresh stores from `factory`, and panics listing each
/// failure by name when any fails.
///
/// When the environment variable `JOB_CONFORMANCE` is set, only the tests whose name
/// contains its value run (`JOB_CONFORMANCE=rescue::` runs the rescue tests); a filter that
/// matches nothing fails, so a typo does not pass silently.
///
/// Call it on a multi-threaded Tokio runtime: the tests run concurrently, each on its own
/// store, and the concurrency tests need real parallelism.
///
/// # Panics
///
/// When a test fails or hangs (after 60 s), or the filter matches no test.
pub async fn run<F: StoreFactory>(factory: F)
where
    F::Store: Admin,
{
    let filter = std::env::var(FILTER_VAR).ok().filter(|f| !f.is_empty());
    let tests: Vec<_> = all::<F::Store>()
        .into_iter()
        .filter(|t| filter.as_deref().is_none_or(|f| t.name.contains(f)))
        .collect();
    if let Some(filter) = &filter {
        assert!(
            !tests.is_empty(),
            "{FILTER_VAR}={filter:?} matches no conformance test; the tests are:\n  {}",
            NAMES.join("\n  ")
        );
    }
    execute(factory, tests).await;
}

/// Runs the one contract test called `name` (`module::test`, or just `test`), for debugging.
///
/// # Panics
///
/// When the test fails, or no test has that name (the message lists them).
pub async fn run_one<F: StoreFactory>(factory: F, name: &str)
where
    F::Store: Admin,
{
    let tests: Vec<_> = all::<F::Store>()
        .into_iter()
        .filter(|t| t.name == name || t.name.rsplit("::").next() == Some(name))
        .collect();
    assert!(
        !tests.is_empty(),
        "no conformance test is named {name:?}; the tests are:\n  {}",
        NAMES.join("\n  ")
    );
    execute(factory, tests).await;
}

async fn execute<F: StoreFactory>(factory: F, tests: Vec<ContractTest<F::Store>>) {
    let started = Instant::now();
    let total = tests.len();
    let factory = Arc::new(factory);
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    let mut running = JoinSet::new();
    for test in tests {
        let factory = factory.clone();
        let slots = slots.clone();
        running.spawn(async move {
            let _slot = slots.acquire_owned().await;
            let started = Instant::now();
            let verdict = run_test(&factory, test.run).await;
            (test.name, started.elapsed(), verdict)
        });
    }
    let mut failures = Vec::new();
    while let Some(done) = running.join_next().await {
        let (name, took, verdict) = done.expect("the conformance runner itself panicked");
        match verdict {
            Ok(()) => eprintln!("conformance {name} ... ok ({} ms)", took.as_millis()),
            Err(message) => {
                eprintln!("conformance {name} ... FAILED ({} ms)", took.as_millis());
                failures.push((name, message));
            }
        }
    }
    eprintln!(
        "conformance: {} passed, {} failed in {} ms",
        total - failures.len(),
        failures.len(),
        started.elapsed().as_millis()
    );
    if !failures.is_empty() {
        failures.sort_by_key(|(name, _)| NAMES.iter().position(|n| n == name));
        let report: Vec<String> = failures
            .iter()
            .map(|(name, message)| format!("{name}: {message}"))
            .collect();
        panic!(
            "{} of {total} store conformance tests failed:\n\n{}",
            failures.len(),
            report.join("\n\n")
        );
    }
}

/// One test on a fresh store: its own task, so a panic is caught and named, under a timeout;
/// the store's guard is disposed of whatever happened.
async fn run_test<F: StoreFactory>(
    factory: &Arc<F>,
    test: fn(F::Store) -> TestFuture,
) -> Result<(), String> {
    let create = {
        let factory = factory.clone();
        tokio::spawn(async move { factory.create().await })
    };
    let (store, guard) = create
        .await
        .map_err(|e| format!("the factory could not create a store: {}", failure(e)))?;
    let mut task = tokio::spawn(test(store));
    let verdict = match tokio::time::timeout(TIMEOUT, &mut task).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(failure(e)),
        Err(_) => {
            task.abort();
            Err(format!("did not finish within {TIMEOUT:?}"))
        }
    };
    factory.dispose(guard).await;
    verdict
}

fn failure(error: JoinError) -> String {
    match error.try_into_panic() {
        Ok(panic) => panic_message(&*panic),
        Err(error) => error.to_string(),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "panicked with a non-string payload".to_owned()
    }
}
