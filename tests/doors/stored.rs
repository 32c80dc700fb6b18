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

/// JSON nested deeper than serde_json reads (128 levels) can be stored by SQL, through
/// `job.enqueue` as a payload or by any writer as a result or progress. Every operator read of
/// its row still answers, with the value as its text in a JSON string: `Admin::get`,
/// `Admin::list` (a dead-letter listing holding it too) and `PgStore::page`, for the whole
/// queue and for a tenant.
#[tokio::test]
async fn a_value_nested_past_what_serde_json_reads_is_read_back_as_its_text() {
    use job::{Admin, JobFilter, JobState, Store};
    use job_postgres::PageRequest;

    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    let deep = |levels: usize| format!(r#"{{"a":{}1{}}}"#, "[".repeat(levels), "]".repeat(levels));
    let payload: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.deep', $1::jsonb)")
        .bind(deep(200))
        .fetch_one(&pool)
        .await
        .unwrap();
    let finished: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.deep', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', attempt = 1, finalized_at = now(),
                result = $2::jsonb, progress = $2::jsonb, progress_at = now(),
                tenant = 'acme'
         WHERE id = $1",
    )
    .bind(finished)
    .bind(deep(300))
    .execute(&pool)
    .await
    .unwrap();
    // jsonb prints its text with a space after each colon.
    let text = |v: &Option<serde_json::Value>| match v {
        Some(serde_json::Value::String(text)) => text.clone(),
        other => panic!("not read as its text: {other:?}"),
    };
    let got = store.get(payload).await.unwrap().expect("the job");
    assert!(
        text(&Some(got.payload)).starts_with(r#"{"a": [[[[[["#),
        "the payload as its text"
    );
    let got = store.get(finished).await.unwrap().expect("the job");
    assert_eq!(text(&got.result), text(&got.progress));
    assert_eq!(text(&got.result).matches('[').count(), 300);

    let listed = store.list(&JobFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 2);
    let dead = store.list(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].state, JobState::Discarded);
    let page = store.page(&PageRequest::default()).await.unwrap();
    assert_eq!(page.jobs.len(), 2);
    let tenant = store.for_tenant("acme");
    assert_eq!(tenant.list(&JobFilter::default()).await.unwrap().len(), 1);
    assert_eq!(
        tenant
            .page(&PageRequest::default())
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
    db.close().await;
}

/// `job.breaker_record` is a door any role with the worker's grants calls with counts and
/// kinds of its own (migration 0046): what no worker sends is refused naming the kind (counts
/// out of a call's bounds, a kind twice, a kind the name rule refuses, over 1,000 kinds), the
/// table refuses counts out of bounds from any writer, and a window holding more attempts than
/// `bigint` can multiply by a percent (a crafted call once stored one, and every later call for
/// the kind failed with "bigint out of range") still counts, held at its bound, and trips.
#[tokio::test]
async fn a_breakers_counts_are_bounded_at_its_door_and_its_arithmetic_cannot_overflow() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let record = |kinds: Vec<&'static str>, attempts: Vec<i64>, failures: Vec<i64>, pct: i16| {
        let n = kinds.len();
        sqlx::query_as::<_, (String, String)>(
            "SELECT kind, reason FROM job.breaker_record($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(kinds)
        .bind(attempts)
        .bind(failures)
        .bind(vec![pct; n])
        .bind(vec![20_i32; n])
        .bind(vec![60_000_i64; n])
        .bind(vec![60_000_i64; n])
        .fetch_all(&pool)
    };
    let refused = |error: sqlx::Error| {
        let pg = error
            .as_database_error()
            .expect("a database error")
            .downcast_ref::<PgDatabaseError>();
        (pg.code().to_string(), pg.message().to_string())
    };
    for (attempts, failures) in [(-1, 0), (4_294_967_296, 0), (5, 6), (5, -1)] {
        let (code, message) = refused(
            record(
                vec!["doors.ok", "doors.crafted"],
                vec![1, attempts],
                vec![0, failures],
                1,
            )
            .await
            .expect_err("counts no worker sends"),
        );
        assert_eq!(code, "22023", "{message}");
        assert!(
            message.contains("counts for kind `doors.crafted`"),
            "{message}"
        );
    }
    let (code, message) = refused(
        sqlx::query("SELECT * FROM job.breaker_record('{doors.a}', '{1,2}', '{0}', '{1}', '{20}', '{60000}', '{60000}')")
            .execute(&pool)
            .await
            .expect_err("arrays of different lengths"),
    );
    assert_eq!(code, "22023", "{message}");
    for (kinds, says) in [
        (
            vec!["doors.twice", "doors.twice"],
            "kind `doors.twice` is named more than once",
        ),
        (
            vec!["doors.ok", "a kind"],
            "invalid breaker_record kind `a kind`: must not contain",
        ),
        (
            vec![""],
            "invalid breaker_record kind ``: must not be empty",
        ),
        // Shown as job.shown shows a value (migration 0059): it came back whole, newlines
        // and all, into the error and the server's log.
        (
            vec![Box::leak("x\n".repeat(100_000).into_boxed_str())],
            "invalid breaker_record kind `x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?x?… (200000 bytes)`: \
             must be at most 128 bytes",
        ),
    ] {
        let n = kinds.len();
        let (code, message) = refused(
            record(kinds, vec![1; n], vec![0; n], 1)
                .await
                .expect_err("a kind no worker sends"),
        );
        assert_eq!(code, "22023", "{message}");
        assert!(message.contains(says), "{message}");
    }
    let many: Vec<String> = (0..1001).map(|i| format!("doors.k{i}")).collect();
    let (code, message) = refused(
        sqlx::query("SELECT * FROM job.breaker_record($1, $2, $2, $3, $4, $5, $5)")
            .bind(&many)
            .bind(vec![0_i64; 1001])
            .bind(vec![1_i16; 1001])
            .bind(vec![20_i32; 1001])
            .bind(vec![60_000_i64; 1001])
            .execute(&pool)
            .await
            .expect_err("more kinds than a call takes"),
    );
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("1001 kinds in one call"), "{message}");
    // Settings out of the table's bounds are refused naming the argument and the kind
    // (migration 0059): the table's CHECKs named a constraint and showed the whole row.
    for (settings, says) in [
        (
            "'{50,0}', '{20,20}', '{60000,60000}', '{60000,60000}'",
            "argument `p_percent` for kind `doors.b`: must be 1 to 100, got 0",
        ),
        (
            "'{50,50}', '{20,0}', '{60000,60000}', '{60000,60000}'",
            "argument `p_min_attempts` for kind `doors.b`: must be 1 to 1000000, got 0",
        ),
        (
            "'{50,50}', '{20,20}', '{60000,NULL}', '{60000,60000}'",
            "argument `p_window_ms` for kind `doors.b`: must be 1000 to 2592000000 (1 s to 30 \
             days), got null",
        ),
        (
            "'{50,50}', '{20,20}', '{60000,60000}', '{999,60000}'",
            "argument `p_cool_down_ms` for kind `doors.a`: must be 1000 to 2592000000 (1 s to \
             30 days), got 999",
        ),
    ] {
        let (code, message) = refused(
            sqlx::query(&format!(
                "SELECT * FROM job.breaker_record('{{doors.a,doors.b}}', '{{1,1}}', '{{0,0}}', \
                 {settings})"
            ))
            .execute(&pool)
            .await
            .expect_err("settings out of bounds"),
        );
        assert_eq!(code, "22023", "{message}");
        assert!(message.contains(says), "{message}");
    }
    let breakers: i64 = sqlx::query_scalar("SELECT count(*) FROM job.breakers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(breakers, 0, "nothing of a refused call is kept");

    // A window at the sums' bound, 2^62 attempts (calls of the largest counts that never
    // trip reach it in days; here the owner's raw write): a worker's next call still counts,
    // is held at the bound, and its failures still trip the breaker.
    record(vec!["doors.huge"], vec![1], vec![0], 50)
        .await
        .unwrap();
    sqlx::query("UPDATE job.breakers SET attempts = 4611686018427387904 WHERE kind = 'doors.huge'")
        .execute(&pool)
        .await
        .unwrap();
    let tripped = record(vec!["doors.huge"], vec![4_294_967_295], vec![10], 50)
        .await
        .expect("the call counts");
    assert!(tripped.is_empty(), "{tripped:?}");
    let (attempts, failures): (i64, i64) =
        sqlx::query_as("SELECT attempts, failures FROM job.breakers WHERE kind = 'doors.huge'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((attempts, failures), (4_611_686_018_427_387_904, 10));
    sqlx::query("UPDATE job.breakers SET failures = 4000000000000000000 WHERE kind = 'doors.huge'")
        .execute(&pool)
        .await
        .unwrap();
    let tripped = record(vec!["doors.huge"], vec![1], vec![1], 50)
        .await
        .expect("the call counts");
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    assert!(
        tripped[0].1.contains("attempts failed (86%)"),
        "{}",
        tripped[0].1
    );

    // A trips count at bigint's bound stays there, and the trip is still made.
    record(vec!["doors.trips"], vec![1], vec![0], 50)
        .await
        .unwrap();
    sqlx::query("UPDATE job.breakers SET trips = 9223372036854775807 WHERE kind = 'doors.trips'")
        .execute(&pool)
        .await
        .unwrap();
    let tripped = record(vec!["doors.trips"], vec![20], vec![20], 50)
        .await
        .expect("a trip at the trips count's bound");
    assert_eq!(tripped.len(), 1, "{tripped:?}");

    // A worker with more kinds than one call takes sends them in several, all or nothing.
    let counts: Vec<job::BreakerCount> = (0..1500)
        .map(|i| job::BreakerCount {
            kind: format!("doors.many{i:04}"),
            breaker: job::Breaker::new(50),
            attempts: 1,
            failures: 0,
        })
        .collect();
    job::Store::record_breakers(&db.store(), &counts)
        .await
        .expect("1,500 kinds of one worker");
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job.breakers WHERE kind LIKE 'doors.many%'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(recorded, 1500);

    for counts in [
        "attempts = -5, failures = 0",
        "attempts = 4611686018427387905",
    ] {
        let error = sqlx::query(&format!("UPDATE job.breakers SET {counts}"))
            .execute(&pool)
            .await
            .expect_err("the table refuses counts out of bounds");
        let pg = error
            .as_database_error()
            .expect("a database error")
            .downcast_ref::<PgDatabaseError>();
        assert_eq!(pg.constraint(), Some("breakers_counts_check"), "{counts}");
    }
    db.close().await;
}
