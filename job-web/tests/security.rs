//! The dashboard's guarantees, each against a real database: values from payloads and errors
//! are escaped, it is read-only without an operator token, every action needs the session's
//! CSRF token, the token is checked, and a tenant's dashboard reaches that tenant only.

mod support;

use axum::http::StatusCode;
use job_testkit::TestDb;
use job_web::{Dashboard, DashboardConfig};
use support::{csrf, discard, enqueue, get, hidden, login, login_from, post, post_raw, state};

const SCRIPT: &str = "<script>alert('owned')</script>";

#[tokio::test]
async fn payloads_errors_and_steps_are_escaped_on_every_page() {
    let db = TestDb::new().await;
    let payload = serde_json::json!({ "note": SCRIPT, "html": "<img src=x onerror=alert(1)>" });
    let id = enqueue(&db, "<b>kind</b>", &payload.to_string(), "mail", None).await;
    discard(&db, id, "terminal", &format!("failed: {SCRIPT}")).await;
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, '<i>step</i>', $2, 1)",
    )
    .bind(id)
    .bind(serde_json::json!(SCRIPT))
    .execute(&db.pool())
    .await
    .unwrap();
    // A completed job with a progress report and a result, both holding markup.
    let done = enqueue(&db, "report", "{}", "mail", None).await;
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', attempt = 1, finalized_at = now(),
                progress = $2, progress_at = now(), result = $3
         WHERE id = $1",
    )
    .bind(done)
    .bind(serde_json::json!({ "fraction": 1.0, "message": SCRIPT }))
    .bind(serde_json::json!({ "rows": 3, "html": "<img src=x onerror=alert(2)>" }))
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let cookie = login(&router, "t0ken").await;
    for path in [
        format!("/jobs/{id}"),
        format!("/jobs/{done}"),
        "/dead".to_owned(),
        "/jobs".to_owned(),
        "/jobs?kind=%3Cscript%3E".to_owned(),
        "/".to_owned(),
    ] {
        let page = get(&router, &path, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(
            !page.body.contains("<script"),
            "{path} holds a raw <script>: {}",
            page.body
        );
        assert!(!page.body.contains("<img"), "{path} holds a raw <img>");
        assert!(!page.body.contains("<b>kind"), "{path} holds a raw <b>");
        assert!(!page.body.contains("<i>step"), "{path} holds a raw <i>");
    }
    let job = get(&router, &format!("/jobs/{id}"), Some(&cookie))
        .await
        .body;
    assert!(
        job.contains("&lt;script&gt;alert('owned')&lt;/script&gt;"),
        "{job}"
    );
    assert!(
        job.contains("failed: &lt;script&gt;"),
        "the error message is shown, escaped"
    );
    assert!(
        job.contains("&lt;i&gt;step&lt;/i&gt;"),
        "the step is shown, escaped"
    );
    let completed = get(&router, &format!("/jobs/{done}"), Some(&cookie))
        .await
        .body;
    assert!(
        completed.contains("<h2>Progress</h2>") && completed.contains("&lt;script&gt;alert"),
        "the progress is shown, escaped: {completed}"
    );
    assert!(
        completed.contains("<h2>Result</h2>")
            && completed.contains("&quot;rows&quot;: 3")
            && completed.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "the result is shown, escaped: {completed}"
    );
    db.close().await;
}

#[tokio::test]
async fn pages_forbid_scripts_and_framing() {
    let db = TestDb::new().await;
    let router = Dashboard::new(db.store()).router();
    let response = tower::ServiceExt::oneshot(
        router,
        axum::http::Request::get("/")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"));
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    db.close().await;
}

#[tokio::test]
async fn an_application_with_a_fallback_of_its_own_merges_the_dashboard_and_keeps_it() {
    // axum allows one fallback: a dashboard router with its own (a nicer 404 page) would make
    // this merge panic at the application's startup.
    let db = TestDb::new().await;
    let app = axum::Router::new()
        .fallback(|| async { (StatusCode::NOT_FOUND, "the application's own 404") })
        .merge(Dashboard::new(db.store()).router());
    assert_eq!(get(&app, "/", None).await.status, StatusCode::OK);
    let missing = get(&app, "/nothing", None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body, "the application's own 404");
    db.close().await;
}

#[tokio::test]
async fn an_address_with_no_page_answers_the_dashboards_404_page() {
    // axum's default fallback answered a 404 with an empty body: no page, no way back.
    let db = TestDb::new().await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    let long = "x".repeat(4000);
    for (path, says) in [
        ("/nothing".to_owned(), "no page at /nothing".to_owned()),
        (
            "/jobs/1/more".to_owned(),
            "no page at /jobs/1/more".to_owned(),
        ),
        (
            "/a&b%3Cscript%3E".to_owned(),
            "no page at /a&amp;b%3Cscript%3E".to_owned(),
        ),
        (format!("/{long}"), format!("no page at /{}…", &long[..119])),
    ] {
        let page = get(&router, &path, Some(&op)).await;
        let shown = &path[..20.min(path.len())];
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{shown}");
        assert!(page.body.starts_with("<!DOCTYPE html>"), "{}", page.body);
        assert!(page.body.contains(&says), "{shown}: {}", page.body);
        assert!(
            page.body.contains(r#"<a href="/">Back to the queues</a>"#),
            "{}",
            page.body
        );
        // The dashboard's frame: its stylesheet, navigation and who is logged in.
        assert!(page.body.contains("/assets/dashboard.css"), "{}", page.body);
        assert!(page.body.contains(r#"href="/dead""#), "{}", page.body);
        assert!(page.body.contains("operator"), "{}", page.body);
        assert!(!page.body.contains(&"x".repeat(121)), "{shown}");
        assert!(!page.body.contains("<script"), "{shown}");
    }
    // A job that does not exist is the same page, saying so.
    let missing = get(&router, "/jobs/424242", None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("no job 424242"), "{}", missing.body);
    assert!(
        missing
            .body
            .contains(r#"<a href="/">Back to the queues</a>"#),
        "{}",
        missing.body
    );
    assert!(
        missing.body.contains("/assets/dashboard.css"),
        "{}",
        missing.body
    );
    // Under `nest_service` the dashboard answers the addresses under its mount point, and the
    // way back follows it.
    let app = axum::Router::new().nest_service("/ops/jobs", Dashboard::new(db.store()).router());
    let nested = get(&app, "/ops/jobs/nothing", None).await;
    assert_eq!(nested.status, StatusCode::NOT_FOUND);
    assert!(
        nested.body.contains("no page at /ops/jobs/nothing"),
        "{}",
        nested.body
    );
    assert!(
        nested
            .body
            .contains(r#"<a href="/ops/jobs">Back to the queues</a>"#),
        "{}",
        nested.body
    );
    // Under `nest` axum sends them to the application's fallback (here axum's empty 404), as
    // `Dashboard::router` says: a dashboard fallback would make `merge` panic, and a catch-all
    // route would take the addresses of an application that merges the dashboard.
    let app = axum::Router::new().nest("/ops/jobs", Dashboard::new(db.store()).router());
    let outside = get(&app, "/ops/jobs/nothing", None).await;
    assert_eq!(outside.status, StatusCode::NOT_FOUND);
    assert_eq!(outside.body, "");
    db.close().await;
}

#[tokio::test]
async fn without_an_operator_token_it_is_read_only() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let dead = enqueue(&db, "charge", "{}", "mail", None).await;
    discard(&db, dead, "terminal", "boom").await;
    let router = Dashboard::new(db.store()).router();
    for path in ["/", "/jobs", "/dead", &format!("/jobs/{dead}")] {
        let page = get(&router, path, None).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            !page.body.contains("method=\"post\""),
            "{path} offers an action"
        );
        assert!(page.body.contains("read-only"));
    }
    // Even a forged session cookie and any CSRF value act on nothing.
    let forged = Some("job_operator=abc.1.00");
    let idstr = id.to_string();
    let deadstr = dead.to_string();
    for (path, form) in [
        (
            "/actions/cancel",
            vec![("id", idstr.as_str()), ("csrf", "x")],
        ),
        (
            "/actions/redrive",
            vec![("id", deadstr.as_str()), ("csrf", "x")],
        ),
        (
            "/actions/purge",
            vec![("id", deadstr.as_str()), ("csrf", "x")],
        ),
        (
            "/actions/pause",
            vec![("scope", "queue"), ("name", "mail"), ("csrf", "x")],
        ),
    ] {
        let answer = post(&router, path, &form, forged).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(
        post(&router, "/login", &[("token", "")], None).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));
    assert_eq!(state(&db, dead).await.as_deref(), Some("discarded"));
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM job.pauses")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(paused, 0);
    db.close().await;
}

#[tokio::test]
async fn the_operator_token_is_checked() {
    let db = TestDb::new().await;
    let router = Dashboard::new(db.store())
        .operator_token("right-token")
        .router();
    for wrong in ["", "right", "right-token ", "RIGHT-TOKEN"] {
        let answer = post(&router, "/login", &[("token", wrong)], None).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{wrong:?}");
        assert!(answer.set_cookie.is_none());
    }
    let cookie = login(&router, "right-token").await;
    let page = get(&router, "/", Some(&cookie)).await.body;
    assert!(page.contains("operator"));
    // A session made by another token's dashboard is nobody here.
    let other = Dashboard::new(db.store()).operator_token("other").router();
    let foreign = login(&other, "other").await;
    assert!(get(&router, "/", Some(&foreign))
        .await
        .body
        .contains("Log in"));
    db.close().await;
}

#[tokio::test]
async fn every_action_needs_the_sessions_csrf_token() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let alice = login(&router, "t0ken").await;
    let bob = login(&router, "t0ken").await;
    let page = get(&router, &format!("/jobs/{id}"), Some(&alice))
        .await
        .body;
    let alice_csrf = csrf(&page);
    let bob_csrf = csrf(&get(&router, "/", Some(&bob)).await.body);
    assert_ne!(alice_csrf, bob_csrf);
    let idstr = id.to_string();
    for (form, why) in [
        (vec![("id", idstr.as_str())], "no token"),
        (vec![("id", idstr.as_str()), ("csrf", "")], "an empty token"),
        (
            vec![("id", idstr.as_str()), ("csrf", "00ff")],
            "a made-up token",
        ),
        (
            vec![("id", idstr.as_str()), ("csrf", bob_csrf.as_str())],
            "another session's token",
        ),
    ] {
        let answer = post(&router, "/actions/cancel", &form, Some(&alice)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{why}");
    }
    // The right token without the session cookie: not an operator.
    let answer = post(
        &router,
        "/actions/cancel",
        &[("id", &idstr), ("csrf", &alice_csrf)],
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));

    let answer = post(
        &router,
        "/actions/cancel",
        &[("id", &idstr), ("csrf", &alice_csrf)],
        Some(&alice),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(
        answer.location.as_deref(),
        Some(format!("/jobs/{id}").as_str())
    );
    assert_eq!(state(&db, id).await.as_deref(), Some("cancelled"));
    let notice = answer.cookie("job_notice").unwrap();
    assert_eq!(notice, "job_notice=cancelled");
    let shown = get(
        &router,
        answer.location.as_deref().unwrap(),
        Some(&format!("{alice}; {notice}")),
    )
    .await
    .body;
    assert!(shown.contains("Cancelled."));
    db.close().await;
}

#[tokio::test]
async fn redrive_purge_pause_and_resume_from_the_pages() {
    let db = TestDb::new().await;
    let a = enqueue(&db, "charge", "{}", "mail", None).await;
    let b = enqueue(&db, "charge", "{}", "mail", None).await;
    let c = enqueue(&db, "charge", "{}", "other", None).await;
    for id in [a, b, c] {
        discard(&db, id, "terminal", "boom").await;
    }
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    let dead = get(&router, "/dead", Some(&op)).await.body;
    let (token, seen_at) = (csrf(&dead), hidden(&dead, "seen_at"));
    // A dead letter arriving after the page was read: the bulk purge confirmed from that page
    // must not reach it.
    let d = enqueue(&db, "charge", "{}", "other", None).await;
    discard(&db, d, "terminal", "boom").await;
    let (astr, bstr) = (a.to_string(), b.to_string());
    let answer = post(
        &router,
        "/actions/redrive",
        &[("id", &astr), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(state(&db, a).await.as_deref(), Some("available"));
    let answer = post(
        &router,
        "/actions/purge",
        &[("id", &bstr), ("csrf", &token)],
        Some(&op),
    )
    .await;
    // A purge of one job needs the box ticked too.
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(answer.body.contains("confirmation box"), "{}", answer.body);
    assert_eq!(state(&db, b).await.as_deref(), Some("discarded"));
    let answer = post(
        &router,
        "/actions/purge",
        &[("id", &bstr), ("confirm", "yes"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(state(&db, b).await, None);
    // Purging everything matching needs the box ticked.
    let unticked = post(
        &router,
        "/actions/purge",
        &[("all", "1"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(unticked.status, StatusCode::BAD_REQUEST);
    assert_eq!(state(&db, c).await.as_deref(), Some("discarded"));
    // A bulk form without the time its page was read: refused, nothing purged.
    let unseen = post(
        &router,
        "/actions/purge",
        &[("all", "1"), ("confirm", "yes"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(unseen.status, StatusCode::BAD_REQUEST);
    assert!(unseen.body.contains("`seen_at`"), "{}", unseen.body);
    assert_eq!(state(&db, c).await.as_deref(), Some("discarded"));
    let ticked = post(
        &router,
        "/actions/purge",
        &[
            ("all", "1"),
            ("confirm", "yes"),
            ("seen_at", &seen_at),
            ("csrf", &token),
        ],
        Some(&op),
    )
    .await;
    assert_eq!(ticked.location.as_deref(), Some("/dead"));
    let notice = ticked.cookie("job_notice").unwrap();
    assert_eq!(notice, "job_notice=purged.1");
    assert_eq!(state(&db, c).await, None);
    assert_eq!(
        state(&db, d).await.as_deref(),
        Some("discarded"),
        "a dead letter that arrived after the page was read is left alone"
    );
    let shown = get(&router, "/dead", Some(&format!("{op}; {notice}"))).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert!(shown.body.contains("Purged 1 dead letter(s)."));

    let answer = post(
        &router,
        "/actions/pause",
        &[("scope", "queue"), ("name", "mail"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.location.as_deref(), Some("/"));
    assert_eq!(answer.cookie("job_notice").unwrap(), "job_notice=paused");
    let page = get(&router, "/", Some(&op)).await.body;
    assert!(page.contains("paused"), "{page}");
    let answer = post(
        &router,
        "/actions/resume",
        &[("scope", "queue"), ("name", "mail"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.location.as_deref(), Some("/"));
    assert_eq!(answer.cookie("job_notice").unwrap(), "job_notice=resumed");

    // A pause written by hand under a name no queue can have, before the table refused one
    // (migration 0065): the page lists it and its resume button resumes it; with no pause
    // left, the name is refused (400) as a pause of it is.
    sqlx::raw_sql(
        "ALTER TABLE job.pauses DISABLE TRIGGER pauses_names;
         INSERT INTO job.pauses (scope, name) VALUES ('queue', 'mail ');
         ALTER TABLE job.pauses ENABLE TRIGGER pauses_names;",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let form = [("scope", "queue"), ("name", "mail "), ("csrf", &token)];
    let answer = post(&router, "/actions/resume", &form, Some(&op)).await;
    assert_eq!(answer.cookie("job_notice").unwrap(), "job_notice=resumed");
    let pauses: i64 = sqlx::query_scalar("SELECT count(*) FROM job.pauses")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(pauses, 0);
    let answer = post(&router, "/actions/resume", &form, Some(&op)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(
        answer.body.contains("U+0020 at character 5"),
        "{}",
        answer.body
    );
    db.close().await;
}

#[tokio::test]
async fn a_tenants_dashboard_shows_and_touches_that_tenant_only() {
    let db = TestDb::new().await;
    let mine = enqueue(&db, "charge", r#"{"who": "acme"}"#, "mail", Some("acme")).await;
    let theirs = enqueue(
        &db,
        "charge",
        r#"{"who": "globex-secret"}"#,
        "mail",
        Some("globex"),
    )
    .await;
    let nobodys = enqueue(&db, "charge", r#"{"who": "untenanted"}"#, "mail", None).await;
    for id in [mine, theirs, nobodys] {
        discard(&db, id, "terminal", "boom").await;
    }
    let router = Dashboard::for_tenant(db.store().for_tenant("acme"))
        .operator_token("t0ken")
        .router();
    let op = login(&router, "t0ken").await;
    for path in [
        "/",
        "/jobs",
        "/dead",
        "/jobs?tenant=globex",
        "/dead?tenant=globex",
    ] {
        let page = get(&router, path, Some(&op)).await.body;
        assert!(
            !page.contains("globex-secret") && !page.contains("untenanted"),
            "{path}"
        );
        assert!(!page.contains(&format!("data-id=\"{theirs}\"")), "{path}");
        assert!(!page.contains(&format!("data-id=\"{nobodys}\"")), "{path}");
    }
    assert!(get(&router, "/dead", Some(&op))
        .await
        .body
        .contains(&format!("data-id=\"{mine}\"")));
    assert_eq!(
        get(&router, &format!("/jobs/{theirs}"), Some(&op))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&router, &format!("/jobs/{nobodys}"), Some(&op))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let page = get(&router, "/", Some(&op)).await.body;
    assert!(page.contains("tenant acme"));
    assert!(
        !page.contains("/actions/pause"),
        "a tenant's dashboard offers no pause"
    );

    let dead = get(&router, "/dead", Some(&op)).await.body;
    let (token, seen_at) = (csrf(&dead), hidden(&dead, "seen_at"));
    let theirs_str = theirs.to_string();
    for path in ["/actions/redrive", "/actions/purge", "/actions/cancel"] {
        post(
            &router,
            path,
            &[("id", &theirs_str), ("confirm", "yes"), ("csrf", &token)],
            Some(&op),
        )
        .await;
    }
    post(
        &router,
        "/actions/redrive",
        &[("all", "1"), ("seen_at", &seen_at), ("csrf", &token)],
        Some(&op),
    )
    .await;
    post(
        &router,
        "/actions/purge",
        &[
            ("all", "1"),
            ("confirm", "yes"),
            ("tenant", "globex"),
            ("seen_at", &seen_at),
            ("csrf", &token),
        ],
        Some(&op),
    )
    .await;
    assert_eq!(state(&db, theirs).await.as_deref(), Some("discarded"));
    assert_eq!(state(&db, nobodys).await.as_deref(), Some("discarded"));
    assert_eq!(
        state(&db, mine).await.as_deref(),
        Some("available"),
        "its own dead letter was redriven"
    );
    let pause = post(
        &router,
        "/actions/pause",
        &[("scope", "queue"), ("name", "mail"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(pause.status, StatusCode::FORBIDDEN);
    db.close().await;
}

#[tokio::test]
async fn a_tenants_dashboard_shows_no_pause_of_another_tenants_queue_or_kind() {
    // job.pauses records no tenant, and a tenant's dashboard listed every pause in force:
    // other tenants' queue and kind names with them.
    let db = TestDb::new().await;
    enqueue(&db, "charge", "{}", "mail", Some("acme")).await;
    enqueue(
        &db,
        "globex-secret-kind",
        "{}",
        "globex-secret-queue",
        Some("globex"),
    )
    .await;
    let store = db.store();
    for what in [
        job::Pause::Queue("mail".into()),
        job::Pause::Queue("globex-secret-queue".into()),
        job::Pause::Kind("globex-secret-kind".into()),
        job::Pause::Kind("charge".into()),
    ] {
        job::Admin::pause(&store, &what).await.unwrap();
    }
    let router = Dashboard::for_tenant(store.for_tenant("acme"))
        .operator_token("t0ken")
        .router();
    let op = login(&router, "t0ken").await;
    let page = get(&router, "/", Some(&op)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("globex-secret"), "{}", page.body);
    assert!(
        page.body.contains("queue <code>mail</code>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("kind <code>charge</code>"),
        "{}",
        page.body
    );
    // The dashboard over every tenant still shows them all.
    let all = Dashboard::new(db.store()).router();
    let page = get(&all, "/", None).await.body;
    assert!(
        page.contains("queue <code>globex-secret-queue</code>"),
        "{page}"
    );
    assert!(
        page.contains("kind <code>globex-secret-kind</code>"),
        "{page}"
    );
    db.close().await;
}

#[tokio::test]
async fn links_and_cookies_follow_the_mount_point() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let app = axum::Router::new().nest(
        "/ops/jobs",
        Dashboard::new(db.store()).operator_token("t").router(),
    );
    let answer = post(&app, "/ops/jobs/login", &[("token", "t")], None).await;
    assert!(answer
        .set_cookie
        .as_deref()
        .unwrap()
        .contains("Path=/ops/jobs;"));
    assert!(answer
        .set_cookie
        .as_deref()
        .unwrap()
        .contains("HttpOnly; SameSite=Strict"));
    let cookie = answer.cookie("job_operator").unwrap();
    // The operator lands on the dashboard's root, `/ops/jobs`: under `nest`, axum routes no
    // `/ops/jobs/`.
    let location = answer.location.as_deref().unwrap();
    let notice = answer.cookie("job_notice").unwrap();
    assert!(answer.set_cookies[1].contains("Path=/ops/jobs;"));
    let landed = get(&app, location, Some(&format!("{cookie}; {notice}"))).await;
    assert_eq!(
        landed.status,
        StatusCode::OK,
        "{location}: {:?}",
        landed.body
    );
    assert!(landed.body.contains("Logged in"), "{}", landed.body);
    assert_eq!(location, "/ops/jobs");
    let page = get(&app, "/ops/jobs", Some(&cookie)).await.body;
    assert!(page.contains(r#"href="/ops/jobs/assets/dashboard.css""#));
    assert!(
        page.contains(r#"<a href="/ops/jobs" class="current">Queues</a>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"href="/ops/jobs/jobs?queue=mail""#),
        "{page}"
    );
    let list = get(&app, "/ops/jobs/jobs", Some(&cookie)).await.body;
    assert!(list.contains(&format!(r#"href="/ops/jobs/jobs/{id}""#)));
    assert!(list.contains(r#"action="/ops/jobs/logout""#));
    db.close().await;
}

#[tokio::test]
async fn listing_pages_go_back_in_bounded_windows() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for n in 0..7 {
        ids.push(
            enqueue(
                &db,
                if n % 3 == 0 { "rare" } else { "common" },
                "{}",
                "mail",
                None,
            )
            .await,
        );
    }
    let config = job_web::DashboardConfig {
        page_size: 2,
        page_scan: 3,
        ..Default::default()
    };
    let router = Dashboard::new(db.store()).config(config).router();
    // Newest first, two per page.
    let first = get(&router, "/jobs", None).await.body;
    assert!(
        first.contains(&format!("data-id=\"{}\"", ids[6]))
            && first.contains(&format!("data-id=\"{}\"", ids[5]))
    );
    assert!(!first.contains(&format!("data-id=\"{}\"", ids[4])));
    assert!(first.contains(&format!("before={}", ids[5])), "{first}");
    // A rare kind: each page looks at three ids at most, and says where to go on.
    let rare = get(&router, "/jobs?kind=rare", None).await.body;
    assert!(rare.contains(&format!("data-id=\"{}\"", ids[6])));
    assert!(!rare.contains(&format!("data-id=\"{}\"", ids[3])));
    assert!(rare.contains(&format!("before={}", ids[4])), "{rare}");
    db.close().await;
}

#[tokio::test]
async fn a_breakers_pause_shows_who_paused_why_and_until_when() {
    let db = TestDb::new().await;
    let store = db.store();
    let breaker = job::Breaker {
        min_attempts: 2,
        ..job::Breaker::new(50)
    };
    let tripped = job::Store::record_breakers(
        &store,
        &[job::BreakerCount {
            kind: "charge".into(),
            breaker,
            attempts: 2,
            failures: 2,
        }],
    )
    .await
    .unwrap();
    assert_eq!(tripped.len(), 1);
    let router = Dashboard::new(store).router();
    let page = get(&router, "/", None).await.body;
    assert!(
        page.contains("kind <code>charge</code> by breaker until "),
        "{page}"
    );
    assert!(
        page.contains("circuit breaker: 2 of 2 attempts failed (100%)"),
        "{page}"
    );
    db.close().await;
}

#[tokio::test]
async fn values_serde_cannot_read_and_fields_postgres_cannot_take_answer_cleanly() {
    let db = TestDb::new().await;
    // JSON nested deeper than serde_json reads (128 levels), stored through the SQL door.
    let deep = |levels: usize| format!(r#"{{"a":{}1{}}}"#, "[".repeat(levels), "]".repeat(levels));
    let dead = enqueue(&db, "deep", &deep(200), "mail", None).await;
    discard(&db, dead, "poison", "too deep").await;
    let done = enqueue(&db, "deep", "{}", "mail", None).await;
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', attempt = 1, finalized_at = now(),
                progress = $2::jsonb, progress_at = now(), result = $3::jsonb
         WHERE id = $1",
    )
    .bind(done)
    .bind(deep(300))
    .bind(deep(300))
    .execute(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, 's', $2::jsonb, 1)",
    )
    .bind(done)
    .bind(deep(200))
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    for path in [
        format!("/jobs/{dead}"),
        format!("/jobs/{done}"),
        "/dead".to_owned(),
        "/jobs".to_owned(),
        "/jobs?kind=deep".to_owned(),
        "/".to_owned(),
    ] {
        let page = get(&router, &path, Some(&op)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
    }
    let job = get(&router, &format!("/jobs/{dead}"), Some(&op)).await.body;
    assert!(
        job.contains("[[[[[[[[[["),
        "the payload is shown as its text: {job}"
    );

    // A NUL in a filter field: refused, naming the field, not a database error.
    for (path, field) in [
        ("/jobs?kind=%00", "kind"),
        ("/jobs?queue=a%00b", "queue"),
        ("/jobs?tag=%00", "tag"),
        ("/jobs?tenant=%00", "tenant"),
        ("/dead?kind=%00", "kind"),
    ] {
        let page = get(&router, path, Some(&op)).await;
        assert_eq!(
            page.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            page.body
        );
        assert!(
            page.body.contains(&format!("`{field}`")),
            "{path}: {}",
            page.body
        );
    }
    let token = csrf(&get(&router, "/dead", Some(&op)).await.body);
    let answer = post(
        &router,
        "/actions/redrive",
        &[("all", "1"), ("kind", "\0"), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    // A pause of a name no queue or kind can have: refused, naming it, nothing paused.
    let long = "q".repeat(200);
    for name in ["has space", "a\0b", long.as_str()] {
        let answer = post(
            &router,
            "/actions/pause",
            &[("scope", "queue"), ("name", name), ("csrf", &token)],
            Some(&op),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{name:?}: {}",
            answer.body
        );
        assert!(answer.body.contains("`name`"), "{}", answer.body);
    }
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM job.pauses")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(paused, 0);
    db.close().await;
}

#[tokio::test]
async fn form_and_query_fields_that_are_not_utf8_are_refused_naming_the_field() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let cookie = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&cookie)).await.body);
    for (path, body, field) in [
        (
            "/actions/pause",
            format!("name=%ff&scope=kind&csrf={token}"),
            "`name`",
        ),
        (
            "/actions/pause",
            format!("name=mail&scope=%c3&csrf={token}"),
            "`scope`",
        ),
        (
            "/actions/resume",
            format!("name=mail%e2%82&scope=queue&csrf={token}"),
            "`name`",
        ),
        (
            "/actions/cancel",
            format!("id={id}&csrf={token}&note=%ff"),
            "`note`",
        ),
        (
            "/actions/redrive",
            format!("all=1&kind=%ff&csrf={token}"),
            "`kind`",
        ),
        (
            "/actions/purge",
            format!("all=1&confirm=yes&tag=%80&csrf={token}"),
            "`tag`",
        ),
        (
            "/actions/cancel",
            format!("id={id}&csrf={token}&%ff=1"),
            "name is not UTF-8",
        ),
        ("/login", "token=%ff".to_owned(), "`token`"),
    ] {
        let answer = post_raw(&router, path, &body, Some(&cookie)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{path} {body}");
        assert!(
            answer.body.contains(field),
            "{path} {body}: {}",
            answer.body
        );
    }
    for (path, field) in [
        ("/jobs?kind=%ff", "`kind`"),
        ("/jobs?state=available&queue=%c3%28", "`queue`"),
        ("/dead?tenant=%ff", "`tenant`"),
        ("/jobs?tag=x%fe", "`tag`"),
        ("/?done=%ff", "`done`"),
        ("/?done=purged&n=%ff", "`n`"),
        (&format!("/jobs/{id}?n=%ff"), "`n`"),
        ("/login?%ff", "name is not UTF-8"),
    ] {
        let page = get(&router, path, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(page.body.contains(field), "{path}: {}", page.body);
    }
    // Nothing was paused, cancelled or resumed; UTF-8 names still work.
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM job.pauses")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(paused, 0);
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));
    assert_eq!(
        get(&router, "/jobs?kind=%D0%BE%D1%87", None).await.status,
        StatusCode::OK
    );
    let answer = post_raw(
        &router,
        "/actions/pause",
        &format!("name=%D0%BE%D1%87&scope=kind&csrf={token}"),
        Some(&cookie),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    db.close().await;
}

/// A number field or path id that does not parse is refused naming the field and what is wrong,
/// repeating a bounded share of the value; an empty field is unset; a job id in the path that
/// does not parse gets the dashboard's error page.
#[tokio::test]
async fn number_fields_that_do_not_parse_are_refused_naming_the_field() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let dead = enqueue(&db, "charge", "{}", "mail", None).await;
    discard(&db, dead, "terminal", "boom").await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let cookie = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&cookie)).await.body);
    let long = "9".repeat(5_000);
    let junk = "x".repeat(5_000);
    for (path, says) in [
        (
            "/jobs?before=abc".to_owned(),
            r#"`before` must be a job id (a whole number, in digits only), got &quot;abc&quot;"#,
        ),
        (
            "/dead?before=12x".to_owned(),
            "`before` must be a job id (a whole number, in digits only)",
        ),
        (
            format!("/jobs?before={long}"),
            "`before` must be at most 9223372036854775807",
        ),
        (
            format!("/jobs?before={junk}"),
            "`before` must be a job id (a whole number, in digits only)",
        ),
        (
            "/jobs?state=finished".to_owned(),
            "`state` must be one of pending, scheduled, available, running, retryable, \
             completed, cancelled, discarded, got &quot;finished&quot;",
        ),
        (
            format!("/jobs?state={}", &junk[..100]),
            "`state` must be one of",
        ),
        (
            format!("/jobs?kind={}", &junk[..129]),
            "`kind` must be at most 128 bytes, got 129",
        ),
        (
            format!("/dead?tag={junk}"),
            "`tag` must be at most 128 bytes, got 5000",
        ),
        (format!("/jobs?{junk}=%ff"), "is not UTF-8 text"),
        ("/jobs?kind=a&kind=b".to_owned(), "duplicate field `kind`"),
    ] {
        let page = get(&router, &path, Some(&cookie)).await;
        assert_eq!(
            page.status,
            StatusCode::BAD_REQUEST,
            "{}",
            &path[..40.min(path.len())]
        );
        assert!(page.body.contains(says), "{says}: {}", page.body);
        assert!(page.body.starts_with("<!DOCTYPE html>"), "{}", page.body);
        // At most 40 characters of the value are repeated.
        assert!(
            !page.body.contains(&"9".repeat(41)) && !page.body.contains(&"x".repeat(41)),
            "{}",
            page.body
        );
    }
    // Empty is unset, as for every field of the listing pages.
    for path in [
        "/jobs?before=",
        "/dead?before=",
        "/dead?before=&kind=&state=",
    ] {
        let page = get(&router, path, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
    }
    assert!(get(&router, "/dead?before=", None)
        .await
        .body
        .contains(&format!("data-id=\"{dead}\"")));

    for (action, body, says) in [
        (
            "/actions/cancel",
            format!("id=abc&csrf={token}"),
            "`id` must be a job id (a whole number, in digits only), got &quot;abc&quot;",
        ),
        (
            "/actions/redrive",
            format!("id={long}&csrf={token}"),
            "`id` must be at most 9223372036854775807",
        ),
        (
            "/actions/purge",
            format!("id={id}x&csrf={token}"),
            "`id` must be a job id (a whole number, in digits only)",
        ),
        // Empty is unset: no job named.
        (
            "/actions/cancel",
            format!("id=&csrf={token}"),
            "`id` is required",
        ),
        (
            "/actions/redrive",
            format!("id=&csrf={token}"),
            "name a job (`id`) or `all`",
        ),
        (
            "/actions/purge",
            format!("id=&all=&csrf={token}"),
            "name a job (`id`) or `all`",
        ),
    ] {
        let answer = post_raw(&router, action, &body, Some(&cookie)).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{action} {}",
            &body[..20]
        );
        assert!(answer.body.contains(says), "{says}: {}", answer.body);
        assert!(!answer.body.contains(&"9".repeat(41)), "{}", answer.body);
    }
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));
    assert_eq!(state(&db, dead).await.as_deref(), Some("discarded"));

    // A job id in the path that does not parse: the dashboard's error page, as for no job.
    for (path, says) in [
        "/jobs/abc".to_owned(),
        "/jobs/%ff".to_owned(),
        "/jobs/1.5".to_owned(),
        format!("/jobs/{long}"),
        format!("/jobs/{junk}"),
    ]
    .iter()
    .zip([
        "the path's job id must be a whole number, in digits only, got &quot;abc&quot;",
        "the path's job id is not UTF-8 text",
        "got &quot;1.5&quot;",
        "the path's job id must be at most 9223372036854775807",
        "must be a whole number",
    ]) {
        let page = get(&router, path, Some(&cookie)).await;
        assert_eq!(
            page.status,
            StatusCode::NOT_FOUND,
            "{}",
            &path[..20.min(path.len())]
        );
        assert!(page.body.starts_with("<!DOCTYPE html>"), "{}", page.body);
        assert!(page.body.contains("no such job"), "{}", page.body);
        assert!(page.body.contains(says), "{says}: {}", page.body);
        assert!(
            !page.body.contains(&"9".repeat(41)) && !page.body.contains(&"x".repeat(41)),
            "{}",
            page.body
        );
    }
    let missing = get(&router, "/jobs/0", Some(&cookie)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("no job 0"), "{}", missing.body);
    db.close().await;
}

#[tokio::test]
async fn after_ten_wrong_tokens_in_a_minute_logging_in_is_refused() {
    let db = TestDb::new().await;
    let router = Dashboard::new(db.store())
        .operator_token("right-token")
        .router();
    let session = login(&router, "right-token").await;
    for n in 0..10 {
        let answer = post(&router, "/login", &[("token", "guess")], None).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "guess {n}");
    }
    // Now even the right token is refused, or a guess could still tell.
    for token in ["guess", "right-token"] {
        let answer = post(&router, "/login", &[("token", token)], None).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{token}");
        assert!(answer.set_cookie.is_none());
        assert!(
            answer.body.contains("logging in is refused for"),
            "{}",
            answer.body
        );
    }
    // A session opened before still acts.
    assert!(get(&router, "/", Some(&session))
        .await
        .body
        .contains("Log out"));
    // Another dashboard (another process) counts its own.
    let other = Dashboard::new(db.store())
        .operator_token("right-token")
        .router();
    login(&other, "right-token").await;
    db.close().await;
}

/// Served with the peer's address, the bound is per client: one host guessing locks out only
/// itself (an IPv6 host by its /64); many hosts together are bounded too.
#[tokio::test]
async fn a_client_guessing_locks_out_only_itself() {
    let db = TestDb::new().await;
    let router = Dashboard::new(db.store())
        .operator_token("right-token")
        .router();
    let guesser = "203.0.113.9:40000";
    for n in 0..10 {
        let answer = login_from(&router, "guess", guesser).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "guess {n}");
    }
    for token in ["guess", "right-token"] {
        let answer = login_from(&router, token, guesser).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{token}");
    }
    // Another port of the same host is the same client.
    let answer = login_from(&router, "right-token", "203.0.113.9:40001").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // The operator, elsewhere, logs in.
    let answer = login_from(&router, "right-token", "198.51.100.4:50000").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert!(answer.set_cookie.is_some());
    // An IPv6 host is its /64: another address of the same /64 is the same client.
    for n in 0..10 {
        let from = format!("[2001:db8:5:6::{n}]:1000");
        let answer = login_from(&router, "guess", &from).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "guess {n}");
    }
    let answer = login_from(&router, "right-token", "[2001:db8:5:6::ff]:1000").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let answer = login_from(&router, "right-token", "[2001:db8:5:7::1]:1000").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    // Many hosts: 100 wrong logins in all within the minute refuse every login.
    for n in 0..80 {
        let from = format!("192.0.2.{n}:1000");
        let answer = login_from(&router, "guess", &from).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "guess from {from}");
    }
    let answer = login_from(&router, "right-token", "198.51.100.4:50000").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    db.close().await;
}

/// Behind a proxy that appends to `X-Forwarded-For`, told so (`forwarded_hops`), each client
/// is counted by the address the proxy recorded, not by the proxy's: one client guessing locks
/// out only itself. What a client wrote into the header itself is not believed.
#[tokio::test]
async fn behind_a_trusted_proxy_a_client_guessing_locks_out_only_itself() {
    let db = TestDb::new().await;
    let config = DashboardConfig {
        forwarded_hops: 1,
        ..DashboardConfig::default()
    };
    let router = Dashboard::new(db.store())
        .operator_token("right-token")
        .config(config)
        .router();
    let via_proxy = |token: &str, forwarded: &str| {
        let body = serde_urlencoded::to_string([("token", token)]).unwrap();
        let mut request = axum::http::Request::post("/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-forwarded-for", forwarded)
            .body(axum::body::Body::from(body))
            .unwrap();
        let proxy: std::net::SocketAddr = "10.0.0.1:443".parse().unwrap();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(proxy));
        support::send(&router, request)
    };
    for n in 0..10 {
        // The guesser writes a new address of its own into the header each time: the proxy
        // appends the one it saw, which is what counts.
        let forged = format!("192.0.2.{n}, 203.0.113.9");
        let answer = via_proxy("guess", &forged).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "guess {n}");
    }
    let answer = via_proxy("right-token", "203.0.113.9").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    let answer = via_proxy("right-token", "198.51.100.4").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    db.close().await;
}

/// A POST to `path` as a browser on another site sends it.
async fn cross_site_post(
    router: &axum::Router,
    path: &str,
    form: &[(&str, &str)],
    cookie: Option<&str>,
    headers: &[(&str, &str)],
) -> support::Answer {
    let mut request =
        axum::http::Request::post(path).header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        request = request.header("cookie", c);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = serde_urlencoded::to_string(form).unwrap();
    support::send(router, request.body(axum::body::Body::from(body)).unwrap()).await
}

#[tokio::test]
async fn logins_and_actions_from_another_site_are_refused() {
    // The login form has no session, so no CSRF token: a page on any site could post wrong
    // tokens to it and lock every operator out for as long as it stayed open.
    let db = TestDb::new().await;
    let id = enqueue(&db, "mail", "{}", "default", None).await;
    let router = Dashboard::new(db.store())
        .operator_token("right-token")
        .router();
    for n in 0..12 {
        let answer = cross_site_post(
            &router,
            "/login",
            &[("token", "guess")],
            None,
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "post {n}");
        assert!(
            answer.body.contains("comes from another site"),
            "{}",
            answer.body
        );
    }
    // None of them counted as a wrong login.
    let session = login(&router, "right-token").await;
    let page = get(&router, &format!("/jobs/{id}"), Some(&session)).await;
    let token = csrf(&page.body);
    // A browser without `Sec-Fetch-Site` says where the form was with `Origin`.
    for headers in [
        &[("sec-fetch-site", "same-site")][..],
        &[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080"),
        ][..],
        &[("origin", "null"), ("host", "127.0.0.1:8080")][..],
    ] {
        let id = id.to_string();
        let answer = cross_site_post(
            &router,
            "/actions/cancel",
            &[("id", &id), ("csrf", &token)],
            Some(&session),
            headers,
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{headers:?}");
    }
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));
    // The dashboard's own pages post from the same origin.
    let answer = cross_site_post(
        &router,
        "/actions/cancel",
        &[("id", &id.to_string()), ("csrf", &token)],
        Some(&session),
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(state(&db, id).await.as_deref(), Some("cancelled"));
    db.close().await;
}

#[tokio::test]
async fn with_allowed_hosts_a_request_to_another_host_name_is_refused() {
    // Reading needs no login: a page on another site that points its own name at the
    // dashboard's address (DNS rebinding) could read every job, its requests carrying its name.
    let db = TestDb::new().await;
    let config = job_web::DashboardConfig {
        allowed_hosts: vec!["localhost".into(), "127.0.0.1".into()],
        ..Default::default()
    };
    let router = Dashboard::new(db.store()).config(config).router();
    let with_host = |host: Option<&'static str>| {
        let mut request = axum::http::Request::get("/");
        if let Some(h) = host {
            request = request.header("host", h);
        }
        request.body(axum::body::Body::empty()).unwrap()
    };
    for host in [
        Some("rebind.evil.example:8080"),
        Some("localhost.evil.example"),
        None,
    ] {
        let answer = support::send(&router, with_host(host)).await;
        assert_eq!(answer.status, StatusCode::MISDIRECTED_REQUEST, "{host:?}");
    }
    for host in ["localhost:8080", "LOCALHOST", "127.0.0.1:8080"] {
        let answer = support::send(&router, with_host(Some(host))).await;
        assert_eq!(answer.status, StatusCode::OK, "{host}");
    }
    db.close().await;
}

/// Characters that make text read as other text, or that a terminal or a copy acts on: bidi
/// controls, line separators, zero-width and other format characters, C0 and C1 controls.
const HIDDEN: &[char] = &[
    '\u{202E}',
    '\u{2066}',
    '\u{200F}',
    '\u{061C}',
    '\u{200B}',
    '\u{2028}',
    '\u{2029}',
    '\u{00AD}',
    '\u{2060}',
    '\u{FEFF}',
    '\u{E0041}',
    '\u{1b}',
    '\u{7}',
    '\u{7f}',
    '\u{85}',
];

#[tokio::test]
async fn invisible_and_bidi_characters_of_stored_text_are_shown_as_escapes() {
    let db = TestDb::new().await;
    let payload = serde_json::json!({
        "file": "\u{202E}gnp.exe",
        "note": "a\u{200B}b\u{2028}c\u{7f}d\u{85}e\u{E0041}",
    });
    let id = enqueue(&db, "charge", &payload.to_string(), "mail", None).await;
    discard(&db, id, "terminal", "\u{202E}gnp.exe \u{1b}[31mred\u{7}").await;
    // Written around the doors (their triggers off), as a row from before the rules could be.
    let mut around = db.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *around)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET kind = $2, queue = $3, tags = $4, unique_key = $5,
                unique_scope = 'finished'
         WHERE id = $1",
    )
    .bind(id)
    .bind("ch\u{200B}arge")
    .bind("ma\u{2066}il")
    .bind(vec!["t\u{AD}ag".to_owned()])
    .bind("key\u{FEFF}\u{200F}")
    .execute(&mut *around)
    .await
    .unwrap();
    around.commit().await.unwrap();
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, 'st\u{202E}ep', $2, 1)",
    )
    .bind(id)
    .bind(serde_json::json!("x\u{2029}y\u{061C}"))
    .execute(&db.pool())
    .await
    .unwrap();
    let running = enqueue(&db, "charge", "{}", "mail", None).await;
    sqlx::query(
        "UPDATE job.jobs SET state = 'running', attempt = 1, locked_by = 'host\u{2060}1',
                locked_until = now() + interval '1 hour', lock_token = gen_random_uuid()
         WHERE id = $1",
    )
    .bind(running)
    .execute(&db.pool())
    .await
    .unwrap();
    // Names the table refuses since migration 0065; stored before it, they are shown too.
    sqlx::raw_sql(
        "ALTER TABLE job.pauses DISABLE TRIGGER pauses_names;
         INSERT INTO job.pauses (scope, name, reason)
         VALUES ('queue', 'ma\u{2066}il', '\u{202E}unterminated'), ('kind', 'k\u{1b}', NULL);
         ALTER TABLE job.pauses ENABLE TRIGGER pauses_names;",
    )
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let cookie = login(&router, "t0ken").await;
    for path in [
        format!("/jobs/{id}"),
        format!("/jobs/{running}"),
        "/dead".to_owned(),
        "/jobs".to_owned(),
        "/".to_owned(),
    ] {
        let page = get(&router, &path, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        // Links and hidden fields carry the names exactly (percent-encoded in links); every
        // character shown is visible.
        let shown = text_of(&page.body);
        for c in HIDDEN {
            assert!(
                !shown.contains(*c),
                "{path} shows U+{:04X} raw: {shown}",
                u32::from(*c)
            );
        }
    }
    let job = get(&router, &format!("/jobs/{id}"), Some(&cookie))
        .await
        .body;
    assert!(job.contains(r"\u{202e}gnp.exe \u{1b}[31mred\u{7}"), "{job}");
    // JSON stays JSON (its quotes escaped for HTML): escaped as JSON escapes them.
    assert!(
        job.contains(r"&quot;file&quot;: &quot;\u202egnp.exe&quot;"),
        "{job}"
    );
    assert!(
        job.contains(r"&quot;note&quot;: &quot;a\u200bb\u2028c\u007fd\u0085e\udb40\udc41&quot;"),
        "{job}"
    );
    assert!(job.contains(r"&quot;x\u2029y\u061c&quot;"), "{job}");
    for shown in [
        r"ch\u{200b}arge",
        r"ma\u{2066}il",
        r"t\u{ad}ag",
        r"key\u{feff}\u{200f}",
        r"st\u{202e}ep",
    ] {
        assert!(job.contains(shown), "{shown}: {job}");
    }
    let lease = get(&router, &format!("/jobs/{running}"), Some(&cookie))
        .await
        .body;
    assert!(lease.contains(r"host\u{2060}1"), "{lease}");
    let queues = get(&router, "/", Some(&cookie)).await.body;
    assert!(queues.contains(r"\u{202e}unterminated"), "{queues}");
    assert!(queues.contains(r"k\u{1b}"), "{queues}");
    db.close().await;
}

/// A page's text: what is outside its tags (attribute values are data: links, hidden fields).
fn text_of(page: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in page.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

#[tokio::test]
async fn a_link_cannot_make_a_page_say_an_action_was_done() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, "charge", "{}", "mail", None).await;
    discard(&db, dead, "terminal", "boom").await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    for (path, cookie) in [
        ("/?done=purged&n=1000".to_owned(), None),
        ("/?done=logged_in".to_owned(), None),
        ("/dead?done=redriven&n=5".to_owned(), None),
        (format!("/jobs/{dead}?done=cancelled"), None),
        ("/?done=logged_in".to_owned(), Some(op.as_str())),
        ("/?done=purged&n=1000".to_owned(), Some(op.as_str())),
    ] {
        let page = get(&router, &path, cookie).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(
            !page.body.contains(r#"class="notice""#),
            "{path} says: {}",
            page.body
        );
    }
    // The action's own answer carries its notice, shown once.
    let token = csrf(&get(&router, "/dead", Some(&op)).await.body);
    let answer = post(
        &router,
        "/actions/redrive",
        &[("id", &dead.to_string()), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let notice = answer.cookie("job_notice").expect("a notice cookie");
    let location = answer.location.unwrap();
    assert!(!location.contains("done"), "{location}");
    let shown = get(&router, &location, Some(&format!("{op}; {notice}"))).await;
    assert!(
        shown.body.contains("Redriven: 1 job(s) available again."),
        "{}",
        shown.body
    );
    assert_eq!(shown.cookie("job_notice").as_deref(), Some("job_notice="));
    let again = get(&router, &location, Some(&op)).await;
    assert!(!again.body.contains(r#"class="notice""#), "{}", again.body);
    // Logging in says so, to the one who logged in.
    let answer = post(&router, "/login", &[("token", "t0ken")], None).await;
    let session = answer.cookie("job_operator").unwrap();
    let notice = answer.cookie("job_notice").expect("a notice cookie");
    let landed = get(
        &router,
        &answer.location.unwrap(),
        Some(&format!("{session}; {notice}")),
    )
    .await;
    assert!(
        landed.body.contains("Logged in as operator."),
        "{}",
        landed.body
    );
    // A notice cookie a visitor wrote for itself says nothing it cannot say.
    let page = get(&router, "/", Some("job_notice=logged_in")).await;
    assert!(!page.body.contains("Logged in"), "{}", page.body);
    db.close().await;
}

#[tokio::test]
async fn redriving_or_purging_a_job_that_is_no_dead_letter_says_nothing_was_done() {
    let db = TestDb::new().await;
    let live = enqueue(&db, "charge", "{}", "mail", None).await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&op)).await.body);
    let idstr = live.to_string();
    for (action, says) in [
        (
            "/actions/redrive",
            "Nothing was redriven: this job is not a dead letter (it is available).",
        ),
        (
            "/actions/purge",
            "Nothing was purged: this job is not a dead letter (it is available).",
        ),
    ] {
        let answer = post(
            &router,
            action,
            &[("id", &idstr), ("confirm", "yes"), ("csrf", &token)],
            Some(&op),
        )
        .await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        let cookie = match answer.cookie("job_notice") {
            Some(notice) => format!("{op}; {notice}"),
            None => op.clone(),
        };
        let page = get(&router, &answer.location.unwrap(), Some(&cookie)).await;
        assert!(page.body.contains(says), "{says}: {}", page.body);
        assert!(!page.body.contains("Redriven:") && !page.body.contains("Purged "));
    }
    assert_eq!(state(&db, live).await.as_deref(), Some("available"));
    for (action, says) in [
        ("/actions/redrive", "no job 999999: nothing was redriven"),
        ("/actions/purge", "no job 999999: nothing was purged"),
    ] {
        let answer = post(
            &router,
            action,
            &[("id", "999999"), ("confirm", "yes"), ("csrf", &token)],
            Some(&op),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{action}: {}",
            answer.body
        );
        assert!(answer.body.contains(says), "{says}: {}", answer.body);
    }
    db.close().await;
}

#[tokio::test]
async fn a_seen_at_out_of_range_is_refused_naming_it() {
    let db = TestDb::new().await;
    let dead = enqueue(&db, "charge", "{}", "mail", None).await;
    discard(&db, dead, "terminal", "boom").await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/dead", Some(&op)).await.body);
    for seen_at in ["0000-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"] {
        for action in ["/actions/redrive", "/actions/purge"] {
            let answer = post(
                &router,
                action,
                &[
                    ("all", "1"),
                    ("confirm", "yes"),
                    ("seen_at", seen_at),
                    ("csrf", &token),
                ],
                Some(&op),
            )
            .await;
            assert_eq!(
                answer.status,
                StatusCode::BAD_REQUEST,
                "{action} {seen_at}: {}",
                answer.body
            );
            assert!(
                answer
                    .body
                    .contains("`seen_at` must be between 0001-01-01 and 9999-12-31 UTC"),
                "{}",
                answer.body
            );
        }
    }
    assert_eq!(state(&db, dead).await.as_deref(), Some("discarded"));
    db.close().await;
}

#[tokio::test]
async fn a_job_id_is_plain_decimal_digits() {
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let router = Dashboard::new(db.store()).operator_token("t0ken").router();
    let op = login(&router, "t0ken").await;
    let token = csrf(&get(&router, "/", Some(&op)).await.body);
    for path in [
        format!("/jobs/+{id}"),
        format!("/jobs/-{id}"),
        format!("/jobs/0{id}"),
    ] {
        let page = get(&router, &path, None).await;
        let expected = if path.contains("/0") {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        };
        assert_eq!(page.status, expected, "{path}: {}", page.body);
    }
    let page = get(&router, &format!("/jobs/+{id}"), None).await.body;
    assert!(
        page.contains("no such job: the path's job id must be"),
        "{page}"
    );
    let page = get(&router, &format!("/jobs?before=%2B{id}"), None).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(
        page.body.contains("`before` must be a job id"),
        "{}",
        page.body
    );
    let answer = post(
        &router,
        "/actions/cancel",
        &[("id", &format!("+{id}")), ("csrf", &token)],
        Some(&op),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(
        answer.body.contains("`id` must be a job id"),
        "{}",
        answer.body
    );
    assert_eq!(state(&db, id).await.as_deref(), Some("available"));
    db.close().await;
}

/// A job page shows the payload, the progress, the result and its steps' outputs as the
/// database writes them: read into serde_json values, their numbers were rounded (2^64 as
/// 1.8446744073709552e19, 1.50 as 1.5). Hidden characters in them are still shown as JSON
/// escapes.
#[tokio::test]
async fn a_job_page_shows_numbers_as_stored() {
    let db = TestDb::new().await;
    let payload = r#"{"b": 18446744073709551616, "d": 1.50, "s": "a\u202eb"}"#;
    let id = enqueue(&db, "numbers", payload, "mail", None).await;
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', attempt = 1, finalized_at = now(),
                progress = '{\"p\": 0.10000000000000000555}', progress_at = now(),
                result = '[123456789012345678901234567890]'
         WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    // And a step's output.
    sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt)
         VALUES ($1, 'fetch', '{\"o\": 2.250, \"big\": 98765432109876543210987654321}', 1)",
    )
    .bind(id)
    .execute(&db.pool())
    .await
    .unwrap();
    let router = Dashboard::new(db.store()).router();
    let page = get(&router, &format!("/jobs/{id}"), None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for shown in [
        "18446744073709551616",
        "1.50",
        "0.10000000000000000555",
        "123456789012345678901234567890",
        r"a\u202eb",
        "2.250",
        "98765432109876543210987654321",
    ] {
        assert!(page.body.contains(shown), "{shown} in {}", page.body);
    }
    assert!(!page.body.contains('\u{202e}'), "{}", page.body);
    db.close().await;
}
