//! What the tables themselves bound, whichever door a row comes through.

use job_testkit::TestDb;
use sqlx::postgres::PgDatabaseError;

/// A step output is bounded by the table (migration 0018), as a result and a progress report
/// are: a writer other than the worker, which measures it first, cannot store any size.
#[tokio::test]
async fn a_step_output_over_its_bound_is_refused_by_the_table() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.any', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let insert = |name: &'static str, chars: i32| {
        sqlx::query(
            "INSERT INTO job.steps (job_id, name, output, attempt) \
             VALUES ($1, $2, to_jsonb(repeat('x', $3)), 1)",
        )
        .bind(id)
        .bind(name)
        // The stored text is the string and its two quotes.
        .bind(chars - 2)
        .execute(&pool)
    };
    insert("at the bound", 2 * 1024 * 1024)
        .await
        .expect("an output of 2 MiB as stored is kept");
    let error = insert("over it", 2 * 1024 * 1024 + 1)
        .await
        .expect_err("an output over 2 MiB as stored is refused");
    let pg = error
        .as_database_error()
        .expect("a database error")
        .downcast_ref::<PgDatabaseError>();
    assert_eq!(
        (pg.code(), pg.constraint()),
        ("23514", Some("steps_output_check")),
        "{}",
        pg.message()
    );
    db.close().await;
}
