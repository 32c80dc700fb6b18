//! A worker started on a database not yet migrated to its release waits for the migration
//! before it claims anything, and says why.

use std::sync::{Arc, Mutex};

use job::{JobState, Store};

use crate::common::*;

/// Records the name of every call of the store it wraps, and fails `schema_lag` while told to.
#[derive(Clone, Default)]
struct Calls {
    names: Arc<Mutex<Vec<&'static str>>>,
    fail_schema: Arc<std::sync::atomic::AtomicBool>,
}

impl Calls {
    fn names(&self) -> Vec<&'static str> {
        self.names.lock().unwrap().clone()
    }

    fn count(&self, name: &str) -> usize {
        self.names().iter().filter(|n| **n == name).count()
    }
}

impl job::StoreLayer for Calls {
    fn call<'a, T: job::Returned + Send + 'a>(
        &'a self,
        call: job::Call,
        run: job::BoxFuture<'a, Result<T, job::StoreError>>,
    ) -> job::BoxFuture<'a, Result<T, job::StoreError>> {
        self.names.lock().unwrap().push(call.name);
        let fail =
            call.name == "schema_lag" && self.fail_schema.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if fail {
                return Err(job::StoreError::new(std::io::Error::other(
                    "the test's database does not answer",
                )));
            }
            run.await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_nothing_until_the_database_has_its_migrations() {
    // A worker deployed before its migration ran used statements written for columns the
    // database did not have yet: its claims failed, and a job's last attempt (whose start
    // migration 44's column records) was given back unrun again and again, for as long as
    // the deploy lasted.
    let h = Harness::new().await;
    let last = job_postgres::MIGRATIONS.last().unwrap();
    sqlx::query("DELETE FROM job.schema_migrations WHERE version = $1")
        .bind(last.version)
        .execute(&h.db.pool())
        .await
        .unwrap();
    let lag = h.store.schema_lag().await.unwrap().expect("a lag");
    assert_eq!(
        (lag.first_missing, lag.missing, lag.recorded),
        (
            last.version.unsigned_abs(),
            1,
            last.version.unsigned_abs() - 1
        )
    );
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let calls = Calls::default();
    let store = job::Layered::new(h.store.clone(), calls.clone());
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    eventually("the worker to ask for the schema twice", || async {
        (calls.count("schema_lag") >= 2).then_some(())
    })
    .await;
    let names = calls.names();
    assert!(
        names.iter().all(|n| *n == "schema_lag"),
        "nothing claimed, nothing maintained: {names:?}"
    );
    assert_eq!(h.row(id).await.state, JobState::Available);
    sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
        .bind(last.version)
        .bind(last.name)
        .execute(&h.db.pool())
        .await
        .unwrap();
    assert_eq!(h.store.schema_lag().await.unwrap(), None);
    h.reaches(id, JobState::Completed).await;
    assert_eq!(h.ledger.runs(id), 1);
    let report = worker.shutdown().await;
    assert!(report.finished_in_time);
    h.db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_shut_down_while_it_waits_for_a_migration_does_nothing_else() {
    // Shut down during the wait, it went on to record its kinds, start its fetchers (one
    // could claim) and run a pass of each maintenance service on the old schema.
    let h = Harness::new().await;
    let last = job_postgres::MIGRATIONS.last().unwrap();
    sqlx::query("DELETE FROM job.schema_migrations WHERE version = $1")
        .bind(last.version)
        .execute(&h.db.pool())
        .await
        .unwrap();
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let calls = Calls::default();
    let store = job::Layered::new(h.store.clone(), calls.clone());
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    eventually("the worker to ask for the schema", || async {
        (calls.count("schema_lag") >= 1).then_some(())
    })
    .await;
    let report = worker.shutdown().await;
    assert!(report.finished_in_time);
    let names = calls.names();
    assert!(
        names.iter().all(|n| *n == "schema_lag"),
        "only the schema was asked for: {names:?}"
    );
    assert_eq!(h.row(id).await.state, JobState::Available);
    h.db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_read_the_schema_asks_again_before_it_claims() {
    // Any error let it go: a worker that met the database restarting (a deploy's usual
    // company) claimed on a schema it had not seen.
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let calls = Calls::default();
    calls
        .fail_schema
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let store = job::Layered::new(h.store.clone(), calls.clone());
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    eventually("the worker to ask twice", || async {
        (calls.count("schema_lag") >= 2).then_some(())
    })
    .await;
    let names = calls.names();
    assert!(
        names.iter().all(|n| *n == "schema_lag"),
        "nothing else before an answer: {names:?}"
    );
    calls
        .fail_schema
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.reaches(id, JobState::Completed).await;
    assert_eq!(h.ledger.runs(id), 1);
    worker.shutdown().await;
    h.db.close().await;
}
