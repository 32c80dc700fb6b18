//! The SQLite backend's doors, probed as a careless application and as an attacker with the
//! file would: every rule of the README's "The rules of every door" holds through the Rust API
//! and through raw writes to the file (triggers), and what the store reads back or claims never
//! fails on a row a raw write could make.

use std::time::Duration;

use job::{
    Admin, ClaimKind, ClaimRequest, ClaimedJob, EnqueueError, ErrorClass, Failure, Finalize,
    Finalized, NewJob, Outcome, SqliteStore, Store, DEFAULT_PAYLOAD_LIMIT,
};
use job_testkit::TestSqlite;

/// A claim of up to 10 jobs of `kind` on `queue`.
fn request(kind: &str, queue: &str) -> ClaimRequest {
    ClaimRequest {
        queue: queue.into(),
        kinds: vec![ClaimKind {
            kind: kind.into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 10,
        worker_id: "probe-worker".into(),
    }
}

/// A JSON object of exactly `len` bytes.
fn payload_of(len: usize) -> String {
    format!("{{\"x\":\"{}\"}}", "a".repeat(len - 8))
}

/// Runs `sql` on the store's pool, as an application (or an attacker) with the file would.
async fn raw(store: &SqliteStore, sql: &str) -> Result<u64, sqlx::Error> {
    sqlx::query(sql)
        .execute(store.pool())
        .await
        .map(|r| r.rows_affected())
}

async fn claim(store: &SqliteStore, kind: &str, queue: &str) -> Vec<ClaimedJob> {
    store.claim(&request(kind, queue)).await.unwrap()
}

fn discard(job: &ClaimedJob, message: &str) -> Finalize {
    Finalize {
        lease: job.lease,
        outcome: Outcome::Discard {
            failure: Failure {
                attempt: job.attempt,
                class: ErrorClass::Terminal,
                message: message.into(),
            },
        },
        result: None,
    }
}

#[tokio::test]
async fn a_payload_over_the_limit_is_refused_at_every_door() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let over = payload_of(DEFAULT_PAYLOAD_LIMIT + 1);

    let err = store
        .enqueue(NewJob::new("k", over.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::PayloadTooLarge { size, limit, .. }
                if size == DEFAULT_PAYLOAD_LIMIT + 1 && limit == DEFAULT_PAYLOAD_LIMIT
        ),
        "the store's enqueue: {err:?}"
    );
    let mut conn = store.pool().acquire().await.unwrap();
    let err = job::sqlite::enqueue(&mut conn, &NewJob::new("k", over.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnqueueError::PayloadTooLarge { limit, .. } if limit == DEFAULT_PAYLOAD_LIMIT),
        "an enqueue through a connection: {err:?}"
    );
    drop(conn);
    let at_limit = store
        .enqueue(NewJob::new("k", payload_of(DEFAULT_PAYLOAD_LIMIT)))
        .await
        .expect("a payload at the limit is stored");

    let err = raw(
        &store,
        &format!(
            "INSERT INTO job_jobs (kind, queue, payload, run_at, state, created_at) \
             VALUES ('k', 'q', '{over}', 0, 'available', 0)"
        ),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("`payload`"), "a raw insert: {err}");
    let err = raw(
        &store,
        &format!("UPDATE job_jobs SET payload = '{over}' WHERE id = {at_limit}"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("`payload`"), "a raw update: {err}");

    raw(
        &store,
        &format!(
            "UPDATE job_settings SET payload_limit = {}",
            2 * DEFAULT_PAYLOAD_LIMIT
        ),
    )
    .await
    .unwrap();
    store
        .enqueue(NewJob::new("k", over))
        .await
        .expect("under a raised limit");
    db.close().await;
}

#[tokio::test]
async fn a_compensating_job_omits_a_payload_whose_wrapping_is_over_the_limit() {
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    // Fits alone; not with its id, kind and an error of 1,000 bytes around it.
    let id = store
        .enqueue(NewJob::new("k", payload_of(DEFAULT_PAYLOAD_LIMIT - 100)))
        .await
        .unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    let message = "m".repeat(1000);
    assert_eq!(
        store.finalize(&[discard(&job, &message)]).await.unwrap(),
        vec![Finalized::Applied]
    );
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 1, "one compensating job");
    let payload = &compensating[0].payload;
    assert!(
        payload.len() <= DEFAULT_PAYLOAD_LIMIT,
        "the compensating payload is {} bytes, over the limit of {DEFAULT_PAYLOAD_LIMIT}",
        payload.len()
    );
    let payload: serde_json::Value = serde_json::from_str(payload).unwrap();
    let discarded = &payload["discarded"];
    assert_eq!(discarded["job_id"], id);
    assert_eq!(discarded["payload_omitted"], true);
    assert_eq!(discarded["payload"], serde_json::Value::Null);
    assert_eq!(discarded["error"]["message"], message.as_str());

    // A small payload still travels with its compensation.
    store.enqueue(NewJob::new("k", "{\"n\":1}")).await.unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    store.finalize(&[discard(&job, "no")]).await.unwrap();
    let compensating = claim(&store, "probe.undo", "undo").await;
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["payload"], serde_json::json!({"n": 1}));
    assert_eq!(payload["discarded"]["payload_omitted"], false);
    db.close().await;
}

/// Under a limit that the wrapping fits only without the payload and the last error, the
/// compensating job comes with neither, and says the error was left out
/// (`Discarded::error_omitted`); the other forms say it was not.
#[tokio::test]
async fn a_compensating_job_omits_the_last_error_too_when_only_that_fits_and_says_so() {
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    sqlx::query("UPDATE job_settings SET payload_limit = 4096")
        .execute(store.pool())
        .await
        .unwrap();
    let id = store
        .enqueue(NewJob::new("k", "{\"order\":7}"))
        .await
        .unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    store
        .finalize(&[discard(&job, &"e".repeat(5000))])
        .await
        .unwrap();
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 1, "one compensating job");
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    let discarded: job::Discarded = serde_json::from_value(payload["discarded"].clone()).unwrap();
    assert_eq!(discarded.job_id, id);
    assert_eq!(discarded.payload, serde_json::Value::Null);
    assert_eq!(discarded.error, None);
    assert!(discarded.error_omitted, "{payload}");

    store.enqueue(NewJob::new("k", "{\"n\":1}")).await.unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    store.finalize(&[discard(&job, "no")]).await.unwrap();
    let compensating = claim(&store, "probe.undo", "undo").await;
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["error_omitted"], false);
    db.close().await;
}

/// Inserts a job row of kind `k` on `queue` raw, with `set` (column, SQL value) over a
/// waiting row's defaults. A `deadline` is written by an update right after the insert, so
/// that a row past its deadline can be made (an insert of one is refused: migration 0014).
async fn insert_raw(
    store: &SqliteStore,
    queue: &str,
    set: &[(&str, &str)],
) -> Result<u64, sqlx::Error> {
    let mut row: Vec<(&str, String)> = vec![
        ("kind", "'k'".into()),
        ("queue", format!("'{queue}'")),
        ("payload", "'{}'".into()),
        ("state", "'available'".into()),
        ("created_at", "0".into()),
        ("run_at", "0".into()),
    ];
    row.retain(|(c, _)| !set.iter().any(|(s, _)| s == c));
    row.extend(
        set.iter()
            .filter(|(c, _)| *c != "deadline")
            .map(|&(c, v)| (c, v.to_owned())),
    );
    let columns: Vec<&str> = row.iter().map(|(c, _)| *c).collect();
    let values: Vec<&str> = row.iter().map(|(_, v)| v.as_str()).collect();
    // One transaction: a deadline the update refuses leaves no row.
    let mut tx = store.pool().begin().await?;
    let inserted = sqlx::query(&format!(
        "INSERT INTO job_jobs ({}) VALUES ({})",
        columns.join(", "),
        values.join(", ")
    ))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if let Some((_, deadline)) = set.iter().find(|(c, _)| *c == "deadline") {
        sqlx::query(&format!(
            "UPDATE job_jobs SET deadline = {deadline} WHERE id = last_insert_rowid()"
        ))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(inserted)
}

#[tokio::test]
async fn a_raw_row_no_worker_could_take_is_refused_naming_its_column() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let running = [
        ("state", "'running'"),
        ("lock_token", "x'00112233445566778899aabbccddeeff'"),
        ("locked_until", "0"),
    ];
    let long_id = format!("'{}'", "w".repeat(129));
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("attempt", vec![("attempt", "2147483647")]),
        ("snoozes", vec![("snoozes", "2147483647")]),
        ("max_attempts", vec![("max_attempts", "2147483648")]),
        ("payload_version", vec![("payload_version", "2147483648")]),
        ("run_at", vec![("run_at", "-9223372036854775808")]),
        ("deadline", vec![("deadline", "9223372036854775807")]),
        ("created_at", vec![("created_at", "253402300800000000")]),
        ("attempt", running.to_vec()),
        (
            "locked_by",
            [
                &running[..],
                &[("attempt", "1"), ("locked_by", long_id.as_str())],
            ]
            .concat(),
        ),
    ];
    for (column, set) in cases {
        let err = insert_raw(&store, "q", &set).await;
        let err = err.expect_err(&format!("refused: {set:?}")).to_string();
        assert!(err.contains(&format!("`{column}`")), "{column}: {err}");
    }

    insert_raw(&store, "q", &[]).await.unwrap();
    let err = raw(&store, "UPDATE job_jobs SET attempt = 2147483647")
        .await
        .expect_err("a raw update too");
    assert!(err.to_string().contains("`attempt`"), "{err}");

    // At the bound: stored, and passed over by the claim, which takes the rest of its queue.
    insert_raw(
        &store,
        "q",
        &[("attempt", "2147483646"), ("snoozes", "2147483646")],
    )
    .await
    .unwrap();
    let claimed = claim(&store, "k", "q").await;
    assert_eq!(claimed.len(), 1, "the ordinary row: {claimed:?}");
    db.close().await;
}

#[tokio::test]
async fn rows_written_raw_before_the_bounds_never_stop_a_claim() {
    let db = TestSqlite::new().await;
    let store = db.store();
    // As a file written before migration 0006 holds them.
    raw(&store, "DROP TRIGGER IF EXISTS job_jobs_bounds_insert")
        .await
        .unwrap();
    for set in [
        ("attempt", "2147483647"),
        ("max_attempts", "9999999999"),
        ("snoozes", "9999999999"),
        ("run_at", "-9223372036854775808"),
    ] {
        insert_raw(&store, "q", &[set]).await.unwrap();
    }
    let ordinary = NewJob {
        queue: "q".into(),
        ..NewJob::new("k", "{}")
    };
    let ordinary = store.enqueue(ordinary).await;
    let ordinary = ordinary.unwrap();
    let claimed = store.claim(&request("k", "q")).await;
    let claimed = claimed.expect("the claim reads past what it could not take");
    let ids: Vec<i64> = claimed.iter().map(|j| j.lease.id).collect();
    assert!(ids.contains(&ordinary), "{ids:?}");
    assert_eq!(ids.len(), 2, "the ordinary row and the early one: {ids:?}");
    db.close().await;
}

#[tokio::test]
async fn a_file_that_cannot_be_opened_or_written_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-directory").join("jobs.sqlite");
    let garbage = dir.path().join("not-a-database.sqlite");
    std::fs::write(&garbage, "x".repeat(4096)).unwrap();
    let a_directory = dir.path().join("a-directory");
    std::fs::create_dir(&a_directory).unwrap();
    for path in [&missing, &garbage, &a_directory] {
        let err = SqliteStore::open(path)
            .await
            .expect_err("not a database file");
        let shown = err.to_string();
        assert!(
            shown.contains(&path.display().to_string()),
            "the error names the file: {shown}"
        );
    }

    // A read-only file (as root, file permissions do not stop a write: open it read-only).
    let read_only = dir.path().join("read-only.sqlite");
    std::fs::write(&read_only, "").unwrap();
    let options = SqliteStore::options(&read_only).read_only(true);
    let err = match SqliteStore::connect_with(options).await {
        Err(err) => err,
        Ok(store) => store.migrate().await.expect_err("nothing can be written"),
    };
    let shown = err.to_string();
    assert!(
        shown.contains(&read_only.display().to_string()) && shown.contains("readonly"),
        "the error names the file and why: {shown}"
    );
}

#[tokio::test]
async fn an_in_memory_database_is_refused_saying_why() {
    // `:memory:` is a database private to each connection: opened, the store's other
    // connections saw an empty one and failed with "no such table".
    let err = SqliteStore::open(":memory:")
        .await
        .expect_err("one database per connection");
    let shown = err.to_string();
    assert!(
        shown.contains(":memory:")
            && shown.contains("one per connection")
            && shown.contains("file"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_raw_row_breaking_the_name_tag_key_or_payload_rules_is_refused() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let many_tags = format!(
        "json_array({})",
        (0..33)
            .map(|i| format!("'t{i}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("kind", vec![("kind", "'a' || char(10) || 'b'")]),
        ("kind", vec![("kind", "'a' || char(8203) || 'b'")]),
        ("queue", vec![("queue", "'q' || char(0) || 'r'")]),
        ("tenant", vec![("tenant", "'t' || char(8238)")]),
        ("tags", vec![("tags", "'[1, 2]'")]),
        ("tags", vec![("tags", "'[\"a b\"]'")]),
        ("tags", vec![("tags", many_tags.as_str())]),
        (
            "unique_key",
            vec![
                ("unique_key", "'k' || char(0) || 'x'"),
                ("unique_scope", "'finished'"),
            ],
        ),
        ("payload", vec![("payload", r#"'{"a": "x\u0000y"}'"#)]),
        ("payload", vec![("payload", r#"'{"a": "\\\u0000"}'"#)]),
    ];
    for (column, set) in cases {
        let err = insert_raw(&store, "q", &set).await;
        let err = err.expect_err(&format!("refused: {set:?}")).to_string();
        assert!(err.contains(&format!("`{column}`")), "{column}: {err}");
    }
    // What the rules allow is stored: an escaped backslash before `u0000`, names in any
    // script, tags.
    insert_raw(
        &store,
        "q",
        &[
            ("payload", r#"'{"a": "\\u0000"}'"#),
            ("kind", "'ünïcødé.名前'"),
            ("tags", "'[\"a\", \"b\"]'"),
        ],
    )
    .await
    .unwrap();
    let err = raw(&store, "UPDATE job_jobs SET queue = 'a b'")
        .await
        .expect_err("a raw update too");
    assert!(err.to_string().contains("`queue`"), "{err}");
    db.close().await;
}

/// The GLOB class of migration 0007 refuses exactly the characters `job_core::name_problem`
/// refuses, over every code point (NUL is checked apart).
#[tokio::test]
async fn the_sql_name_rule_matches_the_rust_one_over_every_code_point() {
    // As the triggers test it: a name of printable ASCII but space passes at once, anything
    // else is matched against the pattern.
    let db = TestSqlite::new().await;
    let store = db.store();
    let refused: Vec<i64> = sqlx::query_scalar(
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1114111) \
         SELECT n FROM c WHERE (n < 55296 OR n > 57343) \
           AND ('x' || char(n)) GLOB '*[^!-~]*' \
           AND ('x' || char(n)) GLOB (SELECT pattern FROM job_forbidden_in_names)",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let expected: Vec<i64> = (1..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|c| job::name_problem(&format!("x{c}")).is_some())
        .map(|c| i64::from(u32::from(c)))
        .collect();
    assert_eq!(refused, expected);
    db.close().await;
}

#[tokio::test]
async fn a_row_stored_before_the_rules_is_discarded_with_its_compensation() {
    // A row written raw before migration 0007 may hold a NUL in its payload and a tenant the
    // rules refuse. Its compensating job, which would carry both, was refused by the rules,
    // and with it the discard: the job could never end. The compensation now leaves out what
    // the rules refuse, and a raw compensation row with a refused name is refused itself.
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    // As before 0007: the insert rule dropped, the row written, the rule put back.
    let (rule,): (String,) = sqlx::query_as(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'job_jobs_names_insert'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    for sql in [
        "DROP TRIGGER job_jobs_names_insert",
        "INSERT INTO job_jobs (kind, queue, payload, tenant, state, created_at, run_at)
         VALUES ('k', 'default', '{\"a\":\"x\\u0000y\"}', 'bad tenant', 'available', 0, 0)",
        &rule,
    ] {
        sqlx::query(sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    drop(conn);
    let job = claim(&store, "k", "default").await.remove(0);
    assert_eq!(
        store.finalize(&[discard(&job, "no")]).await.unwrap(),
        vec![Finalized::Applied],
        "the discard went through"
    );
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 1, "one compensating job");
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["payload_omitted"], true);
    assert_eq!(payload["discarded"]["error"]["message"], "no");
    let (tenant,): (Option<String>,) =
        sqlx::query_as("SELECT tenant FROM job_jobs WHERE kind = 'probe.undo'")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(tenant, None);

    for (kind, queue) in [("probe.undo\n", "undo"), ("probe.undo", "un do")] {
        let refused = raw(
            &store,
            &format!(
                "UPDATE job_compensations SET compensate_kind = '{kind}', compensate_queue = '{queue}'"
            ),
        )
        .await
        .unwrap_err();
        assert!(
            refused.to_string().contains("compensation refused"),
            "{refused}"
        );
    }
    db.close().await;
}

#[tokio::test]
async fn an_error_history_is_bounded_for_every_writer() {
    // A raw write stored a history of any size (3 MB was accepted). Migration 0008 refuses
    // one over 20 entries or 2 MiB; a row stored before keeps its history until its next
    // error, whose write cuts every entry over 64 KiB, so the job still ends.
    let db = TestSqlite::new().await;
    let store = db.store();
    let big = format!(
        "'[{{\"attempt\":1,\"at\":\"2026-01-01T00:00:00Z\",\"class\":\"error\",\"message\":\"' || \
         replace(hex(zeroblob({})), '00', 'mm') || '\"}}]'",
        1_500_000
    );
    let many = format!(
        "'[{}]'",
        vec![
            "{\"attempt\":1,\"at\":\"2026-01-01T00:00:00Z\",\"class\":\"e\",\"message\":\"m\"}";
            21
        ]
        .join(",")
    );
    for history in [&big, &many] {
        let refused = insert_raw(&store, "default", &[("errors", history.as_str())])
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("`errors`"), "{refused}");
    }
    let id = store.enqueue(NewJob::new("k", "{}")).await.unwrap();
    let refused = raw(
        &store,
        &format!("UPDATE job_jobs SET errors = {big} WHERE id = {id}"),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("`errors`"), "{refused}");

    // As before 0008: the update rule dropped, the history written, the rule put back.
    let (rule,): (String,) = sqlx::query_as(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'job_jobs_errors_update'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    for sql in [
        "DROP TRIGGER job_jobs_errors_update".to_owned(),
        format!("UPDATE job_jobs SET errors = {big} WHERE id = {id}"),
        rule,
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    drop(conn);
    let job = claim(&store, "k", "default").await.remove(0);
    assert_eq!(
        store.finalize(&[discard(&job, "no")]).await.unwrap(),
        vec![Finalized::Applied],
        "the job ends"
    );
    let (length,): (i64,) = sqlx::query_as(&format!(
        "SELECT length(errors) FROM job_jobs WHERE id = {id}"
    ))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(length < 3 * 64 * 1024, "a history of {length} bytes");
    db.close().await;
}

#[tokio::test]
async fn text_that_is_not_utf8_never_stops_a_claim_a_rescue_or_a_listing() {
    // SQLite stores whatever bytes a raw write casts to TEXT, and no trigger can tell. One row
    // whose payload was not UTF-8 made every claim of its kind fail, and one such value in
    // any text column made the rescuer, the expirer, a pause read or a listing fail.
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    let not_utf8 = |prefix: &str| format!("CAST(x'{}ff' AS TEXT)", hex(prefix));
    let payload = payload_not_utf8();
    insert_raw(&store, "q", &[("payload", payload.as_str())])
        .await
        .unwrap();
    // Running on an expired lease, its history and its worker's name not UTF-8 either.
    let errors = format!(
        "CAST(x'{}ff{}' AS TEXT)",
        hex("[{\"attempt\":1,\"at\":\"2026-01-01T00:00:00Z\",\"class\":\"x\",\"message\":\""),
        hex("\"}]")
    );
    let locked_by = not_utf8("w");
    insert_raw(
        &store,
        "q",
        &[
            ("kind", "'other'"),
            ("state", "'running'"),
            ("attempt", "1"),
            ("lock_token", "x'00112233445566778899aabbccddeeff'"),
            ("locked_until", "0"),
            ("locked_by", locked_by.as_str()),
            ("errors", errors.as_str()),
        ],
    )
    .await
    .unwrap();
    let reason = not_utf8("r");
    raw(
        &store,
        &format!(
            "INSERT INTO job_pauses (scope, name, paused_by, reason, paused_at) \
             VALUES ('kind', 'nobody', 'operator', {reason}, 0)"
        ),
    )
    .await
    .unwrap();
    let ordinary = NewJob {
        queue: "q".into(),
        ..NewJob::new("k", "{}")
    };
    let ordinary = store.enqueue(ordinary).await.unwrap();

    let claimed = store.claim(&request("k", "q")).await;
    let claimed = claimed.expect("the claim reads past a payload that is not UTF-8");
    let ids: Vec<i64> = claimed.iter().map(|j| j.lease.id).collect();
    assert_eq!(ids, [ordinary], "only the readable job is handed over");
    let rescued = store
        .rescue_expired(10)
        .await
        .expect("the rescuer reads it");
    assert_eq!(rescued.retried, 1, "{rescued:?}");

    let listed = store
        .list(&job::JobFilter::default())
        .await
        .expect("a listing reads every row");
    let bad = listed
        .iter()
        .find(|j| j.kind == "k" && j.state == job::JobState::Discarded)
        .expect("the unreadable job is discarded");
    let last = bad.errors.last().expect("with its reason");
    assert!(last.message.contains("not valid UTF-8"), "{last:?}");
    let other = listed.iter().find(|j| j.kind == "other").unwrap();
    assert!(
        other.errors[0].message.contains('\u{fffd}'),
        "read back with U+FFFD: {:?}",
        other.errors
    );
    assert_eq!(other.state, job::JobState::Retryable);
    let pauses = store.pauses().await.expect("the pauses read");
    assert_eq!(pauses[0].reason.as_deref(), Some("r\u{fffd}"));
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(
        compensating.len(),
        1,
        "its compensation was enqueued and reads"
    );
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["job_id"], bad.id);
    assert_eq!(payload["discarded"]["payload_omitted"], true);
    assert!(payload["discarded"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid UTF-8"));
    db.close().await;
}

#[tokio::test]
async fn every_discard_of_a_payload_that_is_not_utf8_compensates_without_it() {
    // The claim's discard left such a payload out of the compensating job; the expirer's (a
    // deadline passed) and the rescuer's (attempts exhausted) copied it, and the compensating
    // job was then discarded at its own claim.
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    let payload = payload_not_utf8();
    insert_raw(
        &store,
        "q",
        &[("payload", payload.as_str()), ("deadline", "1")],
    )
    .await
    .unwrap();
    insert_raw(
        &store,
        "q",
        &[
            ("payload", payload.as_str()),
            ("state", "'running'"),
            ("attempt", "1"),
            ("max_attempts", "1"),
            ("lock_token", "x'00112233445566778899aabbccddeeff'"),
            // Its last attempt started (recorded, migration 0017: else the rescue retries it).
            ("started_lease", "x'00112233445566778899aabbccddeeff'"),
            ("locked_until", "0"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(store.expire(10).await.unwrap().discarded, 1);
    assert_eq!(store.rescue_expired(10).await.unwrap().discarded, 1);
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 2, "both compensations read");
    for job in &compensating {
        let payload: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
        assert_eq!(payload["discarded"]["payload_omitted"], true, "{payload}");
    }
    db.close().await;
}

#[tokio::test]
async fn a_redrive_reads_a_unique_key_that_is_not_utf8_byte_for_byte() {
    // The holder of a dead letter's key was looked up by the key as a listing shows it, with
    // U+FFFD for the bytes that are not UTF-8: it was missed, the redrive broke the unique
    // index, and the whole redrive failed.
    let db = TestSqlite::new().await;
    let store = db.store();
    let key = format!("CAST(x'{}ff' AS TEXT)", hex("key"));
    let dead = [
        ("state", "'discarded'"),
        ("finalized_at", "1"),
        ("unique_key", key.as_str()),
        ("unique_scope", "'finished'"),
    ];
    insert_raw(&store, "q", &dead).await.unwrap();
    let waiting = [("unique_key", key.as_str()), ("unique_scope", "'finished'")];
    insert_raw(&store, "q", &waiting).await.unwrap();
    let redriven = store
        .redrive(&job::JobFilter::default())
        .await
        .expect("the redrive goes through");
    assert_eq!(redriven.redriven, Vec::<i64>::new());
    assert_eq!(redriven.skipped, vec![(1, 2)], "held by the waiting job");
    db.close().await;
}

#[tokio::test]
async fn a_redrive_tells_unique_keys_apart_by_their_bytes() {
    // Two keys whose bytes differ only where they are not UTF-8 read the same as text (U+FFFD
    // for each such byte): the redrive took them for one key and sent back only the newest of
    // the two dead letters.
    let db = TestSqlite::new().await;
    let store = db.store();
    let key_ff = format!("CAST(x'{}ff' AS TEXT)", hex("key"));
    let key_fe = format!("CAST(x'{}fe' AS TEXT)", hex("key"));
    for key in [&key_ff, &key_fe, &key_ff] {
        let dead = [
            ("state", "'discarded'"),
            ("finalized_at", "1"),
            ("unique_key", key.as_str()),
            ("unique_scope", "'finished'"),
        ];
        insert_raw(&store, "q", &dead).await.unwrap();
    }
    let listed = store.list(&job::JobFilter::default()).await.unwrap();
    let shown: Vec<Option<&str>> = listed.iter().map(|j| j.unique_key.as_deref()).collect();
    assert_eq!(
        shown,
        [Some("key\u{FFFD}"); 3],
        "the keys read the same as text"
    );
    let redriven = store
        .redrive(&job::JobFilter::default())
        .await
        .expect("the redrive goes through");
    assert_eq!(redriven.redriven, vec![2, 3], "one of each key");
    assert_eq!(
        redriven.skipped,
        vec![(1, 3)],
        "the older of the same bytes"
    );
    db.close().await;
}

/// Registers kind `k` with the compensating kind `probe.undo` on queue `undo`.
async fn compensated_by_undo(store: &SqliteStore) {
    let undo = job::Compensate {
        kind: "probe.undo",
        queue: "undo",
        priority: 0,
        max_attempts: 25,
        version: 1,
    };
    store
        .register_kinds(&[("k".to_owned(), Some(undo))])
        .await
        .unwrap();
}

/// An SQL value of a JSON object payload whose one string holds a byte that is not UTF-8.
fn payload_not_utf8() -> String {
    format!("CAST(x'{}ff{}' AS TEXT)", hex("{\"a\":\""), hex("\"}"))
}

/// The hexadecimal digits of `text`'s bytes, for an SQL blob literal.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_lease_token_of_another_length_is_refused_and_one_stored_before_is_replaced() {
    // One running row whose token was not 16 bytes made every rescue pass fail (no expired
    // lease was rescued any more) and every listing that held it.
    let db = TestSqlite::new().await;
    let store = db.store();
    let running = |token: &'static str| {
        [
            ("state", "'running'"),
            ("attempt", "1"),
            ("lock_token", token),
            ("locked_until", "0"),
        ]
    };
    for token in ["x'00'", "x'00112233445566778899aabbccddeeff00'"] {
        let refused = insert_raw(&store, "q", &running(token)).await.unwrap_err();
        assert!(refused.to_string().contains("`lock_token`"), "{refused}");
    }
    insert_raw(&store, "q", &running("x'00112233445566778899aabbccddeeff'"))
        .await
        .unwrap();
    let refused = raw(&store, "UPDATE job_jobs SET lock_token = x'0011'")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("`lock_token`"), "{refused}");

    // As a file written before migration 0009 may hold it: the rules dropped, the row written,
    // then the migration run (again).
    for sql in [
        "DROP TRIGGER job_jobs_token_insert",
        "DROP TRIGGER job_jobs_token_update",
        "UPDATE job_jobs SET lock_token = x'00'",
        "DELETE FROM job_schema_migrations WHERE version = 9",
    ] {
        raw(&store, sql).await.unwrap();
    }
    store.migrate().await.unwrap();
    let rescued = store
        .rescue_expired(10)
        .await
        .expect("the rescuer reads it");
    assert_eq!(rescued.retried, 1, "{rescued:?}");
    let listed = store.list(&job::JobFilter::default()).await.unwrap();
    assert_eq!(listed[0].state, job::JobState::Retryable);
    let refused = insert_raw(&store, "q", &running("x'00'"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("`lock_token`"), "{refused}");
    db.close().await;
}

#[tokio::test]
async fn a_running_row_cannot_keep_the_started_scope_and_one_stored_before_is_repaired() {
    // A running row still `started` (a raw write that skipped the claim) let a second job of
    // its key in; the rescue of the running row then broke the unique index, and every rescue
    // pass of the file failed.
    let db = TestSqlite::new().await;
    let store = db.store();
    let running_started = [
        ("state", "'running'"),
        ("attempt", "1"),
        ("lock_token", "randomblob(16)"),
        ("locked_until", "0"),
        ("unique_key", "'key1'"),
        ("unique_scope", "'started'"),
    ];
    let refused = insert_raw(&store, "q", &running_started).await.unwrap_err();
    assert!(refused.to_string().contains("`unique_scope`"), "{refused}");

    // As a file written before migration 0010 may hold it: the rules dropped, the rows
    // written, then the migration run (again).
    for sql in [
        "DROP TRIGGER job_jobs_running_scope_insert",
        "DROP TRIGGER job_jobs_running_scope_update",
        "DELETE FROM job_schema_migrations WHERE version = 10",
    ] {
        raw(&store, sql).await.unwrap();
    }
    insert_raw(&store, "q", &running_started).await.unwrap();
    insert_raw(
        &store,
        "q",
        &[("unique_key", "'key1'"), ("unique_scope", "'started'")],
    )
    .await
    .expect("a second job of the key is let in");
    store.migrate().await.unwrap();
    let rescued = store
        .rescue_expired(10)
        .await
        .expect("the rescue breaks no unique index");
    assert_eq!(rescued.retried, 1, "{rescued:?}");
    let refused = raw(
        &store,
        "UPDATE job_jobs SET state = 'running', attempt = 1, lock_token = randomblob(16),
                locked_until = 0 WHERE state = 'available'",
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("`unique_scope`"), "{refused}");
    db.close().await;
}

/// A JSON object nested `depth` levels deep (SQLite's JSON reads up to 1000).
fn nested(depth: usize) -> String {
    format!(
        "{}{{}}{}",
        "{\"a\":".repeat(depth - 1),
        "}".repeat(depth - 1)
    )
}

#[tokio::test]
async fn a_payload_nested_as_deep_as_json_allows_is_discarded_with_its_compensation() {
    // A payload 999 or 1000 levels deep fits the table (SQLite's JSON reads up to 1000) but not
    // inside its compensating job's wrapping, two levels deeper: the compensating row failed
    // its CHECK, and with it every discard of the job, by the worker, the rescuer (whose every
    // pass then failed on it) or the expirer.
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    // Through a connection, unchecked (NewJob::new skips the Rust side's checks), as raw.
    let mut conn = store.pool().acquire().await.unwrap();
    let by_worker = job::sqlite::enqueue(&mut conn, &NewJob::new("k", nested(999)))
        .await
        .expect("the table takes a payload 999 levels deep");
    let fits = job::sqlite::enqueue(&mut conn, &NewJob::new("k", nested(998)))
        .await
        .unwrap();
    drop(conn);
    let deepest = format!("'{}'", nested(1000));
    // Its last attempt started (recorded, migration 0017: else the rescue retries it).
    let running = [
        ("payload", deepest.as_str()),
        ("state", "'running'"),
        ("attempt", "1"),
        ("max_attempts", "1"),
        ("lock_token", "x'00112233445566778899aabbccddeeff'"),
        ("started_lease", "x'00112233445566778899aabbccddeeff'"),
        ("locked_until", "0"),
    ];
    insert_raw(&store, "q", &running).await.unwrap();
    // Inserted with a deadline to come (one already past is refused, migration 0014), then
    // moved into the past.
    let past_deadline = [
        ("payload", deepest.as_str()),
        ("deadline", "253402300799999998"),
    ];
    insert_raw(&store, "q", &past_deadline).await.unwrap();
    raw(
        &store,
        "UPDATE job_jobs SET deadline = 1 WHERE deadline = 253402300799999998",
    )
    .await
    .unwrap();

    let claimed = claim(&store, "k", "default").await;
    assert_eq!(claimed.len(), 2);
    let discards: Vec<Finalize> = claimed.iter().map(|j| discard(j, "poison")).collect();
    assert_eq!(
        store
            .finalize(&discards)
            .await
            .expect("the discards go through"),
        vec![Finalized::Applied, Finalized::Applied]
    );
    let rescued = store
        .rescue_expired(10)
        .await
        .expect("the rescue goes through");
    assert_eq!(rescued.discarded, 1, "{rescued:?}");
    let expired = store.expire(10).await.expect("the expire goes through");
    assert_eq!(expired.discarded, 1, "{expired:?}");

    // What each compensating job says (read in SQL: serde_json reads 128 levels at most).
    let compensations: Vec<(i64, bool, Option<String>)> = sqlx::query_as(
        "SELECT payload ->> '$.discarded.job_id', payload ->> '$.discarded.payload_omitted',
                payload ->> '$.discarded.error.message'
         FROM job_jobs WHERE kind = 'probe.undo' ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(compensations.len(), 4, "{compensations:?}");
    for (job_id, omitted, message) in &compensations {
        assert_eq!(*omitted, *job_id != fits, "job {job_id}: {compensations:?}");
        assert!(message.is_some(), "with its error: {compensations:?}");
    }
    assert_eq!(compensations[0].0, by_worker);
    assert_eq!(compensations[0].2.as_deref(), Some("poison"));
    db.close().await;
}

/// The columns of a running row (for `insert_raw`) whose lease ended at `until`.
fn expired_lease(until: &'static str) -> [(&'static str, &'static str); 4] {
    [
        ("state", "'running'"),
        ("attempt", "1"),
        ("lock_token", "randomblob(16)"),
        ("locked_until", until),
    ]
}

#[tokio::test]
async fn a_row_the_database_will_not_take_never_stops_a_rescue_or_an_expire_pass() {
    // The rescuer and the expirer wrote every row they picked in one transaction and failed
    // whole on the first error; picking the same rows first every pass, one row the database
    // refused (here an application's trigger refuses it) stopped every pass of the file.
    let db = TestSqlite::new().await;
    let store = db.store();
    insert_raw(&store, "q", &expired_lease("0")).await.unwrap(); // 1: picked first
    insert_raw(&store, "q", &expired_lease("1")).await.unwrap(); // 2
    insert_raw(&store, "q", &[("deadline", "1")]).await.unwrap(); // 3: picked first
    insert_raw(&store, "q", &[("deadline", "2")]).await.unwrap(); // 4
    raw(
        &store,
        "CREATE TRIGGER app_refuses BEFORE UPDATE OF state ON job_jobs
         WHEN OLD.id IN (1, 3)
         BEGIN SELECT RAISE(ABORT, 'the application refuses this row'); END",
    )
    .await
    .unwrap();

    let rescued = store
        .rescue_expired(10)
        .await
        .expect("the rescue pass goes on past the refused row");
    assert_eq!(rescued.retried, 1, "{rescued:?}");
    let expired = store
        .expire(10)
        .await
        .expect("the expire pass goes on past the refused row");
    assert_eq!(expired.discarded, 1, "{expired:?}");
    let states: Vec<(i64, String)> = sqlx::query_as("SELECT id, state FROM job_jobs ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap();
    let states: Vec<(i64, &str)> = states.iter().map(|(i, s)| (*i, s.as_str())).collect();
    assert_eq!(
        states,
        [
            (1, "running"),
            (2, "retryable"),
            (3, "available"),
            (4, "discarded")
        ]
    );
    // The next passes still work, the refused rows skipped again.
    assert_eq!(store.rescue_expired(10).await.unwrap().retried, 0);
    assert_eq!(store.expire(10).await.unwrap().discarded, 0);
    db.close().await;
}

#[tokio::test]
async fn a_batch_full_of_refused_rows_never_stops_the_rest_of_a_rescue_or_an_expire() {
    // The refused rows stay first in each pick's order: as many of them as a pass's batch took
    // the whole batch every pass, and no other expired lease or deadline was ever handled. A
    // pass now leaves out the rows refused before (for ten minutes, then tries them again).
    let db = TestSqlite::new().await;
    let store = db.store();
    for until in ["0", "1", "2"] {
        insert_raw(&store, "q", &expired_lease(until))
            .await
            .unwrap(); // 1, 2, 3
    }
    for deadline in ["1", "2", "3"] {
        insert_raw(&store, "q", &[("deadline", deadline)])
            .await
            .unwrap(); // 4, 5, 6
    }
    raw(
        &store,
        "CREATE TRIGGER app_refuses BEFORE UPDATE OF state ON job_jobs
         WHEN OLD.id IN (1, 2, 4, 5)
         BEGIN SELECT RAISE(ABORT, 'the application refuses this row'); END",
    )
    .await
    .unwrap();
    // A batch of two: the first pass meets only refused rows.
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 0);
    assert_eq!(store.expire(2).await.unwrap().discarded, 0);
    // The next takes the others.
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 1);
    assert_eq!(store.expire(2).await.unwrap().discarded, 1);
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM job_jobs ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(
        states,
        [
            "running",
            "running",
            "retryable",
            "available",
            "available",
            "discarded"
        ]
    );
    db.close().await;
}

#[tokio::test]
async fn the_settings_row_cannot_be_deleted_and_its_limit_holds_without_it() {
    // `DELETE FROM job_settings` turned the payload limit off at every door and every
    // compensating job with it (the triggers joined the missing row); job-postgres refuses it.
    let db = TestSqlite::new().await;
    let store = db.store();
    compensated_by_undo(&store).await;
    let refused = raw(&store, "DELETE FROM job_settings").await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("job_settings keeps its one row"),
        "{refused}"
    );

    // A file whose row was deleted before migration 0013: the row is put back.
    for sql in [
        "DROP TRIGGER job_settings_keep_row",
        "DELETE FROM job_settings",
        "DELETE FROM job_schema_migrations WHERE version = 13",
    ] {
        raw(&store, sql).await.unwrap();
    }
    store.migrate().await.unwrap();
    let (rows, limit): (i64, i64) =
        sqlx::query_as("SELECT count(*), max(payload_limit) FROM job_settings")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!((rows, limit), (1, DEFAULT_PAYLOAD_LIMIT as i64));

    // And if the row is missing all the same, the default limit holds at every door and the
    // compensating jobs are still enqueued.
    for sql in [
        "DROP TRIGGER job_settings_keep_row",
        "DELETE FROM job_settings",
    ] {
        raw(&store, sql).await.unwrap();
    }
    let over = payload_of(DEFAULT_PAYLOAD_LIMIT + 1);
    let err = insert_raw(&store, "q", &[("payload", &format!("'{over}'"))])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`payload`"), "a raw insert: {err}");
    let err = store
        .enqueue(NewJob::new("k", over.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EnqueueError::PayloadTooLarge { limit, .. } if limit == DEFAULT_PAYLOAD_LIMIT),
        "the store's enqueue: {err:?}"
    );
    let id = store.enqueue(NewJob::new("k", "{\"n\":1}")).await.unwrap();
    let job = claim(&store, "k", "default").await.remove(0);
    store.finalize(&[discard(&job, "no")]).await.unwrap();
    let compensating = claim(&store, "probe.undo", "undo").await;
    assert_eq!(compensating.len(), 1, "its compensating job");
    let payload: serde_json::Value = serde_json::from_str(&compensating[0].payload).unwrap();
    assert_eq!(payload["discarded"]["job_id"], id);
    assert_eq!(payload["discarded"]["payload"], serde_json::json!({"n": 1}));
    db.close().await;
}

/// A job whose deadline is not after both its run time and now could never start: refused at
/// every door that inserts one (migration 0014, as job-postgres's 0033), naming `deadline`.
#[tokio::test]
async fn a_deadline_the_job_could_never_start_before_is_refused_at_every_door() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let now = chrono::Utc::now();
    let mixed = |run_at: job::RunAt, deadline: job::Deadline| {
        let mut job = NewJob::new("k", "{}");
        job.run_at = run_at;
        job.deadline = Some(deadline);
        job
    };
    for job in [
        mixed(
            job::RunAt::At(now + chrono::Duration::hours(1)),
            job::Deadline::In(Duration::from_secs(60)),
        ),
        mixed(
            job::RunAt::In(Duration::from_secs(3600)),
            job::Deadline::At(now + chrono::Duration::minutes(1)),
        ),
        mixed(
            job::RunAt::Now,
            job::Deadline::At(now - chrono::Duration::seconds(1)),
        ),
    ] {
        match store.enqueue(job).await {
            Err(EnqueueError::InvalidOption { option, reason }) => {
                assert_eq!(option, "deadline");
                assert!(reason.contains("could never start"), "{reason}");
            }
            other => panic!("expected the deadline refused, got {other:?}"),
        }
    }
    let error = raw(
        &store,
        "INSERT INTO job_jobs (kind, queue, payload, state, created_at, run_at, deadline) \
         VALUES ('k', 'q', '{}', 'available', 0, 0, 1)",
    )
    .await
    .expect_err("a raw insert of a past deadline is refused");
    assert!(error.to_string().contains("`deadline`"), "{error}");
    let kept = store
        .enqueue(mixed(
            job::RunAt::At(now + chrono::Duration::hours(1)),
            job::Deadline::In(Duration::from_secs(7200)),
        ))
        .await
        .expect("a deadline after the run time is kept");
    assert!(kept > 0);
}

#[tokio::test]
async fn a_step_breaking_the_bounds_is_refused_and_one_not_utf8_never_fails_a_load() {
    // PostgreSQL refuses these at the database; the file took them from any writer (a raw
    // write, a direct `Store::save_step`), and a worker then loaded them into every attempt.
    let db = TestSqlite::new().await;
    let store = db.store();
    let id = store
        .enqueue(NewJob::new("steps.probe", "{}"))
        .await
        .unwrap();
    let step = |name: &str, output: &str| {
        format!(
            "INSERT INTO job_steps (job_id, name, output, attempt, recorded_at) \
             VALUES ({id}, {name}, {output}, 1, 0)"
        )
    };
    let big = format!("'\"' || printf('%.*c', {}, 'a') || '\"'", 2 * 1024 * 1024);
    for (column, sql) in [
        ("name", step("'na' || char(0) || 'me'", "'1'")),
        ("output", step("'big'", &big)),
        ("output", step("'nul'", r#"'"x\u0000y"'"#)),
    ] {
        let err = raw(&store, &sql).await.expect_err(&sql).to_string();
        assert!(err.contains(&format!("`{column}`")), "{column}: {err}");
    }
    // Through the store, as a caller other than job-core's step API would.
    let lease = {
        store.stage_due(10).await.unwrap();
        claim(&store, "steps.probe", "default").await[0].lease
    };
    let refused = store
        .save_step(&lease, "nul", r#""\u0000""#)
        .await
        .expect_err("refused through the store too");
    assert!(refused.is_refused(), "{refused:?}");
    // Allowed: an escaped backslash before `u0000`.
    raw(&store, &step("'escaped'", r#"'"\\u0000"'"#))
        .await
        .unwrap();
    // A name and an output that are not UTF-8 (JSON by SQLite's reading): read with the
    // bytes replaced, as every reader of the file reads text, instead of failing every load.
    raw(
        &store,
        &step("CAST(x'ff61' AS TEXT)", "CAST(x'22ff22' AS TEXT)"),
    )
    .await
    .unwrap();
    let all = store.load_steps(&lease).await.expect("loads");
    assert_eq!(
        all.get("\u{fffd}a").map(String::as_str),
        Some("\"\u{fffd}\"")
    );
    let (loaded, complete) = store
        .load_steps_up_to(&lease, 1 << 20)
        .await
        .expect("loads");
    assert!(complete);
    assert_eq!(loaded.len(), 2, "{loaded:?}");
    assert_eq!(
        store.load_step(&lease, "\u{fffd}a").await.expect("loads"),
        None,
        "its name as stored is not that text"
    );
    db.close().await;
}

/// SQLite has no `pending` state (no ordering keys, no dependencies): a raw write of one is
/// refused by the table's CHECK, so no row can wait there for nothing (PostgreSQL's migration
/// 0040 releases such a row at its commit).
#[tokio::test]
async fn a_raw_pending_row_is_refused() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let refused = insert_raw(&store, "default", &[("state", "'pending'")])
        .await
        .expect_err("no pending state");
    assert!(refused.to_string().contains("CHECK"), "{refused}");
    let id = insert_raw(&store, "default", &[]).await.unwrap();
    let refused = sqlx::query("UPDATE job_jobs SET state = 'pending' WHERE id = ?1")
        .bind(id as i64)
        .execute(store.pool())
        .await
        .expect_err("no pending state");
    assert!(refused.to_string().contains("CHECK"), "{refused}");
    db.close().await;
}

/// A breaker row another writer gave counts at the edge of a 64-bit integer still counts and
/// trips: the sums are held below the bound (SQLite would turn them into floats) and the
/// comparison cannot overflow (it would panic in a debug build and wrap in a release one).
#[tokio::test]
async fn a_breaker_row_with_counts_at_the_integer_bound_still_counts_and_trips() {
    use job::{Breaker, BreakerCount};

    let db = TestSqlite::new().await;
    let store = db.store();
    let count = |attempts: u32, failures: u32| {
        vec![BreakerCount {
            kind: "doors.huge".into(),
            breaker: Breaker::new(50),
            attempts,
            failures,
        }]
    };
    assert!(store
        .record_breakers(&count(1, 0))
        .await
        .unwrap()
        .is_empty());
    raw(
        &store,
        "UPDATE job_breakers SET attempts = 9223372036854775807, failures = 9223372036854775000",
    )
    .await
    .unwrap();
    let tripped = store
        .record_breakers(&count(10, 10))
        .await
        .expect("the call counts");
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    assert!(
        tripped[0].reason.contains("attempts failed (99%)")
            || tripped[0].reason.contains("attempts failed (100%)"),
        "{}",
        tripped[0].reason
    );
    db.close().await;
}

/// `Store::record_breakers` is a door: counts or settings no worker sends are refused, naming
/// the kind and what is wrong, and nothing of the call is recorded, as PostgreSQL's
/// `job.breaker_record` refuses them. A `min_attempts` of 0 with a window of no attempts
/// divided by zero on the writer thread before.
#[tokio::test]
async fn breaker_counts_no_worker_sends_are_refused_naming_the_kind() {
    use job::{Breaker, BreakerCount};

    let db = TestSqlite::new().await;
    let store = db.store();
    let count = |kind: &str, breaker: Breaker, attempts: u32, failures: u32| BreakerCount {
        kind: kind.into(),
        breaker,
        attempts,
        failures,
    };
    let zero_minimum = Breaker {
        min_attempts: 0,
        ..Breaker::new(50)
    };
    for (counts, problem) in [
        (
            vec![count("doors.zero", zero_minimum, 0, 0)],
            "min_attempts must be 1 to 1000000, got 0",
        ),
        (
            // One bad kind refuses the whole call, the good one before it included.
            vec![
                count("doors.good", Breaker::new(50), 5, 5),
                count("doors.zero", zero_minimum, 3, 3),
            ],
            "min_attempts must be 1 to 1000000, got 0",
        ),
        (
            vec![count(
                "doors.percent",
                Breaker {
                    failure_percent: 0,
                    ..Breaker::new(50)
                },
                1,
                0,
            )],
            "failure_percent must be 1 to 100, got 0",
        ),
        (
            vec![count("doors.more", Breaker::new(50), 1, 2)],
            "2 failures of 1 attempts",
        ),
        (
            vec![count("", Breaker::new(50), 1, 0)],
            "the kind must not be empty",
        ),
    ] {
        let err = store
            .record_breakers(&counts)
            .await
            .expect_err("refused at the door");
        let kind = &counts.last().unwrap().kind;
        let message = err.to_string();
        assert!(
            err.is_refused()
                && message.contains(&format!("invalid breaker counts for kind {kind:?}"))
                && message.contains(problem),
            "{message}"
        );
    }
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM job_breakers")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(recorded, 0, "nothing of a refused call is recorded");
    assert!(store.pauses().await.unwrap().is_empty());
    // The store still counts after the refusals.
    let tripped = store
        .record_breakers(&[count(
            "doors.good",
            Breaker {
                min_attempts: 1,
                ..Breaker::new(50)
            },
            1,
            1,
        )])
        .await
        .unwrap();
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    db.close().await;
}

/// A pause written into the file by hand under a name no queue or kind can have is refused
/// (migration 22, as for a job's names since 7); one stored before is listed and resumed by
/// its name, and with no pause left the name is refused as a pause of it is.
#[tokio::test]
async fn a_pause_name_the_rule_refuses_is_refused_by_the_table_and_an_old_one_resumes() {
    use job::Pause;
    let db = TestSqlite::new().await;
    let store = db.store();
    for name in [
        "'mail '",
        "'ma' || char(8203) || 'il'",
        "''",
        "'a' || char(0)",
    ] {
        let refused = raw(
            &store,
            &format!("INSERT INTO job_pauses (scope, name, paused_at) VALUES ('queue', {name}, 0)"),
        )
        .await
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("pause refused: the name must be 1 to 128 bytes"),
            "{name}: {refused}"
        );
    }
    raw(
        &store,
        "INSERT INTO job_pauses (scope, name, paused_at) VALUES ('kind', 'ok.kind', 0)",
    )
    .await
    .unwrap();
    let renamed = raw(&store, "UPDATE job_pauses SET name = 'bad kind'")
        .await
        .unwrap_err();
    assert!(renamed.to_string().contains("pause refused"), "{renamed}");
    raw(&store, "DELETE FROM job_pauses").await.unwrap();

    // As stored before migration 22.
    raw(
        &store,
        "DROP TRIGGER job_pauses_names_insert;
         INSERT INTO job_pauses (scope, name, paused_at) VALUES ('queue', 'mail ', 0)",
    )
    .await
    .unwrap();
    let held = Pause::Queue("mail ".into());
    assert_eq!(store.paused().await.unwrap(), vec![held.clone()]);
    assert!(store.resume(&held).await.unwrap());
    assert_eq!(store.paused().await.unwrap(), []);
    let again = store.resume(&held).await.unwrap_err();
    assert!(again.is_refused(), "{again}");
    assert!(
        again.to_string().contains("U+0020 at character 5"),
        "{again}"
    );
    assert!(store.pause(&held).await.unwrap_err().is_refused());
}
