//! The SQL functions name the argument they refuse (migration 0052): `job.enqueue_unique`'s
//! NULLs, tags not indexed from 1, and the stager's negative counts are refused with `22023`
//! and the argument's name, never by a table's constraint or PostgreSQL's own words; the
//! rescuer's since migration 0054, the claim's since 0055 (its array items and worker id since
//! 0060), the key setters' since 0056.

use job_testkit::TestDb;
use sqlx::PgPool;

use crate::support::*;

/// Runs `statement`, which must fail with `22023` and a message starting with `expected`.
async fn refused_naming(pool: &PgPool, statement: &str, expected: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let (code, message) = db_error(error);
    assert!(
        code == "22023" && message.starts_with(expected),
        "{statement}\nexpected: 22023 {expected}…\n   found: {code} {message}"
    );
}

/// `job.enqueue_unique`'s arguments, each a valid value, in its order.
const UNIQUE_ARGUMENTS: [(&str, &str); 13] = [
    ("p_kind", "'doors.any'"),
    ("p_queue", "'default'"),
    ("p_priority", "0::smallint"),
    ("p_payload", "'{}'::jsonb"),
    ("p_payload_version", "1"),
    ("p_max_attempts", "25"),
    ("p_run_at", "now()"),
    ("p_deadline", "now() + interval '1 hour'"),
    ("p_unique_key", "'key:1'"),
    ("p_unique_scope", "'finished'"),
    ("p_replace", "false"),
    ("p_tags", "'{a}'::text[]"),
    ("p_tenant", "'acme'"),
];

/// A call of `job.enqueue_unique` with the valid arguments, `name`'s replaced by `value`.
fn enqueue_unique(name: &str, value: &str) -> String {
    let arguments: Vec<&str> = UNIQUE_ARGUMENTS
        .iter()
        .map(|&(n, v)| if n == name { value } else { v })
        .collect();
    format!("SELECT * FROM job.enqueue_unique({})", arguments.join(", "))
}

#[tokio::test]
async fn enqueue_unique_refuses_a_null_argument_naming_it() {
    let db = TestDb::new().await;
    let pool = db.pool();
    for (name, _) in UNIQUE_ARGUMENTS {
        let statement = enqueue_unique(name, "NULL");
        if matches!(name, "p_deadline" | "p_tenant") {
            // No deadline and no tenant are what NULL means for them.
            sqlx::raw_sql(&statement).execute(&pool).await.unwrap();
            sqlx::raw_sql("DELETE FROM job.jobs")
                .execute(&pool)
                .await
                .unwrap();
            continue;
        }
        refused_naming(
            &pool,
            &statement,
            &format!("invalid enqueue argument `{name}`: must"),
        )
        .await;
    }
    // Every argument NULL: the first is named.
    refused_naming(
        &pool,
        &format!(
            "SELECT * FROM job.enqueue_unique({})",
            ["NULL"; 13].join(", ")
        ),
        "invalid enqueue argument `p_kind`: must not be null",
    )
    .await;
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    db.close().await;
}

#[tokio::test]
async fn enqueue_unique_refuses_what_job_enqueue_refuses_in_its_words() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let cases = [
        (
            "p_priority",
            "(-1)::smallint",
            "must be between 0 and 32767, got -1",
        ),
        ("p_max_attempts", "0", "must be at least 1, got 0"),
        ("p_payload_version", "-5", "must be at least 1, got -5"),
        (
            "p_run_at",
            "'infinity'",
            "must be between 0001-01-01 and 9999-12-31 UTC, got infinity",
        ),
        (
            "p_deadline",
            "'-infinity'",
            "must be between 0001-01-01 and 9999-12-31 UTC, got -infinity",
        ),
        (
            "p_unique_key",
            "''",
            "must be 1 to 512 bytes, got 0",
        ),
        (
            "p_unique_scope",
            "repeat('x', 1000)",
            "must be 'finished', 'started' or 'pruned', got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (1000 bytes)'",
        ),
    ];
    for (name, value, problem) in cases {
        refused_naming(
            &pool,
            &enqueue_unique(name, value),
            &format!("invalid enqueue argument `{name}`: {problem}"),
        )
        .await;
    }
    // The name and payload rules are the table's admission trigger's, as before (a second
    // pass here would cost every enqueue): refused naming the column.
    refused_by_sql(
        &pool,
        &enqueue_unique("p_kind", "'doors any'"),
        "23514",
        "kind",
    )
    .await;
    refused_by_sql(
        &pool,
        &enqueue_unique("p_payload", "'[1]'::jsonb"),
        "23514",
        "payload",
    )
    .await;
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    db.close().await;
}

#[tokio::test]
async fn tags_not_indexed_from_one_are_refused_naming_the_tags() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let words = "must be indexed from 1 (as ARRAY[...] and '{...}' are), got an array indexed \
                 from 5";
    refused_naming(
        &pool,
        "SELECT job.enqueue('doors.any', '{}', tags => '[5:5]={a}'::text[])",
        &format!("invalid enqueue argument `tags`: {words}"),
    )
    .await;
    refused_naming(
        &pool,
        "SELECT job.enqueue('doors.any', '{}', unique_key => 'k', tags => '[5:6]={a,b}')",
        &format!("invalid enqueue argument `tags`: {words}"),
    )
    .await;
    refused_naming(
        &pool,
        &enqueue_unique("p_tags", "'[5:5]={a}'::text[]"),
        &format!("invalid enqueue argument `p_tags`: {words}"),
    )
    .await;
    assert_eq!(rows(&pool).await, 0, "nothing was written");
    // Indexed from 1, however written, they are taken.
    sqlx::raw_sql("SELECT job.enqueue('doors.any', '{}', tags => '[1:2]={a,b}'::text[])")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(rows(&pool).await, 1);
    db.close().await;
}

#[tokio::test]
async fn the_stagers_functions_refuse_a_negative_or_null_count_naming_it() {
    let db = TestDb::new().await;
    let pool = db.pool();
    for (function, argument, what) in [
        ("ordering_wake_up", "max_keys", "the most keys to wake up"),
        (
            "dependencies_resolve",
            "max_jobs",
            "the most dependents to resolve",
        ),
    ] {
        for (value, shown) in [
            ("-1", "-1"),
            ("-2147483648", "-2147483648"),
            ("NULL", "null"),
        ] {
            refused_naming(
                &pool,
                &format!("SELECT job.{function}({value})"),
                &format!(
                    "invalid {function} argument `{argument}`: must be 0 or more ({what}), \
                     got {shown}"
                ),
            )
            .await;
        }
        // No upper bound: the stager sends its batch, up to i32::MAX.
        for value in [0, i32::MAX] {
            let done: i32 = sqlx::query_scalar(&format!("SELECT job.{function}($1)"))
                .bind(value)
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(done, 0, "{function}({value})");
        }
    }
    db.close().await;
}

/// `job.rescue_expired` refuses them too (migration 0054). Before, -1 failed on PostgreSQL's
/// "LIMIT must not be negative" once a lease had expired, and NULL rescued every expired lease
/// at once. An expired lease waits here throughout: the refusals rescue nothing.
#[tokio::test]
async fn the_rescue_refuses_a_negative_or_null_count_naming_it() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.any', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    // Claimed by a worker that died: its lease ran out an hour ago.
    sqlx::query(
        "UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = gen_random_uuid(), \
         locked_by = 'gone', locked_until = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    for (value, shown) in [
        ("-1", "-1"),
        ("-2147483648", "-2147483648"),
        ("NULL", "null"),
    ] {
        refused_naming(
            &pool,
            &format!("SELECT * FROM job.rescue_expired({value})"),
            &format!(
                "invalid rescue_expired argument `in_limit`: must be 0 or more (the most jobs to \
                 rescue), got {shown}"
            ),
        )
        .await;
    }
    // No upper bound: the rescuer sends its batch, up to i32::MAX.
    for (limit, rescued) in [(0, 0), (i32::MAX, 1)] {
        let retried: i64 = sqlx::query_scalar("SELECT retried FROM job.rescue_expired($1)")
            .bind(limit)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(retried, rescued, "rescue_expired({limit})");
    }
    let state: String = sqlx::query_scalar("SELECT state::text FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "retryable");
    db.close().await;
}

/// `job.claim`'s arguments, each a valid value, in its order.
const CLAIM_ARGUMENTS: [(&str, &str); 8] = [
    ("in_queue", "'default'"),
    ("in_kinds", "'{doors.any}'::text[]"),
    ("in_versions", "'{1}'::integer[]"),
    ("in_leases", "'{30000}'::bigint[]"),
    ("in_max", "10"),
    ("in_worker", "'w'"),
    ("in_caps", "'{NULL}'::integer[]"),
    ("in_ahead_of", "'{}'::text[]"),
];

/// `job.claim` called with `CLAIM_ARGUMENTS`, each `(name, value)` of `changes` in place of
/// that argument's valid value.
fn claim_with(changes: &[(&str, &str)]) -> String {
    let arguments: Vec<&str> = CLAIM_ARGUMENTS
        .iter()
        .map(|(name, valid)| {
            changes
                .iter()
                .find(|(changed, _)| changed == name)
                .map_or(*valid, |(_, value)| *value)
        })
        .collect();
    format!("SELECT * FROM job.claim({})", arguments.join(", "))
}

/// Called by hand or by another client, `job.claim` took a lease of 0 or less as a claim whose
/// lease had already run out, failed on the table's constraint for a NULL lease or a lease
/// array shorter than the kinds', failed with PostgreSQL's words for a negative `in_max`, and
/// claimed nothing (or a capped kind's room) for a NULL one. Each is refused, naming the
/// argument, and nothing is claimed.
#[tokio::test]
async fn the_claim_refuses_arguments_out_of_bounds_naming_them() {
    let db = TestDb::new().await;
    let pool = db.pool();
    for _ in 0..2 {
        sqlx::query("SELECT job.enqueue('doors.any', '{}')")
            .execute(&pool)
            .await
            .unwrap();
    }
    for (name, _) in CLAIM_ARGUMENTS.iter().filter(|(name, _)| *name != "in_max") {
        refused_naming(
            &pool,
            &claim_with(&[(name, "NULL")]),
            &format!("invalid claim argument `{name}`: must not be null"),
        )
        .await;
    }
    let lockstep = "invalid claim arguments `in_kinds`, `in_versions`, `in_leases`, `in_caps`: \
                    must be one-dimensional arrays from 1 of one length (one item per kind), got";
    for changes in [
        [("in_leases", "'{}'::bigint[]")],
        [("in_versions", "'{1,1}'::integer[]")],
        [("in_caps", "'{}'::integer[]")],
        [("in_leases", "'[2:2]={30000}'::bigint[]")],
        [("in_kinds", "'{{doors.any}}'::text[]")],
    ] {
        refused_naming(&pool, &claim_with(&changes), lockstep).await;
    }
    for (lease, shown) in [
        ("0", "0"),
        ("-30000", "-30000"),
        ("NULL", "null"),
        ("3153600000001", "3153600000001"),
    ] {
        refused_naming(
            &pool,
            &claim_with(&[("in_leases", &format!("ARRAY[{lease}]::bigint[]"))]),
            &format!(
                "invalid claim argument `in_leases`: each lease must be 1 to 3153600000000 \
                 milliseconds (100 years), got {shown}"
            ),
        )
        .await;
    }
    for (max, shown) in [
        ("-1", "-1"),
        ("-2147483648", "-2147483648"),
        ("NULL", "null"),
    ] {
        refused_naming(
            &pool,
            &claim_with(&[("in_max", max)]),
            &format!(
                "invalid claim argument `in_max`: must be 0 or more (the most jobs to claim), \
                 got {shown}"
            ),
        )
        .await;
    }
    // The items of the kind arrays and the worker's id (migration 0060): a kind named twice
    // got its own room per item (a kind capped at 1 claimed 2); an id over 128 bytes failed
    // on jobs_locked_by_check once a job was due; the others claimed nothing, silently.
    let kinds_twice = [
        ("in_kinds", "'{doors.any,doors.any}'::text[]"),
        ("in_versions", "'{1,1}'::integer[]"),
        ("in_leases", "'{30000,1}'::bigint[]"),
        ("in_caps", "'{1,1}'::integer[]"),
    ];
    for (changes, says) in [
        (
            &kinds_twice[..],
            "invalid claim argument `in_kinds`: each kind must be named once and not be null \
             (its version, lease and cap are found by its position), got `doors.any` 2 times",
        ),
        (
            &[("in_kinds", "'{NULL}'::text[]")][..],
            "invalid claim argument `in_kinds`: each kind must be named once and not be null \
             (its version, lease and cap are found by its position), got null",
        ),
        (
            &[("in_versions", "'{0}'::integer[]")][..],
            "invalid claim argument `in_versions`: each version must be 1 or more (the newest \
             payload version the worker decodes), got 0",
        ),
        (
            &[("in_versions", "'{NULL}'::integer[]")][..],
            "invalid claim argument `in_versions`: each version must be 1 or more (the newest \
             payload version the worker decodes), got null",
        ),
        (
            &[("in_caps", "'{-1}'::integer[]")][..],
            "invalid claim argument `in_caps`: each cap must be null (no limit) or 0 or more \
             (the most running jobs of its kind), got -1",
        ),
        (
            &[("in_worker", "repeat('w', 129)")][..],
            "invalid claim argument `in_worker`: must be 1 to 128 bytes (the worker's id, which \
             its leases carry), got 129",
        ),
        (
            &[("in_worker", "''")][..],
            "invalid claim argument `in_worker`: must be 1 to 128 bytes (the worker's id, which \
             its leases carry), got 0",
        ),
    ] {
        refused_naming(&pool, &claim_with(changes), says).await;
    }
    let running = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM job.jobs WHERE state = 'running'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(running().await, 0, "a refused claim claims nothing");
    // The bounds themselves are taken, and no kinds at all is a claim of nothing; so is a
    // kind capped at 0.
    for (changes, claimed) in [
        (vec![("in_caps", "'{0}'::integer[]")], 0),
        (vec![("in_worker", "repeat('w', 128)"), ("in_max", "0")], 0),
        (vec![("in_max", "0")], 0),
        (
            vec![
                ("in_kinds", "'{}'::text[]"),
                ("in_versions", "'{}'::integer[]"),
                ("in_leases", "'{}'::bigint[]"),
                ("in_caps", "'{}'::integer[]"),
            ],
            0,
        ),
        (vec![("in_leases", "'{1}'::bigint[]"), ("in_max", "1")], 1),
        (
            vec![
                ("in_leases", "'{3153600000000}'::bigint[]"),
                ("in_max", "2147483647"),
            ],
            1,
        ),
    ] {
        let statement = claim_with(&changes);
        let rows = sqlx::query(&statement).fetch_all(&pool).await.unwrap();
        assert_eq!(rows.len(), claimed, "{statement}");
    }
    assert_eq!(
        running().await,
        2,
        "one job claimed by each of the last two calls"
    );
    db.close().await;
}

/// `job.set_ordering_key` and `job.set_rate_key` (granted to the worker and producer roles)
/// refuse a key of 0 or over 512 bytes naming it, in `job.enqueue`'s words: the table's check
/// refused it before, with the whole row, a megabyte key included, in the error's detail. A
/// NULL key still clears the job's key, and a job that does not exist is answered NULL.
#[tokio::test]
async fn the_key_setters_refuse_a_key_out_of_bounds_naming_it() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.any', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    for function in ["set_ordering_key", "set_rate_key"] {
        for (key, bytes) in [
            ("''", 0),
            ("repeat('k', 513)", 513),
            ("repeat('é', 1000000)", 2000000),
        ] {
            refused_naming(
                &pool,
                &format!("SELECT job.{function}({id}, {key})"),
                &format!("invalid {function} argument `key`: must be 1 to 512 bytes, got {bytes}"),
            )
            .await;
        }
        let set = |key: Option<String>, job: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, Option<bool>>(&format!("SELECT job.{function}($1, $2)"))
                    .bind(job)
                    .bind(key)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        let longest = Some("k".repeat(512));
        assert_eq!(
            set(longest, id).await,
            Some(true),
            "{function}: 512 bytes taken"
        );
        assert_eq!(
            set(None, id).await,
            Some(true),
            "{function}: NULL clears the key"
        );
        let other = Some("k".to_owned());
        assert_eq!(set(other, id + 1).await, None, "{function}: no such job");
    }
    let keys: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT ordering_key, rate_key FROM job.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(keys, (None, None));
    db.close().await;
}

/// `job.enqueue_many` has no bound of its own (the migration's head says why): a call of more
/// jobs than one statement of `Store::enqueue_many` holds goes in whole.
#[tokio::test]
async fn a_bulk_sql_enqueue_takes_more_jobs_than_one_rust_statement_holds() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT * FROM job.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
             'kind', 'doors.any', 'payload', jsonb_build_object('n', n)))
         FROM generate_series(1, 10001) n))",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(ids.len(), 10_001);
    assert_eq!(rows(&pool).await, 10_001);
    db.close().await;
}

/// Runs `statement`, which must fail with `code` and exactly `expected`.
async fn refused_saying(pool: &PgPool, statement: &str, code: &str, expected: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let (found_code, message) = db_error(error);
    assert_eq!(
        (found_code.as_str(), message.as_str()),
        (code, expected),
        "{statement}"
    );
}

/// What the doors refuse comes back as `job.shown` shows it, never whole (migration 0059): an
/// active duplicate's unique key and a trace context came back with their newlines and
/// control characters. And `job.enqueue_many` names the element whose deadline is not after
/// its run time, where the deadline door's trigger could not say which one it refused.
#[tokio::test]
async fn refusals_show_the_value_bounded_and_name_the_element() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let key = "E'line 1\\nline 2\\x1b[31m' || repeat('k', 100)";
    let first: i64 = sqlx::query_scalar(&format!(
        "SELECT job.enqueue('doors.unique', '{{}}', unique_key => {key})"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    refused_saying(
        &pool,
        &format!("SELECT job.enqueue('doors.unique', '{{}}', unique_key => {key})"),
        "23505",
        &format!(
            "a job of `doors.unique` with unique key `line 1?line 2?[31mkkkkkkkkkkkkkkkkkkkkkk… \
             (118 bytes)` is already active (job {first})"
        ),
    )
    .await;
    // Invisible characters that reorder or hide text in a terminal or a log viewer (a
    // right-to-left override, a line separator, a zero-width space, a soft hyphen) are shown
    // as control characters are (migration 0063): they came back as they were.
    let hidden = "E'inv\\u202e1\\u2028x\\u200by\\u00adz \\u00e9'";
    let hidden_id: i64 = sqlx::query_scalar(&format!(
        "SELECT job.enqueue('doors.hidden', '{{}}', unique_key => {hidden})"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    refused_saying(
        &pool,
        &format!("SELECT job.enqueue('doors.hidden', '{{}}', unique_key => {hidden})"),
        "23505",
        &format!(
            "a job of `doors.hidden` with unique key `inv?1?x?y?z \u{e9}` is already active \
             (job {hidden_id})"
        ),
    )
    .await;
    refused_saying(
        &pool,
        "SELECT job.set_trace_context(job.enqueue('doors.trace', '{}'), E'00-ab\\nFAKE LOG LINE')",
        "23514",
        "job row refused: `trace_context` must be a W3C traceparent (00-<32 lower-case hex, not \
         all 0>-<16 lower-case hex, not all 0>-<2 lower-case hex>), got `00-ab?FAKE LOG LINE`",
    )
    .await;
    let error = sqlx::raw_sql(
        "SELECT * FROM job.enqueue_many('[{\"kind\": \"doors.a\", \"payload\": {}},
            {\"kind\": \"doors.b\", \"payload\": {}, \"run_at\": \"2030-01-01T00:00:00Z\",
             \"deadline\": \"2029-12-31T00:00:00Z\"}]')",
    )
    .execute(&pool)
    .await
    .expect_err("a deadline before the run time");
    let (code, message) = db_error(error);
    assert!(
        code == "23514"
            && message.starts_with(
                "invalid enqueue argument `jobs[1].deadline`: 2029-12-31 00:00:00+00 is not \
                 after the run time 2030-01-01 00:00:00+00"
            ),
        "{code} {message}"
    );
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE kind NOT IN ('doors.unique', 'doors.hidden')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(jobs, 0, "nothing of a refused call is kept");
    db.close().await;
}
