//! The reporter's role and gauges when a process runs several workers: `job_reporter_leader`
//! is one unlabelled gauge for the process, so it is 1 while any of them holds the role; a
//! reporter that stops holding the role sets what it reported back to zero; a release that
//! fails still stops reporting. A test binary of its own: the gauge is the process's, and
//! other tests' reporters would move it.

use std::time::Duration;

use job::{JobFilter, PgStore, Reporter, ReporterConfig};
use job_core::Admin;
use job_testkit::TestDb;
use metrics_exporter_prometheus::PrometheusBuilder;

fn reporter(store: &PgStore, holder: &str) -> Reporter<PgStore> {
    let config = ReporterConfig {
        interval: Duration::from_millis(100),
        ..ReporterConfig::default()
    };
    Reporter::new(store.clone(), config, holder, Vec::new())
}

/// The value of the sample of `name` whose labels include every one of `labels`.
fn sample(scrape: &str, name: &str, labels: &[&str]) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let series = l.rsplit_once(' ').map_or(*l, |(s, _)| s);
            (series == name || series.starts_with(&format!("{name}{{")))
                && labels.iter().all(|want| series.contains(want))
        })
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[tokio::test]
async fn two_reporters_in_one_process_share_the_leader_gauge_and_clear_what_they_reported() {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let db = TestDb::new().await;
    let store = db.store();
    for _ in 0..2 {
        let id: i64 = sqlx::query_scalar("SELECT job.enqueue('rl.dead', '{}', queue => 'rl')")
            .fetch_one(&db.pool())
            .await
            .unwrap();
        sqlx::query(
            "UPDATE job.jobs SET state = 'discarded', finalized_at = now(), attempt = 1 \
             WHERE id = $1",
        )
        .bind(id)
        .execute(&db.pool())
        .await
        .unwrap();
    }
    let leader = || sample(&handle.render(), "job_reporter_leader", &[]);
    let dead = || {
        sample(
            &handle.render(),
            "job_dead_letters",
            &["queue=\"rl\"", "kind=\"rl.dead\""],
        )
    };

    let mut a = reporter(&store, "worker-a");
    let mut b = reporter(&store, "worker-b");
    assert!(a.run_once().await.unwrap().is_some(), "a takes the role");
    assert_eq!((leader(), dead()), (Some(1.0), Some(2.0)));
    // The other worker of the process is refused: the process still reports.
    assert!(b.run_once().await.unwrap().is_none());
    assert_eq!(
        leader(),
        Some(1.0),
        "b's refused pass does not hide a's role"
    );

    // The dead letters are purged and `a` gives the role up: what it reported goes to zero,
    // and `b`, which reads none, has nothing of theirs to clear.
    store.purge(&JobFilter::dead_letters()).await.unwrap();
    a.release().await.unwrap();
    assert_eq!((leader(), dead()), (Some(0.0), Some(0.0)));
    assert!(b.run_once().await.unwrap().is_some(), "b takes the role");
    assert_eq!((leader(), dead()), (Some(1.0), Some(0.0)));

    // A release that cannot reach the database still stops reporting.
    store.pool().close().await;
    assert!(b.release().await.is_err());
    assert_eq!(leader(), Some(0.0));
    db.close().await;
}
