//! What one request may cost the database: a listing page reads what it shows, not the jobs'
//! payloads or error histories; no page or action waits on the database past its bound.

mod support;

use axum::http::StatusCode;
use job_testkit::TestDb;
use job_web::Dashboard;
use std::time::Duration;

use support::{csrf, discard, enqueue, get, login, post, state, CountingProxy};

const MIB: usize = 1 << 20;

#[tokio::test]
async fn a_listing_page_reads_no_payload_and_a_bounded_last_error() {
    let db = TestDb::new().await;
    let blob = serde_json::json!({ "blob": "p".repeat(MIB - 64) }).to_string();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(enqueue(&db, "bulky", &blob, "mail", None).await);
    }
    // Two dead letters, each with a history of a 1 MiB message then a 896 KiB last message
    // (a history is at most 2 MiB, migration 0025).
    for &id in &ids[..2] {
        discard(&db, id, "terminal", &"m".repeat(MIB)).await;
        sqlx::query(
            "UPDATE job.jobs SET errors = errors || jsonb_build_array(jsonb_build_object(
                 'attempt', 2, 'at', now(), 'class', 'poison', 'message', $2::text))
             WHERE id = $1",
        )
        .bind(id)
        .bind(format!("last words {}", "z".repeat(MIB - (128 << 10))))
        .execute(&db.pool())
        .await
        .unwrap();
    }
    let proxy = CountingProxy::start(&db).await;
    let pool = sqlx::PgPool::connect_with(proxy.options.clone())
        .await
        .unwrap();
    let router = Dashboard::new(job::PgStore::new(pool.clone())).router();

    let before = proxy.bytes_from_server();
    let page = get(&router, "/jobs", None).await;
    let read = proxy.bytes_from_server() - before;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for id in &ids {
        assert!(
            page.body.contains(&format!("data-id=\"{id}\"")),
            "job {id} listed"
        );
    }
    assert!(
        page.body.contains("poison") && page.body.contains("last words zzz"),
        "the last error is shown: {}",
        page.body
    );
    assert!(
        read < 64 << 10,
        "a page of 5 jobs with 1 MiB payloads read {read} bytes from the database"
    );

    // The job's own page still reads (and shows) everything.
    let before = proxy.bytes_from_server();
    let job = get(&router, &format!("/jobs/{}", ids[0]), None).await;
    let read = proxy.bytes_from_server() - before;
    assert_eq!(job.status, StatusCode::OK);
    assert!(job.body.contains(&"p".repeat(MIB - 64)) && job.body.contains(&"m".repeat(MIB)));
    assert!(
        read > (2 * MIB + MIB / 2) as u64,
        "the job's page read {read} bytes"
    );
    pool.close().await;
    db.close().await;
}

#[tokio::test]
async fn pages_and_actions_answer_503_while_the_jobs_table_is_locked() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    // 1 s: the pages loaded before the lock (a fresh connection and its session's setup
    // included) must answer within it on a loaded machine too.
    let config = job_web::DashboardConfig {
        answer_within: Duration::from_secs(1),
        ..Default::default()
    };
    let router = Dashboard::new(db.store())
        .operator_token("t0ken")
        .config(config)
        .router();
    let cookie = login(&router, "t0ken").await;
    let token = csrf(
        &get(&router, &format!("/jobs/{id}"), Some(&cookie))
            .await
            .body,
    );

    // Another session holds the lock a migration would.
    let mut locker = db.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE job.jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    // The outer timeout only keeps a hanging dashboard from hanging the test.
    let patience = Duration::from_secs(30);
    for path in [
        "/jobs".to_owned(),
        format!("/jobs/{id}"),
        "/".to_owned(),
        "/dead".to_owned(),
    ] {
        let page = tokio::time::timeout(patience, get(&router, &path, Some(&cookie)))
            .await
            .unwrap_or_else(|_| panic!("{path} gave no answer while the table was locked"));
        assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        assert!(
            page.body.contains("the database did not answer within 1 s"),
            "{path}: {}",
            page.body
        );
    }
    let idstr = id.to_string();
    let cancel = tokio::time::timeout(
        patience,
        post(
            &router,
            "/actions/cancel",
            &[("id", idstr.as_str()), ("csrf", token.as_str())],
            Some(&cookie),
        ),
    )
    .await
    .expect("the cancel gave no answer while the table was locked");
    assert_eq!(cancel.status, StatusCode::SERVICE_UNAVAILABLE);
    // Said by the database's error, or (should it come after the bound) by the bound itself.
    assert!(
        cancel.body.contains("the action was not done")
            || cancel.body.contains("may or may not have been done"),
        "{}",
        cancel.body
    );
    locker.rollback().await.unwrap();
    assert_eq!(get(&router, "/jobs", None).await.status, StatusCode::OK);
    db.close().await;
}

/// How many backends of the test database wait on a lock `locker` (a backend pid) holds.
#[tokio::test]
async fn an_answer_bound_out_of_range_is_taken_within_range() {
    let db = TestDb::new().await;
    enqueue(&db, "charge", "{}", "mail", None).await;
    // 30 days was past the longest `statement_timeout` PostgreSQL takes: every connection was
    // refused and the page waited for one for 30 days; `Duration::MAX` overflowed `Instant`.
    for within in [
        Duration::from_secs(30 * 24 * 3600),
        Duration::MAX,
        Duration::ZERO,
    ] {
        let config = job_web::DashboardConfig {
            answer_within: within,
            ..Default::default()
        };
        let router = Dashboard::new(db.store()).config(config).router();
        let request = tokio::spawn(async move { get(&router, "/jobs", None).await });
        let page = tokio::time::timeout(Duration::from_secs(30), request)
            .await
            .unwrap_or_else(|_| panic!("answer_within {within:?}: no answer after 30 s"))
            .unwrap_or_else(|e| panic!("answer_within {within:?}: the page panicked: {e}"));
        if within.is_zero() {
            // Taken as 100 ms: a loaded machine may not answer that fast, but never "0 s".
            assert!(
                page.status == StatusCode::OK || page.body.contains("within 0.1 s"),
                "{}: {}",
                page.status,
                page.body
            );
        } else {
            assert_eq!(page.status, StatusCode::OK, "{within:?}: {}", page.body);
        }
    }
}

#[tokio::test]
async fn the_largest_page_size_lists_jobs() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let config = job_web::DashboardConfig {
        page_size: u32::MAX,
        ..Default::default()
    };
    let router = Dashboard::new(db.store()).config(config).router();
    // `page_size + 1` overflowed in `PgStore::page`: the request panicked.
    let request = tokio::spawn(async move { get(&router, "/jobs", None).await });
    let page = request.await.expect("the page does not panic");
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(&format!("/jobs/{id}")), "{}", page.body);
}

#[tokio::test]
async fn the_longest_recent_window_counts_as_100_years() {
    let db = TestDb::new().await;
    enqueue(&db, "charge", "{}", "mail", None).await;
    let config = job_web::DashboardConfig {
        recent_window: Duration::MAX,
        ..Default::default()
    };
    let router = Dashboard::new(db.store()).config(config).router();
    // `now() - window` left PostgreSQL's timestamps: a 500 "timestamp out of range".
    let page = get(&router, "/", None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("mail"), "{}", page.body);
    let overview = db
        .store()
        .overview(10, Duration::MAX)
        .await
        .expect("an overview of the longest window");
    assert_eq!(overview.window, job::MAX_DURATION);
}

async fn waiting_on(db: &TestDb, locker: i32) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND $1 = ANY(pg_blocking_pids(pid))",
    )
    .bind(locker)
    .fetch_one(&db.pool())
    .await
    .unwrap()
}

/// Polls (up to 30 s) until no backend waits on `locker`'s lock; panics naming how many still do.
async fn until_none_waits_on(db: &TestDb, locker: i32, what: &str) {
    let cap = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = waiting_on(db, locker).await;
        if waiting == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < cap,
            "{what}: {waiting} backend(s) still wait on the lock 30 s later"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls (up to 30 s) until no other backend of the test database runs a statement.
async fn until_quiet(db: &TestDb) {
    let cap = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let active: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'",
        )
        .fetch_one(&db.pool())
        .await
        .unwrap();
        if active == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < cap,
            "{active} statement(s) still running 30 s later"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn abandoned_pages_stop_waiting_in_the_database_and_take_no_connection_of_the_application() {
    let db = TestDb::new().await;
    enqueue(&db, "charge", "{}", "mail", None).await;
    // The application's pool: two connections, which the stalled pages must not take.
    let app_pool = job::pool_options()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(db.connect_options())
        .await
        .unwrap();
    let n = 2;
    let config = job_web::DashboardConfig {
        answer_within: Duration::from_secs(1),
        connections: n,
        ..Default::default()
    };
    let router = Dashboard::new(job::PgStore::new(app_pool.clone()))
        .operator_token("t0ken")
        .config(config)
        .router();
    let cookie = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&cookie)).await.body);

    let mut locker = db.pool().begin().await.unwrap();
    let locker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *locker)
        .await
        .unwrap();
    sqlx::query("LOCK TABLE job.jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    // Twice as many stalled pages at once as the dashboard has connections.
    let patience = Duration::from_secs(30);
    let stalled = (0..2 * n).map(|i| {
        let router = router.clone();
        let path = if i % 2 == 0 { "/jobs" } else { "/" };
        async move {
            let page = tokio::time::timeout(patience, get(&router, path, None))
                .await
                .unwrap_or_else(|_| panic!("{path} gave no answer while the table was locked"));
            assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
            assert!(
                page.body
                    .contains("the database did not answer within 1 s: try again"),
                "{path}: {}",
                page.body
            );
        }
    });
    futures_join_all(stalled).await;

    // The lock is still held: what the pages abandoned must not wait on it any more.
    until_none_waits_on(&db, locker_pid, "after the pages answered 503").await;
    // The application's pool is whole ...
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&app_pool)
        .await
        .expect("the application's pool gives a connection while the dashboard is stalled");
    assert_eq!(one, 1);
    // ... and the dashboard's connections serve what does not touch job.jobs.
    let pause = post(
        &router,
        "/actions/pause",
        &[
            ("scope", "queue"),
            ("name", "mail"),
            ("csrf", token.as_str()),
        ],
        Some(&cookie),
    )
    .await;
    assert_eq!(pause.status, StatusCode::SEE_OTHER, "{}", pause.body);
    assert_eq!(
        pause.cookie("job_notice").as_deref(),
        Some("job_notice=paused"),
        "{:?}",
        pause.set_cookies
    );

    locker.rollback().await.unwrap();
    // n fresh pages at once, on the dashboard's n connections.
    let fresh = (0..n).map(|_| {
        let router = router.clone();
        async move {
            let page = tokio::time::timeout(patience, get(&router, "/jobs", None))
                .await
                .expect("a page once the lock is gone");
            assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        }
    });
    futures_join_all(fresh).await;
    let queues = get(&router, "/", None).await;
    assert_eq!(queues.status, StatusCode::OK, "{}", queues.body);
    assert!(queues.body.contains("paused"), "{}", queues.body);
    app_pool.close().await;
    db.close().await;
}

#[tokio::test]
async fn an_action_the_database_stopped_is_not_done_once_the_lock_is_gone() {
    let db = TestDb::new().await;
    let mut jobs = Vec::new();
    for _ in 0..6 {
        jobs.push(enqueue(&db, "charge", "{}", "mail", None).await);
    }
    for &id in &jobs[2..] {
        discard(&db, id, "terminal", "boom").await;
    }
    let [warm_cancel, waiting, warm_redrive, dead, warm_purge, purged] = jobs[..] else {
        unreachable!()
    };
    // One connection each, the application's and the dashboard's: the actions below find
    // their statements already prepared on it, so all that is left to send under the lock is
    // the statement's execution, which the server would run the moment the lock is gone.
    let app_pool = job::pool_options()
        .max_connections(1)
        .connect_with(db.connect_options())
        .await
        .unwrap();
    let config = job_web::DashboardConfig {
        answer_within: Duration::from_secs(1),
        connections: 1,
        ..Default::default()
    };
    let router = Dashboard::new(job::PgStore::new(app_pool.clone()))
        .operator_token("t0ken")
        .config(config)
        .router();
    let cookie = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&cookie)).await.body);
    for (path, id) in [
        ("/actions/cancel", warm_cancel),
        ("/actions/redrive", warm_redrive),
        ("/actions/purge", warm_purge),
    ] {
        let id = id.to_string();
        let answer = post(
            &router,
            path,
            &[
                ("id", id.as_str()),
                ("confirm", "yes"),
                ("csrf", token.as_str()),
            ],
            Some(&cookie),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::SEE_OTHER,
            "{path}: {}",
            answer.body
        );
    }

    let mut locker = db.pool().begin().await.unwrap();
    let locker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *locker)
        .await
        .unwrap();
    sqlx::query("LOCK TABLE job.jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    let patience = Duration::from_secs(30);
    let (waiting_id, dead_id, purged_id) =
        (waiting.to_string(), dead.to_string(), purged.to_string());
    let mut answers = Vec::new();
    for (path, id) in [
        ("/actions/cancel", &waiting_id),
        ("/actions/redrive", &dead_id),
        ("/actions/purge", &purged_id),
    ] {
        let answer = tokio::time::timeout(
            patience,
            post(
                &router,
                path,
                &[
                    ("id", id.as_str()),
                    ("confirm", "yes"),
                    ("csrf", token.as_str()),
                ],
                Some(&cookie),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{path} gave no answer while the table was locked"));
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        answers.push((path, answer.body));
    }
    let still_waiting = waiting_on(&db, locker_pid).await;
    locker.rollback().await.unwrap();
    // Whatever the dashboard left on the server would run now: none of it may be done.
    until_quiet(&db).await;
    assert_eq!(
        state(&db, waiting).await.as_deref(),
        Some("available"),
        "cancelled after the operator was told 503"
    );
    assert_eq!(
        state(&db, dead).await.as_deref(),
        Some("discarded"),
        "redriven after the operator was told 503"
    );
    assert_eq!(
        state(&db, purged).await.as_deref(),
        Some("discarded"),
        "purged after the operator was told 503"
    );
    assert_eq!(
        still_waiting, 0,
        "actions still waited on the lock after their 503"
    );
    for (path, body) in answers {
        assert!(
            body.contains(
                "the database did not answer within 1 s: the action was not done \
                 (the database stopped it), try again"
            ),
            "{path}: {body}"
        );
    }
    app_pool.close().await;
    db.close().await;
}

/// Runs every future at once and waits for them all.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

#[tokio::test]
async fn a_job_page_shows_a_bounded_share_of_a_value_that_pretty_printing_multiplies() {
    // 1 MiB of JSON within the payload limit (as PostgreSQL writes it: `0, ` per zero): 90
    // levels of arrays around 349,000 zeros. Pretty-printed, each zero gets a line of its own indented by 200 spaces: 100 MiB
    // of page, built in memory, past any request deadline (the rendering is synchronous).
    let db = TestDb::new().await;
    let depth = 90;
    let zeros = (MIB - 8 * depth) / 3 - 100;
    let payload = format!(
        "{{\"deep\":{}0{}{}}}",
        "[".repeat(depth),
        ",0".repeat(zeros - 1),
        "]".repeat(depth)
    );
    let id = enqueue(&db, "deep", &payload, "default", None).await;
    let router = Dashboard::new(db.store()).router();
    let page = get(&router, &format!("/jobs/{id}"), None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.len() < 3 * MIB,
        "the page is {} bytes for a payload of {} bytes",
        page.body.len(),
        payload.len()
    );
    assert!(page.body.contains("(cut at 2048 KiB"), "the cut is said");
    db.close().await;
}

#[tokio::test]
async fn a_job_page_reads_the_first_steps_and_no_large_output() {
    // A job may record any number of steps of up to 1 MiB each: its page read them all.
    let db = TestDb::new().await;
    let id = enqueue(&db, "stepped", "{}", "default", None).await;
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         SELECT $1, format('step %s', lpad(g::text, 3, '0')),
                jsonb_build_object('blob', repeat('s', 200000)), 1
         FROM generate_series(1, 150) g",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt, recorded_at)
         VALUES ($1, 'small', '{\"ok\": true}', 1, now() - interval '1 hour')",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let proxy = CountingProxy::start(&db).await;
    let pool = sqlx::PgPool::connect_with(proxy.options.clone())
        .await
        .unwrap();
    let router = Dashboard::new(job::PgStore::new(pool.clone())).router();
    let before = proxy.bytes_from_server();
    let page = get(&router, &format!("/jobs/{id}"), None).await;
    let read = proxy.bytes_from_server() - before;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        read < (MIB / 2) as u64,
        "a page of 151 steps of 200 KB read {read} bytes from the database"
    );
    assert!(
        page.body.contains("&quot;ok&quot;: true"),
        "a small output is shown"
    );
    assert!(
        page.body.contains("bytes of JSON, more than a page shows"),
        "a large output is named, not shown"
    );
    assert!(page.body.contains("Only the first 100 steps are shown"));
    assert!(page.body.contains("step 099") && !page.body.contains("step 100"));
    pool.close().await;
    db.close().await;
}

/// The most rows any node of `plan` (EXPLAIN ANALYZE VERBOSE, JSON) produced with an output
/// that computes `expression`.
fn rows_computing(plan: &serde_json::Value, expression: &str) -> f64 {
    let here = plan["Output"].as_array().is_some_and(|out| {
        out.iter()
            .any(|o| o.as_str().is_some_and(|o| o.contains(expression)))
    });
    let rows = if here {
        plan["Actual Rows"].as_f64().unwrap_or(0.0) * plan["Actual Loops"].as_f64().unwrap_or(1.0)
    } else {
        0.0
    };
    plan["Plans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| rows_computing(p, expression))
        .fold(rows, f64::max)
}

#[tokio::test]
async fn a_job_page_sizes_only_the_steps_it_shows_and_reads_sizes_stored_with_them() {
    // Sized as text before its LIMIT, every output of the job was decompressed and printed (a
    // review: 400 steps of 1.9 MB, 8.5 s a view). Steps written before migration 0049 have no
    // stored size: 150 of them here.
    let db = TestDb::new().await;
    let id = enqueue(&db, "stepped", "{}", "default", None).await;
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         SELECT $1, format('step %s', lpad(g::text, 3, '0')), jsonb_build_object('n', g), 1
         FROM generate_series(1, 150) g",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let statement = include_str!("../../job-postgres/src/sql/inspect_steps_shown.sql");
    let mut conn = db.pool().acquire().await.unwrap();
    sqlx::raw_sql(&format!(
        "PREPARE shown (bigint, text, integer, integer) AS {statement}"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    let (plan,): (serde_json::Value,) = sqlx::query_as(&format!(
        "EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) EXECUTE shown({id}, NULL, 65536, 101)"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let sized = rows_computing(&plan[0]["Plan"], "octet_length");
    assert!(
        (1.0..=101.0).contains(&sized),
        "the statement sized {sized} steps' outputs to show 100: {plan}"
    );
    // A step the store saves carries its size: the page reads it, not the output.
    sqlx::query("UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = $2, locked_until = now() + interval '1 hour' WHERE id = $1")
        .bind(id)
        .bind(uuid::Uuid::nil())
        .execute(&db.pool())
        .await
        .unwrap();
    let output = serde_json::json!({ "blob": "b".repeat(100_000) }).to_string();
    let lease = job::Lease {
        id,
        token: uuid::Uuid::nil(),
    };
    let store = db.store();
    use job::Store as _;
    assert!(store
        .save_step(&lease, "saved", &output)
        .await
        .unwrap()
        .written());
    let stored: Option<i32> = sqlx::query_scalar(
        "SELECT output_bytes FROM job.steps WHERE job_id = $1 AND name = 'saved'",
    )
    .bind(id)
    .fetch_one(&db.pool())
    .await
    .unwrap();
    assert_eq!(stored, Some(output.len() as i32));
    db.close().await;
}

#[tokio::test]
async fn the_queues_page_counts_the_first_thousand_queues_by_name() {
    // One job in each of many queues: the page probed every queue, then looked each row's
    // counts up in a list (quadratic in the queues).
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue)
         SELECT 'spread', format('q%s', lpad(g::text, 5, '0')) FROM generate_series(1, 1001) g",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).router();
    let page = get(&router, "/", None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page
        .body
        .contains("More than 1000 queues have waiting jobs"));
    assert!(page.body.contains("data-queue=\"q01000\""));
    assert!(!page.body.contains("data-queue=\"q01001\""));
    db.close().await;
}

#[tokio::test]
async fn the_queues_page_marks_what_a_capped_sample_only_bounds() {
    // Past the cap, the oldest due job of a queue may not be among the jobs read (they are
    // read in claim-index order: kind, priority, run time), and the throughput counts only the
    // finished jobs read: both were shown as if exact ("oldest due 1s" over a job due for
    // three hours).
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, queue)
         SELECT 'a_fast', 'backlog' FROM generate_series(1, 20);
         INSERT INTO job.jobs (kind, queue, run_at)
         VALUES ('b_slow', 'backlog', now() - interval '3 hours');
         INSERT INTO job.jobs (kind, queue, state, finalized_at)
         SELECT 'done', 'fast', 'completed', now() - interval '1 minute'
         FROM generate_series(1, 30)",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let config = job_web::DashboardConfig {
        count_cap: 10,
        ..Default::default()
    };
    let router = Dashboard::new(db.store()).config(config).router();
    let page = get(&router, "/", None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let row = |queue: &str| {
        let at = page
            .body
            .find(&format!("data-queue=\"{queue}\""))
            .unwrap_or_else(|| panic!("a row for {queue}: {}", page.body));
        let end = at + page.body[at..].find("</tr>").unwrap();
        page.body[at..end].to_owned()
    };
    let backlog = row("backlog");
    assert!(
        backlog.contains("≥ "),
        "the oldest due is a lower bound: {backlog}"
    );
    let fast = row("fast");
    assert!(fast.contains("10+"), "{fast}");
    assert!(
        fast.contains("2.0+"),
        "the rate is a lower bound too: {fast}"
    );
    assert!(page.body.contains("ages with ≥ are lower bounds"));
    db.close().await;
}

#[tokio::test]
async fn the_queues_overview_reads_ten_caps_of_waiting_jobs_in_all_and_marks_only_what_it_cut() {
    // Each queue's waiting jobs were read up to the cap, of each kind of state: 250 queues of
    // 10,000 waiting made the page read 5,000,000 rows, past its bound. And a queue whose
    // available and later jobs were counted exactly was marked as cut when together they
    // reached the cap.
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, queue)
         SELECT 'wide', format('q%s', lpad((g % 30)::text, 2, '0')) FROM generate_series(1, 1500) g;
         INSERT INTO job.jobs (kind, queue) SELECT 'exact', 'x' FROM generate_series(1, 6);
         INSERT INTO job.jobs (kind, queue, state, run_at)
         SELECT 'exact', 'x', 'scheduled', now() + interval '1 hour' FROM generate_series(1, 4)",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let overview = db
        .store()
        .overview(10, Duration::from_secs(60))
        .await
        .unwrap();
    // 31 queues with available jobs share 100 rows: 3 each.
    assert_eq!(overview.queue_cap, 3, "{overview:?}");
    let read: u64 = overview.queues.iter().map(|q| q.available).sum();
    assert!(
        read <= 100,
        "{read} available jobs read for a budget of 100"
    );
    let q = |name: &str| overview.queues.iter().find(|q| q.queue == name).unwrap();
    assert_eq!((q("q07").available, q("q07").waiting_capped), (3, true));
    // Its 4 scheduled jobs are the only queue of later jobs: read whole, exactly.
    assert_eq!(q("x").scheduled, 4);
    sqlx::query("DELETE FROM job.jobs WHERE kind = 'wide'")
        .execute(&db.pool())
        .await
        .unwrap();
    let exact = db
        .store()
        .overview(10, Duration::from_secs(60))
        .await
        .unwrap();
    let x = exact.queues.iter().find(|q| q.queue == "x").unwrap();
    assert_eq!((x.available, x.scheduled), (6, 4));
    assert!(
        !x.waiting_capped,
        "6 available and 4 scheduled were all read: {x:?}"
    );
    db.close().await;
}

#[tokio::test]
async fn a_tenants_overview_reads_no_more_of_other_tenants_jobs_than_the_cap() {
    // The tenant filter was applied to the index's rows before the LIMIT: the overview read
    // every other tenant's job ahead of this tenant's (a review: 2.5 M rows, a parallel
    // scan of the whole table for each part, 1.6-2.0 s).
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, queue, tenant) SELECT 'a', 'shared', 'big' FROM generate_series(1, 50);
         INSERT INTO job.jobs (kind, queue, tenant) VALUES ('b', 'shared', 'small');
         INSERT INTO job.jobs (kind, queue, tenant) SELECT 'a', 'own', 'small' FROM generate_series(1, 2);
         INSERT INTO job.jobs (kind, queue, tenant, state, finalized_at)
         SELECT 'a', 'shared', 'big', 'discarded', now() FROM generate_series(1, 50);
         INSERT INTO job.jobs (kind, queue, tenant, state, finalized_at)
         VALUES ('b', 'shared', 'small', 'discarded', now() + interval '1 minute')",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let overview = db
        .store()
        .for_tenant("small")
        .overview(10, Duration::from_secs(3600))
        .await
        .unwrap();
    // The queue 'shared': its first 10 available jobs (claim order: kind 'a' first) are big's.
    assert!(overview.waiting_unseen, "{overview:?}");
    assert!(
        overview.is_capped("discarded"),
        "the dead letters read were big's: small's count is a lower bound"
    );
    let own = overview.queues.iter().find(|q| q.queue == "own").unwrap();
    assert_eq!((own.available, own.waiting_capped), (2, false));
    let shared_waiting: u64 = overview
        .queues
        .iter()
        .filter(|q| q.queue == "shared")
        .map(|q| q.available)
        .sum();
    assert_eq!(
        shared_waiting, 0,
        "only the first 10 jobs of the queue were read"
    );
    db.close().await;
}

#[tokio::test]
async fn the_queues_page_shows_the_first_thousand_queues_and_pauses_and_says_how_many_more() {
    // Every paused queue got a row and the list of pauses was complete: 50,000 pauses made
    // a page of 46 MB.
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO job.pauses (scope, name)
         SELECT 'queue', format('q%s', lpad(g::text, 5, '0')) FROM generate_series(1, 3000) g",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let cookie = login(&router, "t0ken").await;
    let page = get(&router, "/", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", &page.body[..500]);
    let rows = page.body.matches("<tr data-queue=").count();
    let pauses = page.body.matches("<li>queue <code>").count();
    assert_eq!((rows, pauses), (1000, 1000), "{} bytes", page.body.len());
    assert!(page.body.contains("data-queue=\"q01000\""));
    assert!(!page.body.contains("data-queue=\"q01001\""));
    assert!(
        page.body.contains("2000 more queues are not shown"),
        "{}",
        &page.body[page.body.len() - 2000..]
    );
    assert!(page.body.contains("2000 more pauses"));
    assert!(page.body.contains("`job paused` lists them all"));
    assert!(page.body.len() < 2 << 20, "{} bytes", page.body.len());
    db.close().await;
}

#[tokio::test]
async fn a_form_whose_body_does_not_arrive_is_answered_408_not_as_the_databases_silence() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = TestDb::new().await;
    let config = job_web::DashboardConfig {
        answer_within: Duration::from_millis(500),
        ..Default::default()
    };
    let router = Dashboard::new(db.store())
        .operator_token("t0ken")
        .config(config)
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A body of 100 bytes is announced; 4 come, and the client goes quiet.
    stream
        .write_all(
            b"POST /actions/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nid=1",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while !String::from_utf8_lossy(&answer).contains("</html>") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("the form did not arrive within 0.5 s: nothing was done"),
        "{answer}"
    );
    assert!(!answer.contains("database"), "{answer}");
    server.abort();
    db.close().await;
}
