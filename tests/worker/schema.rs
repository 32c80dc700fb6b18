//! A worker started on a database not yet migrated to its release waits for the migration
//! before it claims anything, and says why.

use std::sync::{Arc, Mutex};

use job::JobState;

use crate::common::*;

/// What a `fmt` subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Written {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Written {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_worker_claims_nothing_until_the_database_has_its_migrations() {
    // A worker deployed before its migration ran used statements written for columns the
    // database did not have yet: its claims failed, and a job's last attempt (whose start
    // migration 44's column records) was given back unrun again and again, for as long as
    // the deploy lasted.
    let written = Written::default();
    let sink = written.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let h = Harness::new().await;
                let last = job_postgres::MIGRATIONS.last().unwrap();
                sqlx::query("DELETE FROM job.schema_migrations WHERE version = $1")
                    .bind(last.version)
                    .execute(&h.db.pool())
                    .await
                    .unwrap();
                let id = enqueue(&h.store, Noop { n: 1 }).await;
                let worker = h.worker().build().unwrap().start();
                let said = format!(
                    "the job schema lacks migration {} `{}` (latest recorded: {})",
                    last.version,
                    last.name,
                    last.version - 1
                );
                eventually("the worker to say which migration it waits for", || async {
                    written.text().contains(&said).then_some(())
                })
                .await;
                // The check comes before every claim: the job is still waiting.
                assert_eq!(h.row(id).await.state, JobState::Available);
                assert_eq!(h.ledger.runs(id), 0);
                sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
                    .bind(last.version)
                    .bind(last.name)
                    .execute(&h.db.pool())
                    .await
                    .unwrap();
                h.reaches(id, JobState::Completed).await;
                assert_eq!(h.ledger.runs(id), 1);
                let report = worker.shutdown().await;
                assert!(report.finished_in_time);
                h.db.close().await;
            });
    });
    let logs = written.text();
    assert!(
        logs.contains("the job schema is migrated: claims start"),
        "{logs}"
    );
    assert_eq!(
        logs.matches("lacks migration").count(),
        1,
        "once a minute at most: {logs}"
    );
}
