//! What one request may cost the database: a listing page reads what it shows, not the jobs'
//! payloads or error histories; no page or action waits on the database past its bound.

mod support;

use axum::http::StatusCode;
use job_testkit::TestDb;
use job_web::Dashboard;
use std::time::Duration;

use support::{csrf, discard, enqueue, get, login, post, CountingProxy};

const MIB: usize = 1 << 20;

#[tokio::test]
async fn a_listing_page_reads_no_payload_and_a_bounded_last_error() {
    let db = TestDb::new().await;
    let blob = serde_json::json!({ "blob": "p".repeat(MIB - 64) }).to_string();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(enqueue(&db, "bulky", &blob, "mail", None).await);
    }
    // Two dead letters, each with a history of a 1 MiB message then a 1 MiB last message.
    for &id in &ids[..2] {
        discard(&db, id, "terminal", &"m".repeat(MIB)).await;
        sqlx::query(
            "UPDATE job.jobs SET errors = errors || jsonb_build_array(jsonb_build_object(
                 'attempt', 2, 'at', now(), 'class', 'poison', 'message', $2::text))
             WHERE id = $1",
        )
        .bind(id)
        .bind(format!("last words {}", "z".repeat(MIB)))
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
    assert!(read > 3 * MIB as u64, "the job's page read {read} bytes");
    pool.close().await;
    db.close().await;
}

#[tokio::test]
async fn pages_and_actions_answer_503_while_the_jobs_table_is_locked() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let config = job_web::DashboardConfig {
        answer_within: Duration::from_millis(300),
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
            page.body
                .contains("the database did not answer within 0.3 s"),
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
    assert!(
        cancel.body.contains("may or may not have been done"),
        "{}",
        cancel.body
    );
    locker.rollback().await.unwrap();
    assert_eq!(get(&router, "/jobs", None).await.status, StatusCode::OK);
    db.close().await;
}
