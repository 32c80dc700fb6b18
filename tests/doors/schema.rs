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

/// Runs `psql -f file` without `-v ON_ERROR_STOP`: the way a DBA may well run it. Returns
/// psql's exit code and what it printed to stderr.
fn psql_file_as_given(db: &TestDb, file: &str) -> (Option<i32>, String) {
    let out = Command::new(tool("psql"))
        .args(["-X", "-q", "-d", &crate::support::libpq_url(db), "-f", file])
        .output()
        .expect("psql runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A migration that fails in the middle of the script (here 0012, whose table is in the way)
/// is not followed by later ones. psql stops at it, without being told to (the script's first
/// line sets ON_ERROR_STOP); and a script without that line, run on past the failure, has every
/// later migration refuse for the missing one. Once what was in the way is gone, the script
/// upgrades the database to the very schema the Rust migrator makes.
#[tokio::test]
async fn a_failed_migration_in_the_script_is_not_followed_by_later_ones() {
    let by_rust = TestDb::new().await;
    let by_psql = TestDb::new().await;
    let pool = by_psql.pool();
    sqlx::raw_sql(
        "DROP SCHEMA job CASCADE; CREATE SCHEMA job;
         CREATE TABLE job.schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
                                             applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .execute(&pool)
    .await
    .unwrap();
    for m in job_postgres::MIGRATIONS.iter().filter(|m| m.version < 12) {
        sqlx::raw_sql(m.sql).execute(&pool).await.unwrap();
        sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
            .bind(m.version)
            .bind(m.name)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::raw_sql("CREATE TABLE job.ordering_wake (in_the_way integer)")
        .execute(&pool)
        .await
        .unwrap();
    let before: Vec<(i32, String)> = applied(&pool).await;
    assert_eq!(before.last().map(|(v, _)| *v), Some(11));

    // As shipped: psql stops at 0012's error (exit code 3), whatever it was told.
    let (code, stderr) = psql_file_as_given(&by_psql, SCRIPT);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(stderr.matches("ERROR:").count(), 1, "{stderr}");
    assert!(
        stderr.contains("relation \"ordering_wake\" already exists"),
        "{stderr}"
    );
    assert_eq!(applied(&pool).await, before);

    // Without its first line, psql goes on past the error: each later migration refuses.
    let script = std::fs::read_to_string(SCRIPT).unwrap();
    let going_on = script
        .strip_prefix("\\set ON_ERROR_STOP on\n")
        .expect("the script starts by setting ON_ERROR_STOP");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("schema.sql");
    std::fs::write(&file, going_on).unwrap();
    let (code, stderr) = psql_file_as_given(&by_psql, file.to_str().unwrap());
    assert_eq!(code, Some(0), "psql without ON_ERROR_STOP: {stderr}");
    for m in job_postgres::MIGRATIONS.iter().filter(|m| m.version > 12) {
        let refusal = format!(
            "job migration {} `{}` was not applied: migration 12, which comes before it, is not \
             recorded",
            m.version, m.name
        );
        assert!(stderr.contains(&refusal), "no `{refusal}` in {stderr}");
    }
    assert_eq!(applied(&pool).await, before);

    // What was in the way gone, the script upgrades the database.
    sqlx::raw_sql("DROP TABLE job.ordering_wake")
        .execute(&pool)
        .await
        .unwrap();
    psql_file(&by_psql, SCRIPT);
    let expected: Vec<(i32, String)> = job_postgres::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_owned()))
        .collect();
    assert_eq!(applied(&pool).await, expected);
    same_schema(&dump(&by_psql), &dump(&by_rust));
    by_rust.close().await;
    by_psql.close().await;
}
