//! One set of rules at every door: the typed Rust helper (checked before sending, and by the
//! database when the check is skipped), `job.enqueue`, and a raw INSERT. Each bad input is
//! refused at each door with an error naming it, and nothing is written.

use chrono::{DateTime, TimeZone, Utc};
use job::{Admin, Enqueue, EnqueueError, JobFilter, Store};
use job_core::{NewJob, RunAt};
use job_testkit::TestDb;
use serde_json::json;

use crate::support::*;

/// A payload of `{"pad": "xx…"}` whose JSON text, as PostgreSQL prints it
/// (`{"pad": "…"}`), is `bytes` long.
fn padded(bytes: usize) -> serde_json::Value {
    json!({ "pad": "x".repeat(bytes - r#"{"pad": ""}"#.len()) })
}

#[tokio::test]
async fn a_payload_that_is_not_a_json_object_is_refused_at_every_door() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    for value in [
        json!([77, true]),
        json!("sk_live_123"),
        json!(null),
        json!(42),
        json!(true),
    ] {
        let text = value.to_string();
        let typed = Enqueue::new(AnyPayload(value.clone())).enqueue(&pool).await;
        assert_eq!(named(typed), "payload", "typed helper, {text}");
        let raw = NewJob::new("doors.any", text.clone());
        assert_eq!(named_by_store(&store, raw.clone()).await, "payload");
        // Unchecked on the Rust side: the database refuses, and the error still names it.
        let unchecked = job_postgres::enqueue(&pool, &raw).await;
        assert_eq!(named(unchecked), "payload", "unchecked, {text}");
        let quoted = literal(&text);
        refused_by_sql(
            &pool,
            &format!("SELECT job.enqueue('doors.any', {quoted}::jsonb)"),
            "22023",
            "payload",
        )
        .await;
        refused_by_sql(
            &pool,
            &format!("INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', {quoted}::jsonb)"),
            "23514",
            "payload",
        )
        .await;
    }
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    db.close().await;
}

#[tokio::test]
async fn payloads_over_the_limit_are_refused_at_every_door_and_the_limit_itself_is_not() {
    let db = TestDb::new().await;
    let pool = db.pool();
    const MIB: usize = 1024 * 1024;
    for bytes in [MIB + 1, 2 * MIB, 20 * MIB, 50 * MIB] {
        let value = padded(bytes);
        match Enqueue::new(AnyPayload(value.clone())).enqueue(&pool).await {
            Err(EnqueueError::PayloadTooLarge { size, limit, .. }) => {
                assert_eq!(
                    (size, limit),
                    (bytes, MIB),
                    "the database's measure and limit"
                )
            }
            other => panic!("{bytes} bytes: expected PayloadTooLarge, got {other:?}"),
        }
        let text = value.to_string();
        for statement in [
            "SELECT job.enqueue('doors.any', $1::text::jsonb)",
            "INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', $1::text::jsonb)",
        ] {
            let error = sqlx::query(statement)
                .bind(&text)
                .execute(&pool)
                .await
                .expect_err(statement);
            let (code, message) = db_error(error);
            assert!(code == "22023" || code == "23514", "{statement}: {code}");
            assert!(
                message.contains("`payload`")
                    && message.contains(&format!("is {bytes} bytes, over the limit of {MIB}")),
                "{statement}: {message}"
            );
        }
    }
    assert_eq!(rows(&pool).await, 0, "nothing was written");

    // Exactly the limit is fine, at every door.
    let at_limit = padded(MIB);
    Enqueue::new(AnyPayload(at_limit.clone()))
        .enqueue(&pool)
        .await
        .unwrap();
    for statement in [
        "SELECT job.enqueue('doors.any', $1::text::jsonb)",
        "INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', $1::text::jsonb)",
    ] {
        sqlx::query(statement)
            .bind(at_limit.to_string())
            .execute(&pool)
            .await
            .unwrap();
    }
    assert_eq!(rows(&pool).await, 3);
    db.close().await;
}

#[tokio::test]
async fn the_payload_limit_is_configured_once_for_every_door() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::query("UPDATE job.settings SET payload_limit = 2097152")
        .execute(&pool)
        .await
        .unwrap();
    let big = padded(1536 * 1024);
    Enqueue::new(AnyPayload(big.clone()))
        .enqueue(&pool)
        .await
        .expect("the typed helper follows the database's limit");
    sqlx::query("SELECT job.enqueue('doors.any', $1::text::jsonb)")
        .bind(big.to_string())
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE job.settings SET payload_limit = 100")
        .execute(&pool)
        .await
        .unwrap();
    match Enqueue::new(AnyPayload(padded(101))).enqueue(&pool).await {
        Err(EnqueueError::PayloadTooLarge { size, limit, .. }) => {
            assert_eq!((size, limit), (101, 100))
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    refused_by_sql(
        &pool,
        &format!(
            "INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{}')",
            padded(101)
        ),
        "23514",
        "payload",
    )
    .await;
    // A tighter limit of the client's own is checked before sending.
    let client = Enqueue::new(AnyPayload(padded(50)))
        .payload_limit(40)
        .enqueue(&pool)
        .await;
    assert!(matches!(
        client,
        Err(EnqueueError::PayloadTooLarge { limit: 40, .. })
    ));
    assert_eq!(rows(&pool).await, 2);
    db.close().await;
}

#[tokio::test]
async fn a_nul_in_a_payload_is_refused_naming_the_payload() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let typed = Enqueue::new(AnyPayload(json!({ "note": "a\u{0}b" })))
        .enqueue(&pool)
        .await;
    assert_eq!(named(typed), "payload");
    let raw = NewJob::new("doors.any", r#"{"note": "a\u0000b"}"#);
    assert_eq!(named_by_store(&db.store(), raw).await, "payload");
    // An escaped backslash before `u0000` is no NUL.
    Enqueue::new(AnyPayload(json!({ "note": "a\\u0000b" })))
        .enqueue(&pool)
        .await
        .unwrap();
    // PostgreSQL's jsonb cannot hold one: the other doors never get as far as a row.
    for statement in [
        r#"SELECT job.enqueue('doors.any', '{"note": "a\u0000b"}')"#,
        r#"INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{"note": "a\u0000b"}')"#,
    ] {
        let (code, _) = db_error(sqlx::query(statement).execute(&pool).await.unwrap_err());
        assert_eq!(code, "22P05", "{statement}");
    }
    assert_eq!(rows(&pool).await, 1);
    db.close().await;
}

#[tokio::test]
async fn infinite_and_out_of_range_times_are_refused_at_every_door() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let far = Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap();
    for at in [DateTime::<Utc>::MAX_UTC, DateTime::<Utc>::MIN_UTC, far] {
        let run_at = Enqueue::new(AnyPayload(json!({})))
            .run_at(at)
            .enqueue(&pool)
            .await;
        assert_eq!(named(run_at), "run_at", "{at}");
        let deadline = Enqueue::new(AnyPayload(json!({})))
            .deadline(at)
            .enqueue(&pool)
            .await;
        assert_eq!(named(deadline), "deadline", "{at}");
        let mut unchecked = NewJob::new("doors.any", "{}");
        unchecked.run_at = RunAt::At(at);
        assert_eq!(
            named(job_postgres::enqueue(&pool, &unchecked).await),
            "run_at"
        );
    }
    for time in [
        "infinity",
        "-infinity",
        "10000-01-01 00:00:00+00",
        "0001-01-01 00:00:00+00 BC",
    ] {
        for argument in ["run_at", "deadline"] {
            refused_by_sql(
                &pool,
                &format!("SELECT job.enqueue('doors.any', '{{}}', {argument} => '{time}')"),
                "22023",
                argument,
            )
            .await;
        }
        for column in ["run_at", "deadline", "created_at"] {
            refused_by_sql(
                &pool,
                &format!(
                    "INSERT INTO job.jobs (kind, payload, {column}) VALUES ('doors.any', '{{}}', '{time}')"
                ),
                "23514",
                column,
            )
            .await;
        }
    }
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    db.close().await;
}

#[tokio::test]
async fn get_list_and_stats_read_every_row_the_table_can_hold() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();
    // The extremes the constraints allow (the second row's deadline set after its insert,
    // which refuses a deadline the job could never start before: migration 0033), and what a
    // raw INSERT can still put in the error history.
    sqlx::raw_sql(
        r#"INSERT INTO job.jobs (kind, payload, run_at, deadline, created_at) VALUES
             ('doors.any', '{}', '0001-01-01 00:00:00+00', '9999-12-31 23:59:59.999999+00',
              '0001-01-01 00:00:00+00'),
             ('doors.any', '{}', '9999-12-31 23:59:59.999999+00', NULL,
              '9999-12-31 23:59:59.999999+00');
           UPDATE job.jobs SET deadline = '0001-01-01 00:00:00+00'
           WHERE run_at = '9999-12-31 23:59:59.999999+00';
           INSERT INTO job.jobs (kind, payload, errors) VALUES
             ('doors.any', '{}', '[1, {"attempt": "x"}, {"attempt": 1, "at": "2026-01-01T00:00:00Z", "class": "error", "message": "m"}]');"#,
    )
    .execute(&pool)
    .await
    .unwrap();
    let listed = store.list(&JobFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 3);
    for row in &listed {
        assert_eq!(store.get(row.id).await.unwrap().as_ref(), Some(row));
    }
    let history = &listed[2].errors;
    assert_eq!(history.len(), 3);
    assert_eq!(history[0].class, "unreadable");
    assert_eq!(history[2].message, "m");
    let stats = store.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(stats.in_state(job::JobState::Available), 3);
    assert!(stats.oldest_available_age.unwrap().as_secs() > 60 * 365 * 24 * 3600);
    db.close().await;
}

#[tokio::test]
async fn an_update_that_sets_an_admitted_column_is_checked_and_others_are_not() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let id = Enqueue::new(AnyPayload(json!({ "n": 1 })))
        .enqueue(&pool)
        .await
        .unwrap();
    for (column, value) in [
        ("payload", "'[1]'"),
        ("queue", "E'a\\tb'"),
        ("kind", "E'zero\\u200bwidth'"),
        ("tags", "ARRAY['ok', NULL]"),
        ("tenant", "''"),
    ] {
        refused_by_sql(
            &pool,
            &format!("UPDATE job.jobs SET {column} = {value} WHERE id = {id}"),
            "23514",
            column,
        )
        .await;
    }
    sqlx::query("UPDATE job.jobs SET priority = 3, payload = '{\"n\": 2}' WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    let row = db.store().get(id).await.unwrap().unwrap();
    assert_eq!((row.priority, row.payload), (3, json!({ "n": 2 })));
    db.close().await;
}

/// Asserts that `statement` is refused by the check constraint `constraint`.
async fn refused_by_constraint(pool: &sqlx::PgPool, statement: &str, constraint: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let db = error.as_database_error().expect("a database error");
    assert_eq!(db.code().as_deref(), Some("23514"), "{statement}: {db}");
    assert_eq!(db.constraint(), Some(constraint), "{statement}: {db}");
}

#[tokio::test]
async fn raw_writes_a_worker_or_a_reader_would_fail_on_are_refused() {
    // What a role with table privileges could store by hand and a worker then failed on for
    // every claim of its queue or every batch the row was in (counters at the integer's end,
    // a running row at attempt 0), or a reader failed or panicked on (tags not starting at
    // index 1, infinite times).
    let db = TestDb::new().await;
    let pool = db.pool();
    let insert = |columns: &str, values: &str| {
        format!("INSERT INTO job.jobs (kind, payload, {columns}) VALUES ('doors.any', '{{}}', {values})")
    };
    for (statement, constraint) in [
        (insert("attempt", "2147483647"), "jobs_attempt_check"),
        (insert("snoozes", "2147483647"), "jobs_snoozes_check"),
        (
            insert(
                "state, attempt, lock_token, locked_until, locked_by",
                "'running', 0, gen_random_uuid(), now() + interval '1 minute', 'w'",
            ),
            "jobs_attempt_check",
        ),
        (insert("tags", "'[5:5]={a}'"), "jobs_tags_check"),
        (
            insert("progress_at", "'infinity'"),
            "jobs_progress_at_check",
        ),
        (
            insert(
                "state, attempt, lock_token, locked_until, locked_by, stuck_since",
                "'running', 1, gen_random_uuid(), now() + interval '1 minute', 'w', '-infinity'",
            ),
            "jobs_stuck_since_check",
        ),
        (
            "INSERT INTO job.pauses (scope, name, paused_at) VALUES ('queue', 'q', '-infinity')"
                .to_owned(),
            "pauses_paused_at_check",
        ),
        (
            "INSERT INTO job.pauses (scope, name, resume_at) VALUES ('queue', 'q', 'infinity')"
                .to_owned(),
            "pauses_resume_at_check",
        ),
        (
            "INSERT INTO job.leaders (role, holder, until) VALUES ('r', 'h', 'infinity')"
                .to_owned(),
            "leaders_until_check",
        ),
        (
            insert(
                "state, attempt, lock_token, locked_until, locked_by",
                "'running', 1, gen_random_uuid(), now() + interval '1 minute', repeat('w', 129)",
            ),
            "jobs_locked_by_check",
        ),
        (
            "INSERT INTO job.leaders (role, holder, until) VALUES ('r', repeat('h', 513), now())"
                .to_owned(),
            "leaders_holder_check",
        ),
    ] {
        refused_by_constraint(&pool, &statement, constraint).await;
    }
    // Through the SQL door too, and what the bounds leave is written.
    for tags in [r#"[["a"]]"#, "[[]]", r#"[["a", "b"]]"#] {
        refused_by_sql(
            &pool,
            &format!(
                r#"SELECT job.enqueue_many('[{{"kind": "doors.any", "payload": {{}}, "tags": {tags}}}]')"#
            ),
            "22023",
            "jobs[0].tags",
        )
        .await;
    }
    refused_by_sql(
        &pool,
        "SELECT job.enqueue('doors.any', '{}', tags => '[5:5]={a}')",
        "22023",
        "tags",
    )
    .await;
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    // An integer written with a zero fraction is the integer; another fraction is refused.
    let id: i64 = sqlx::query_scalar(
        r#"SELECT * FROM job.enqueue_many('[{"kind": "doors.any", "payload": {},
               "priority": 2.0, "max_attempts": 3.00, "payload_version": 1.0}]')"#,
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (priority, attempts): (i16, i32) =
        sqlx::query_as("SELECT priority, max_attempts FROM job.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((priority, attempts), (2, 3));
    refused_by_sql(
        &pool,
        r#"SELECT job.enqueue_many('[{"kind": "doors.any", "payload": {}, "priority": 1.5}]')"#,
        "22023",
        "jobs[0].priority",
    )
    .await;
    sqlx::raw_sql(&insert(
        "attempt, snoozes, tags",
        "2147483646, 2147483646, '{a}'",
    ))
    .execute(&pool)
    .await
    .unwrap();
    db.close().await;
}

#[tokio::test]
async fn bulk_sql_enqueues_take_their_ordering_keys_locks_in_one_order() {
    // A transaction holds key a (it enqueued a's job, as the README says: in key order). A
    // bulk enqueue of [b, a] then waits for a. Taking its keys row by row, in the array's
    // order, it held b meanwhile, and the first transaction's enqueue of b deadlocked with it.
    let db = TestDb::new().await;
    let pool = db.pool();
    let bulk = |keys: &[&str]| {
        let jobs: Vec<_> = keys
            .iter()
            .map(|k| json!({"kind": "doors.any", "payload": {}, "ordering_key": k}))
            .collect();
        format!(
            "SELECT count(*) FROM job.enqueue_many({})",
            literal(&json!(jobs).to_string())
        )
    };
    let mut first = pool.begin().await.unwrap();
    sqlx::raw_sql(&bulk(&["key:a"]))
        .execute(&mut *first)
        .await
        .unwrap();
    let waiting = {
        let (pool, statement) = (pool.clone(), bulk(&["key:b", "key:a"]));
        tokio::spawn(async move { sqlx::raw_sql(&statement).execute(&pool).await })
    };
    crate::common::eventually("the bulk enqueue to wait for key a", || async {
        let waits: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                            WHERE wait_event_type = 'Lock' AND query LIKE '%key:b%')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        waits.then_some(())
    })
    .await;
    sqlx::raw_sql(&bulk(&["key:b"]))
        .execute(&mut *first)
        .await
        .expect("no deadlock: the waiting enqueue holds no key yet");
    first.commit().await.unwrap();
    waiting.await.unwrap().expect("the waiting enqueue goes on");
    assert_eq!(rows(&pool).await, 4);
    db.close().await;
}

#[tokio::test]
async fn a_change_of_the_payload_limit_holds_writes_not_reads() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql("INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{}')")
        .execute(&pool)
        .await
        .unwrap();
    let mut change = pool.begin().await.unwrap();
    sqlx::query("UPDATE job.settings SET payload_limit = 2097152")
        .execute(&mut *change)
        .await
        .unwrap();
    // A bound on the wait, not a timing: a read that waited for the change's lock fails.
    let mut reader = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '300ms'")
        .execute(&mut *reader)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(&mut *reader)
        .await
        .expect("a read while the limit changes");
    assert_eq!(n, 1);
    let write = sqlx::query("INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{}')")
        .execute(&mut *reader)
        .await
        .expect_err("writes wait for the change");
    assert_eq!(
        write.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("55P03"),
        "{write}"
    );
    reader.rollback().await.unwrap();
    change.commit().await.unwrap();
    db.close().await;
}

#[tokio::test]
async fn raw_writes_are_bounded_as_the_doors_bound_them() {
    // Migration 0025: what a raw write could still store unbounded (an error history of any
    // size, a kind owner's kind, a key waiting for the stager), or store and then fail every
    // use of (a trace that is no traceparent, a compensating kind or queue no job may have),
    // what the SQL door let through (the unique scope only a claim gives), and the settings
    // row whose deletion turned the payload limit off.
    let db = TestDb::new().await;
    let pool = db.pool();
    let id = Enqueue::new(AnyPayload(json!({})))
        .enqueue(&pool)
        .await
        .unwrap();
    let many = |n: usize| format!("(SELECT jsonb_agg(i) FROM generate_series(1, {n}) i)");
    for statement in [
        format!(
            "UPDATE job.jobs SET errors = jsonb_build_array(repeat('x', 3 * 1024 * 1024)) WHERE id = {id}"
        ),
        format!(
            "UPDATE job.jobs SET errors = {} WHERE id = {id}",
            many(job::MAX_ERROR_HISTORY + 1)
        ),
        format!(
            "INSERT INTO job.jobs (kind, payload, errors) VALUES ('doors.any', '{{}}', {})",
            many(job::MAX_ERROR_HISTORY + 1)
        ),
    ] {
        refused_by_sql(&pool, &statement, "23514", "errors").await;
    }
    // What job.push_error makes at its largest is not refused: a full history of entries
    // whose messages are as long as the Rust side lets them be, each byte a control
    // character that the JSON text escapes in six.
    let (entries, bytes): (i32, i32) = sqlx::query_as(&format!(
        "WITH e AS (SELECT jsonb_build_object('attempt', 2147483646, 'at', now(),
                        'class', 'lease_expired', 'message', repeat(chr(1), {})) AS entry)
         UPDATE job.jobs SET errors = job.push_error(
             (SELECT jsonb_agg(e.entry) FROM e, generate_series(1, {})), (SELECT entry FROM e))
         WHERE id = {id}
         RETURNING jsonb_array_length(errors), octet_length(errors::text)",
        job::MAX_ERROR_MESSAGE,
        job::MAX_ERROR_HISTORY,
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(entries as usize, job::MAX_ERROR_HISTORY);
    assert!(bytes > 900_000, "{bytes}");
    let row = db.store().get(id).await.unwrap().unwrap();
    assert_eq!(row.errors.len(), job::MAX_ERROR_HISTORY);
    assert_eq!(row.errors[0].message.len(), job::MAX_ERROR_MESSAGE);

    // The trace: a W3C traceparent as the Rust side writes and reads it, or none.
    let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for bad in [
        "z".repeat(55),
        good.to_uppercase(),
        good.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32)),
        good.replace("00f067aa0ba902b7", &"0".repeat(16)),
        good.replacen("00-", "01-", 1),
        good.replace("-00f0", "x00f0"),
    ] {
        refused_by_sql(
            &pool,
            &format!(
                "INSERT INTO job.jobs (kind, payload, trace_context) VALUES ('doors.any', '{{}}', '{bad}')"
            ),
            "23514",
            "trace_context",
        )
        .await;
        refused_by_sql(
            &pool,
            &format!("UPDATE job.jobs SET trace_context = '{bad}' WHERE id = {id}"),
            "23514",
            "trace_context",
        )
        .await;
    }
    sqlx::raw_sql(&format!(
        "UPDATE job.jobs SET trace_context = '{good}' WHERE id = {id}"
    ))
    .execute(&pool)
    .await
    .unwrap();

    // Names outside job.jobs.
    for (statement, constraint) in [
        (
            "INSERT INTO job.kind_owners (kind, owner) VALUES (repeat('k', 129), 'team')",
            "kind_owners_kind_check",
        ),
        (
            "INSERT INTO job.kind_owners (kind, owner) VALUES ('', 'team')",
            "kind_owners_kind_check",
        ),
        (
            "INSERT INTO job.ordering_wake (ordering_key) VALUES (repeat('k', 513))",
            "ordering_wake_ordering_key_check",
        ),
    ] {
        refused_by_constraint(&pool, statement, constraint).await;
    }
    for (values, column) in [
        ("'doors.any', 'refund it', 'default'", "compensate_kind"),
        ("'doors.any', 'refund', E'q\\u200b'", "compensate_queue"),
        ("E'doors\\tany', 'refund', 'default'", "kind"),
        (
            "'doors.any', repeat('r', 129), 'default'",
            "compensate_kind",
        ),
    ] {
        refused_by_sql(
            &pool,
            &format!(
                "INSERT INTO job.compensations (kind, compensate_kind, compensate_queue) VALUES ({values})"
            ),
            "23514",
            column,
        )
        .await;
    }
    sqlx::raw_sql(
        "INSERT INTO job.compensations (kind, compensate_kind, compensate_queue)
             VALUES ('doors.any', 'doors.refund', 'default')",
    )
    .execute(&pool)
    .await
    .unwrap();
    refused_by_sql(
        &pool,
        "UPDATE job.compensations SET compensate_kind = 'doors refund'",
        "23514",
        "compensate_kind",
    )
    .await;

    // The unique scope 'spent' is a claim's to give.
    let unique = |scope: &str| {
        format!(
            "SELECT * FROM job.enqueue_unique('doors.any', 'default', 0::smallint, '{{}}', 1, 25,
                 now(), NULL, 'key:1', {scope}, false, '{{}}', NULL)"
        )
    };
    for scope in ["'spent'", "NULL"] {
        refused_by_sql(&pool, &unique(scope), "22023", "p_unique_scope").await;
    }
    sqlx::raw_sql(&unique("'started'"))
        .execute(&pool)
        .await
        .unwrap();

    // The settings row stays, and with it the payload limit.
    for statement in ["DELETE FROM job.settings", "TRUNCATE job.settings"] {
        let (code, message) = db_error(sqlx::raw_sql(statement).execute(&pool).await.unwrap_err());
        assert_eq!(code, "23001", "{statement}: {message}");
        assert!(message.contains("job.settings"), "{message}");
    }
    refused_by_sql(
        &pool,
        &format!(
            "INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{}')",
            padded(1024 * 1024 + 1)
        ),
        "23514",
        "payload",
    )
    .await;
    assert_eq!(rows(&pool).await, 2);
    db.close().await;
}

#[tokio::test]
async fn rows_raw_writes_could_store_stop_no_claim_no_rescue_and_no_ordering_key() {
    // Each of these passed every check, then failed a statement the framework runs for a whole
    // queue or for the whole table, on every pass (migration 0027).
    let db = TestDb::new().await;
    let pool = db.pool();
    let store = db.store();

    // 1. A waiting row at the last attempt the check leaves: the claim counted it past the
    //    bound, and the claim of every job of its queue failed.
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, payload, attempt) VALUES ('doors.any', '{}', 2147483646);
         INSERT INTO job.jobs (kind, payload) VALUES ('doors.any', '{\"n\": 1}');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let claimed = store
        .claim(&job_core::ClaimRequest {
            queue: "default".into(),
            kinds: vec![job_core::ClaimKind {
                kind: "doors.any".into(),
                max_version: 1,
                lease: std::time::Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 10,
            worker_id: "w".into(),
        })
        .await
        .expect("the claim passes over the row it cannot count");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, r#"{"n": 1}"#);

    // 2. A running row whose unique scope is still `started`: a second job of the key is let
    //    in, and the rescue of the running row then broke the unique index, for every kind.
    refused_by_constraint(
        &pool,
        "INSERT INTO job.jobs (kind, payload, state, attempt, lock_token, locked_until,
                               unique_key, unique_scope)
         VALUES ('doors.unique', '{}', 'running', 1, gen_random_uuid(),
                 now() - interval '1 hour', 'key1', 'started')",
        "jobs_running_scope_check",
    )
    .await;

    // 3. A head of an ordering key that leaves its key, or goes back to `pending`, by a raw
    //    UPDATE: the key's next job waited for the next enqueue of the key.
    for leave in [
        "UPDATE job.jobs SET ordering_key = NULL WHERE id = $1",
        "UPDATE job.jobs SET ordering_key = 'other' WHERE id = $1",
        "UPDATE job.jobs SET state = 'pending' WHERE id = $1",
    ] {
        let key = format!("acct:{}", leave.len());
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT job.enqueue('doors.ordered', '{}', ordering_key => $1)
             FROM generate_series(1, 2)",
        )
        .bind(&key)
        .fetch_all(&pool)
        .await
        .unwrap();
        let state = |id: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, String>("SELECT state::text FROM job.jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(state(ids[1]).await, "pending", "{leave}");
        sqlx::query(leave)
            .bind(ids[0])
            .execute(&pool)
            .await
            .unwrap();
        let heads: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job.jobs WHERE ordering_key = $1
               AND state IN ('scheduled', 'available', 'running', 'retryable')",
        )
        .bind(&key)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(heads, 1, "the key has a head again after `{leave}`");
    }
    db.close().await;
}

/// Migration 0042: what the SQL doors refuse is repeated in their errors at most 40
/// characters long (and its size when cut), never in full: an unknown field's name, an
/// integer's or a timestamp's text, `on_duplicate`.
#[tokio::test]
async fn the_sql_doors_repeat_at_most_40_characters_of_what_they_refuse() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let long = "z".repeat(100_000);
    for (statement, argument) in [
        (
            format!(
                r#"SELECT job.enqueue_many('[{{"kind": "k", "payload": {{}}, "{long}": 1}}]')"#
            ),
            "jobs[0].zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz… (100000 bytes)",
        ),
        (
            r#"SELECT job.enqueue_many('[{"kind": "k", "payload": {}, "priority": 1e100000}]')"#
                .to_string(),
            "jobs[0].priority",
        ),
        (
            format!(
                r#"SELECT job.enqueue_many('[{{"kind": "k", "payload": {{}}, "run_at": "{long}"}}]')"#
            ),
            "jobs[0].run_at",
        ),
        (
            format!("SELECT job.enqueue('k', '{{}}', on_duplicate => '{long}')"),
            "on_duplicate",
        ),
    ] {
        let error = sqlx::raw_sql(&statement)
            .execute(&pool)
            .await
            .map(|_| ())
            .expect_err("refused");
        let (code, message) = db_error(error);
        assert_eq!(code, "22023", "{message}");
        assert!(
            message.contains(&format!("`{argument}`")) || message.contains(argument),
            "{message}"
        );
        assert!(
            message.len() < 400,
            "{} bytes: {}",
            message.len(),
            message.chars().take(400).collect::<String>()
        );
    }
    db.close().await;
}
