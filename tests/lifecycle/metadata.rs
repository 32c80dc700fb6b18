//! Tags and tenants, filterable in listings and stats; stats from the database.

use std::time::Duration;

use job::{Enqueue, JobState};
use job_core::{Admin, JobFilter};

use crate::common::*;
use crate::support::*;

#[tokio::test]
async fn tags_and_tenant_are_stored_and_filter_listings_and_stats() {
    let h = Harness::new().await;
    let a = Enqueue::new(Noop { n: 1 })
        .tags(["billing", "eu"])
        .tenant("acme")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let b = Enqueue::new(Noop { n: 2 })
        .tags(["billing"])
        .tenant("globex")
        .queue("mail")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let c = Enqueue::new(Noop { n: 3 })
        .schedule_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let row = h.row(a).await;
    assert_eq!(row.tags, ["billing", "eu"]);
    assert_eq!(row.tenant.as_deref(), Some("acme"));
    assert!(h.row(c).await.tags.is_empty());

    let ids = |rows: Vec<job::JobRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let tagged = JobFilter {
        tag: Some("billing".into()),
        ..JobFilter::default()
    };
    assert_eq!(ids(h.store.list(&tagged).await.unwrap()), [a, b]);
    let acme = JobFilter {
        tenant: Some("acme".into()),
        ..JobFilter::default()
    };
    assert_eq!(ids(h.store.list(&acme).await.unwrap()), [a]);
    let scheduled = JobFilter {
        states: vec![JobState::Scheduled],
        ..JobFilter::default()
    };
    assert_eq!(ids(h.store.list(&scheduled).await.unwrap()), [c]);

    let dead = enqueue(&h.store, Noop { n: 4 }).await;
    exec(
        &h.store,
        "UPDATE job.jobs SET state = 'discarded', finalized_at = now(),
                run_at = now() - interval '1 hour' WHERE id = $1",
        dead,
    )
    .await;
    exec(
        &h.store,
        "UPDATE job.jobs SET run_at = now() - interval '90 seconds' WHERE id = $1",
        a,
    )
    .await;

    let all = h.store.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(all.in_state(JobState::Available), 2);
    assert_eq!(all.in_state(JobState::Scheduled), 1);
    assert_eq!(all.dead_letters, 1);
    let mail = all.counts.iter().find(|c| c.queue == "mail").unwrap();
    assert_eq!((mail.state, mail.count), (JobState::Available, 1));
    let age = all.oldest_available_age.unwrap();
    assert!(
        age >= Duration::from_secs(89) && age < Duration::from_secs(600),
        "{age:?}"
    );

    let acme_stats = h.store.stats(&acme).await.unwrap();
    assert_eq!(acme_stats.in_state(JobState::Available), 1);
    assert_eq!(acme_stats.dead_letters, 0);
    let nobody = h
        .store
        .stats(&JobFilter {
            tenant: Some("nobody".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert!(nobody.counts.is_empty());
    assert_eq!(nobody.oldest_available_age, None);
}

#[tokio::test]
async fn bad_tags_and_tenants_are_refused_by_name() {
    let h = Harness::new().await;
    let err = Enqueue::new(Noop { n: 1 })
        .tags(["has space"])
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`tags`"), "{err}");
    let err = Enqueue::new(Noop { n: 1 })
        .tenant("")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`tenant`"), "{err}");
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 0);
}

/// A reporter whose pass renews the role and then cannot read the gauges (here a lock on
/// `job.kind_owners` past its `lock_timeout`; a statement timeout on a large table does the
/// same) gives the role up and leaves it to the others for three intervals: it used to keep
/// the role for good, renewed at every pass, while no worker reported.
#[tokio::test]
async fn a_reporter_that_cannot_read_gives_the_role_up() {
    let h = Harness::new().await;
    let options = h.db.connect_options().options([("lock_timeout", "200")]);
    let impatient = job::PgStore::new(
        job_postgres::pool_options()
            .connect_with(options)
            .await
            .unwrap(),
    );
    let config = job::ReporterConfig {
        interval: Duration::from_secs(60),
        ..job::ReporterConfig::default()
    };
    let mut a = job::Reporter::new(impatient, config, "worker-a", Vec::new());
    let mut b = job::Reporter::new(h.store.clone(), config, "worker-b", Vec::new());
    let mut blocker = h.store.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE job.kind_owners IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let failed = a.run_once().await;
    assert!(failed.is_err(), "{failed:?}");
    blocker.rollback().await.unwrap();
    assert!(
        b.run_once().await.unwrap().is_some(),
        "the role is free for another worker at once"
    );
    assert!(a.run_once().await.unwrap().is_none());
}
