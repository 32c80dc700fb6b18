//! An `Admin` handle scoped to a tenant reads, cancels, redrives and purges its own jobs and
//! nothing of another tenant's, whatever filter it is given.

use job::{Admin, Cancelled, Enqueue, JobFilter, JobState, Pause, Store};
use job_testkit::TestDb;
use serde_json::json;

use crate::support::AnyPayload;

#[tokio::test]
async fn a_tenant_scoped_admin_cannot_reach_another_tenants_jobs() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    let enqueue = |tenant: Option<&'static str>, secret: &'static str| {
        let pool = pool.clone();
        async move {
            let mut e = Enqueue::new(AnyPayload(json!({ "note": secret })));
            if let Some(t) = tenant {
                e = e.tenant(t);
            }
            e.enqueue(&pool).await.unwrap()
        }
    };
    let acme_waiting = enqueue(Some("acme"), "acme-1").await;
    let acme_dead = enqueue(Some("acme"), "acme-2").await;
    let globex_waiting = enqueue(Some("globex"), "globex-1").await;
    let globex_dead = enqueue(Some("globex"), "globex-2").await;
    let nobody = enqueue(None, "none-1").await;
    sqlx::query("UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = ANY($1)")
        .bind(vec![acme_dead, globex_dead])
        .execute(&pool)
        .await
        .unwrap();

    let acme = store.for_tenant("acme");
    assert_eq!(acme.tenant(), "acme");
    let ids = |rows: Vec<job::JobRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();

    // Reading: its own jobs only, whatever the filter asks for.
    assert_eq!(
        ids(acme.list(&JobFilter::default()).await.unwrap()),
        [acme_waiting, acme_dead]
    );
    let other = JobFilter {
        tenant: Some("globex".into()),
        ..JobFilter::default()
    };
    assert!(acme.list(&other).await.unwrap().is_empty());
    let by_id = JobFilter::ids([globex_waiting, globex_dead, nobody]);
    assert!(acme.list(&by_id).await.unwrap().is_empty());
    assert!(acme.get(acme_waiting).await.unwrap().is_some());
    assert_eq!(acme.get(globex_waiting).await.unwrap(), None);
    assert_eq!(acme.get(nobody).await.unwrap(), None);
    let stats = acme.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(
        (stats.in_state(JobState::Available), stats.dead_letters),
        (1, 1)
    );
    assert_eq!(acme.stats(&other).await.unwrap().counts, []);

    // Cancelling, redriving, purging: nothing of globex's moves.
    assert_eq!(
        acme.cancel(globex_waiting).await.unwrap(),
        Cancelled::NotFound
    );
    assert_eq!(acme.cancel(nobody).await.unwrap(), Cancelled::NotFound);
    let everything = JobFilter::ids([globex_dead, acme_dead]);
    let redriven = acme.redrive(&everything).await.unwrap();
    assert_eq!(redriven.redriven, [acme_dead]);
    sqlx::query("UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = $1")
        .bind(acme_dead)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(acme.purge(&JobFilter::dead_letters()).await.unwrap(), 1);
    assert_eq!(acme.purge(&other).await.unwrap(), 0);
    assert_eq!(acme.cancel(acme_waiting).await.unwrap(), Cancelled::Now);

    // Pausing acts on every tenant's queue: refused.
    let refused = acme
        .pause(&Pause::Queue("default".into()))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("tenant `acme`"), "{refused}");
    assert!(acme.resume(&Pause::Queue("default".into())).await.is_err());
    assert_eq!(store.paused().await.unwrap(), []);

    // globex's jobs and the one without a tenant are as they were.
    let row = |id| {
        let store = store.clone();
        async move { store.get(id).await.unwrap().unwrap() }
    };
    assert_eq!(row(globex_waiting).await.state, JobState::Available);
    assert_eq!(row(globex_dead).await.state, JobState::Discarded);
    assert_eq!(row(nobody).await.state, JobState::Available);
    assert_eq!(store.list(&JobFilter::default()).await.unwrap().len(), 4);
    db.close().await;
}

#[tokio::test]
async fn a_tenant_scoped_admin_shows_only_the_pauses_that_hold_its_jobs() {
    // job.pauses records no tenant: a tenant's handle listed every pause in force, and with
    // it the names of queues and kinds only other tenants use.
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, queue, tenant) VALUES
             ('acme-kind', 'acme-queue', 'acme'),
             ('globex-secret-kind', 'globex-secret-queue', 'globex'),
             ('shared-kind', 'shared', 'globex'),
             ('shared-kind', 'shared', 'acme');
         INSERT INTO job.jobs (kind, queue, tenant, state, run_at) VALUES
             ('acme-later-kind', 'acme-later-queue', 'acme', 'scheduled', now() + interval '1 hour');
         INSERT INTO job.jobs (kind, queue, tenant, state, attempt, lock_token, locked_by,
                               locked_until) VALUES
             ('acme-running-kind', 'acme-running-queue', 'acme', 'running', 1,
              gen_random_uuid(), 'w', now() + interval '1 hour'),
             ('globex-running-kind', 'globex-running-queue', 'globex', 'running', 1,
              gen_random_uuid(), 'w', now() + interval '1 hour');
         INSERT INTO job.jobs (kind, queue, tenant, state, finalized_at) VALUES
             ('acme-done-kind', 'acme-done-queue', 'acme', 'completed', now());",
    )
    .execute(&pool)
    .await
    .unwrap();
    let all = [
        Pause::Queue("acme-queue".into()),
        Pause::Kind("acme-kind".into()),
        Pause::Queue("globex-secret-queue".into()),
        Pause::Kind("globex-secret-kind".into()),
        Pause::Queue("shared".into()),
        Pause::Kind("shared-kind".into()),
        Pause::Queue("acme-later-queue".into()),
        Pause::Queue("acme-running-queue".into()),
        Pause::Kind("acme-running-kind".into()),
        Pause::Queue("globex-running-queue".into()),
        Pause::Kind("globex-running-kind".into()),
        Pause::Queue("acme-done-queue".into()),
        Pause::Queue("nobodys-queue".into()),
    ];
    for what in &all {
        assert!(store.pause(what).await.unwrap(), "{what:?}");
    }
    let names = |pauses: Vec<Pause>| {
        pauses
            .iter()
            .map(|p| format!("{} {}", p.scope(), p.name()))
            .collect::<Vec<_>>()
    };
    let acme = store.for_tenant("acme");
    let expected = [
        "kind acme-kind",
        "kind acme-running-kind",
        "kind shared-kind",
        "queue acme-later-queue",
        "queue acme-queue",
        "queue acme-running-queue",
        "queue shared",
    ];
    assert_eq!(names(acme.paused().await.unwrap()), expected);
    let entries = acme.pauses().await.unwrap();
    assert_eq!(
        names(entries.into_iter().map(|e| e.what).collect()),
        expected
    );
    assert_eq!(
        names(store.for_tenant("globex").paused().await.unwrap()),
        [
            "kind globex-running-kind",
            "kind globex-secret-kind",
            "kind shared-kind",
            "queue globex-running-queue",
            "queue globex-secret-queue",
            "queue shared",
        ]
    );
    assert_eq!(store.for_tenant("initech").pauses().await.unwrap(), []);
    // The store's own handle still shows every pause.
    assert_eq!(store.paused().await.unwrap().len(), all.len());
    assert_eq!(store.pauses().await.unwrap().len(), all.len());
    db.close().await;
}
