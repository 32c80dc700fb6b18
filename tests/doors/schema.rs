//! The schema installs and upgrades without Rust: `psql -f job-postgres/schema.sql` gives the
//! very schema `PgStore::migrate` gives, runs again as a no-op or as an upgrade, and keeps the
//! books the Rust migrator reads.

use std::process::Command;

use job_testkit::TestDb;
use sqlx::PgPool;

use crate::support::tool;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/job-postgres/schema.sql");

fn psql_file(db: &TestDb, file: &str) {
    let out = Command::new(tool("psql"))
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &crate::support::libpq_url(db),
            "-f",
            file,
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql -f {file} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dump(db: &TestDb) -> String {
    let out = Command::new(tool("pg_dump"))
        .args([
            "--schema-only",
            "--schema=job",
            "--no-owner",
            "-d",
            &crate::support::libpq_url(db),
        ])
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // pg_dump's `\restrict <random key>` lines differ from one dump to the next.
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts that two dumps are the same, showing the first line that differs.
fn same_schema(a: &str, b: &str) {
    if let Some((n, (x, y))) = a
        .lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
    {
        panic!(
            "the schemas differ at line {}:\n  psql: {x}\n  rust: {y}",
            n + 1
        );
    }
    assert_eq!(
        a.lines().count(),
        b.lines().count(),
        "the schemas differ in length"
    );
}

async fn applied(pool: &PgPool) -> Vec<(i32, String)> {
    sqlx::query_as("SELECT version, name FROM job.schema_migrations ORDER BY version")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn psql_installs_the_schema_the_rust_migrator_makes_and_upgrades_it() {
    let by_rust = TestDb::new().await;
    let by_psql = TestDb::new().await;
    let pool = by_psql.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    psql_file(&by_psql, SCRIPT);
    same_schema(&dump(&by_psql), &dump(&by_rust));
    let expected: Vec<(i32, String)> = job_postgres::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_owned()))
        .collect();
    assert_eq!(applied(&pool).await, expected);

    // Again: nothing to do. Then the Rust migrator agrees that nothing is left.
    psql_file(&by_psql, SCRIPT);
    by_psql.store().migrate().await.unwrap();
    assert_eq!(applied(&pool).await, expected);

    // An upgrade: a database at migration 3, as an older release left it.
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    by_psql.store().migrate().await.unwrap(); // the whole schema ...
    sqlx::raw_sql(
        "DROP SCHEMA job CASCADE; CREATE SCHEMA job;
         CREATE TABLE job.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
                                             applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .execute(&pool)
    .await
    .unwrap();
    for m in job_postgres::MIGRATIONS.iter().filter(|m| m.version <= 3) {
        sqlx::raw_sql(m.sql).execute(&pool).await.unwrap();
        sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
            .bind(m.version)
            .bind(m.name)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::raw_sql("INSERT INTO job.jobs (kind, payload, run_at) VALUES ('old', '{}', 'infinity')")
        .execute(&pool)
        .await
        .unwrap();
    psql_file(&by_psql, SCRIPT);
    assert_eq!(applied(&pool).await, expected);
    same_schema(&dump(&by_psql), &dump(&by_rust));
    by_rust.close().await;
    by_psql.close().await;
}
