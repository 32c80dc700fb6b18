//! The `chunked_reindex` example's promise against real PostgreSQL: pages that commit their
//! rows, their successor and their completion together resume after a crash at the page that
//! did not commit, index every row exactly once, and end the chain by themselves.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/chunked_reindex.rs"]
mod example;

use example::{run, CrashBeforeCommit, ReindexPage, Report, PAGE};
use job::{EnqueueError, FaultPoint, JobState};
use job_testkit::{Faults, Point, TestDb};

const ROWS: i64 = 10_000;

/// The chain's cursors for `rows` products: 0, PAGE, 2·PAGE, ...
fn cursors(rows: i64) -> Vec<i64> {
    (0..rows).step_by(PAGE as usize).collect()
}

fn assert_every_row_once(report: &Report, rows: i64) {
    assert_eq!(report.rows, rows);
    assert_eq!(report.indexed_once, rows, "every row indexed exactly once");
    assert_eq!(report.max_times_indexed, 1);
    let seen: Vec<i64> = report.pages.iter().map(|p| p.after).collect();
    assert_eq!(seen, cursors(rows), "one job per page, and the chain ended");
    assert!(
        report.pages.iter().all(|p| p.state == JobState::Completed),
        "{:?}",
        report.pages
    );
    assert!(report.held());
}

#[tokio::test]
async fn a_crash_between_a_pages_writes_and_its_commit_redoes_that_page_only() {
    let db = TestDb::new().await;
    let crashed = 9 * PAGE;
    let report = run(
        &db.pool(),
        ROWS,
        CrashBeforeCommit::at(crashed),
        Faults::new(),
    )
    .await
    .unwrap();
    assert_every_row_once(&report, ROWS);
    for page in &report.pages {
        if page.after == crashed {
            assert_eq!(page.attempt, 2, "the crashed page ran again");
            assert_eq!(page.errors, ["panic"]);
        } else {
            assert_eq!(
                (page.attempt, page.errors.len()),
                (1, 0),
                "page after {} ran once: nothing restarted from zero",
                page.after
            );
        }
    }
    db.close().await;
}

#[tokio::test]
async fn a_crash_after_every_pages_commit_repeats_nothing() {
    let db = TestDb::new().await;
    // Every page "dies" right after its handler returned, i.e. after its commit.
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<ReindexPage>();
    let report = run(&db.pool(), ROWS, CrashBeforeCommit::never(), faults.clone())
        .await
        .unwrap();
    assert_every_row_once(&report, ROWS);
    let crashes = faults.crashes();
    assert_eq!(crashes.len(), report.pages.len(), "every page crashed");
    assert!(crashes
        .iter()
        .all(|c| c.point == FaultPoint::AfterPerform && c.attempt == 1));
    assert!(
        report.pages.iter().all(|p| p.attempt == 1),
        "a committed page is finished: no rescue, no second attempt"
    );
    db.close().await;
}

#[tokio::test]
async fn a_crash_before_a_committed_pages_finalize_repeats_nothing() {
    let db = TestDb::new().await;
    let faults = Faults::new()
        .crash_before(Point::Finalize)
        .kind::<ReindexPage>()
        .times(3);
    let report = run(&db.pool(), ROWS, CrashBeforeCommit::never(), faults.clone())
        .await
        .unwrap();
    assert_every_row_once(&report, ROWS);
    assert_eq!(faults.crashes().len(), 3);
    assert!(report.pages.iter().all(|p| p.attempt == 1));
    db.close().await;
}

#[tokio::test]
async fn a_partial_last_page_ends_the_chain() {
    let db = TestDb::new().await;
    let rows = 2 * PAGE + 234;
    let report = run(&db.pool(), rows, CrashBeforeCommit::never(), Faults::new())
        .await
        .unwrap();
    assert_every_row_once(&report, rows);
    assert_eq!(report.pages.len(), 3);
    db.close().await;
}

#[tokio::test]
async fn a_second_active_job_for_one_cursor_is_refused() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let first = ReindexPage { after: 500 }.enqueue(&pool).await.unwrap();
    let again = ReindexPage { after: 500 }.enqueue(&pool).await;
    match again {
        Err(EnqueueError::Duplicate { key, existing, .. }) => {
            assert_eq!((key.as_str(), existing), ("reindex:500", first));
        }
        other => panic!("expected a duplicate, got {other:?}"),
    }
    ReindexPage { after: 1000 }.enqueue(&pool).await.unwrap();
    db.close().await;
}
