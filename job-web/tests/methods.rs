//! A request with a method its address does not take (`DELETE /`, `GET` on an action) is
//! answered 405 with the dashboard's page, keeping axum's `Allow` header, and does nothing.

mod support;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use job_testkit::TestDb;
use job_web::Dashboard;
use support::{csrf, discard, enqueue, get, login, post, send, state, Answer};

const TOKEN: &str = "0123456789abcdef-operator";

/// Sends `form` to `path` with `method`, both as the query string and as a form body, so that
/// the request carries whatever a POST of the form would.
async fn send_as(
    router: &axum::Router,
    method: &str,
    path: &str,
    form: &[(&str, &str)],
    cookie: Option<&str>,
) -> Answer {
    let encoded = serde_urlencoded::to_string(form).unwrap();
    let uri = if encoded.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{encoded}")
    };
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    send(router, request.body(Body::from(encoded)).unwrap()).await
}

/// Checks that `answer` is the dashboard's 405 page, saying `says`, with a way back to `home`.
fn assert_method_page(answer: &Answer, allow: &str, says: &str, home: &str) {
    assert_eq!(
        answer.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{says}: {}",
        answer.body
    );
    assert_eq!(answer.allow.as_deref(), Some(allow), "{says}");
    assert!(
        answer.body.starts_with("<!DOCTYPE html>"),
        "{says}: not a page: {:?}",
        answer.body
    );
    assert!(
        answer.body.contains("<h1>Method Not Allowed</h1>"),
        "{}",
        answer.body
    );
    assert!(answer.body.contains(says), "{says}: {}", answer.body);
    let back = format!(r#"<a href="{home}">Back to the queues</a>"#);
    assert!(answer.body.contains(&back), "{}", answer.body);
    assert!(
        answer.body.contains("/assets/dashboard.css"),
        "{}",
        answer.body
    );
    assert!(answer.location.is_none() && answer.set_cookie.is_none());
}

#[tokio::test]
async fn a_wrong_method_answers_the_dashboards_405_page_on_every_route() {
    // axum's answer was a bare 405 with an empty body: no page, no way back.
    let db = TestDb::new().await;
    let id = enqueue(&db, "charge", "{}", "mail", None).await;
    let router = Dashboard::new(db.store()).operator_token(TOKEN).router();
    let op = login(&router, TOKEN).await;
    let job = format!("/jobs/{id}");
    // Every route of the dashboard, with a method it does not take.
    for (path, method, allow) in [
        ("/", "DELETE", "GET,HEAD"),
        ("/jobs", "PUT", "GET,HEAD"),
        ("/dead", "POST", "GET,HEAD"),
        (job.as_str(), "PATCH", "GET,HEAD"),
        ("/login", "PUT", "GET,HEAD,POST"),
        ("/logout", "GET", "POST"),
        ("/actions/cancel", "GET", "POST"),
        ("/actions/redrive", "PUT", "POST"),
        ("/actions/purge", "DELETE", "POST"),
        ("/actions/pause", "GET", "POST"),
        ("/actions/resume", "OPTIONS", "POST"),
        ("/assets/dashboard.css", "POST", "GET,HEAD"),
    ] {
        let answer = send_as(&router, method, path, &[], Some(&op)).await;
        let says = format!("{method} is not allowed at {path}");
        assert_method_page(&answer, allow, &says, "/");
        // The dashboard's frame, with who is logged in.
        assert!(answer.body.contains(r#"href="/dead""#), "{}", answer.body);
        assert!(answer.body.contains("operator"), "{}", answer.body);
    }
    // The method and the path are escaped and cut, as on the 404 page.
    let long = "x".repeat(4000);
    for (method, path, says) in [
        (
            "X&Y",
            "/".to_owned(),
            "X&amp;Y is not allowed at /".to_owned(),
        ),
        (
            "PUT",
            "/jobs/a&b%3Cscript%3E".to_owned(),
            "PUT is not allowed at /jobs/a&amp;b%3Cscript%3E".to_owned(),
        ),
        (
            "PUT",
            format!("/jobs/{long}"),
            format!("PUT is not allowed at /jobs/{}…", &long[..114]),
        ),
        (
            &"M".repeat(200),
            "/".to_owned(),
            format!("{}… is not allowed at /", "M".repeat(20)),
        ),
    ] {
        let answer = send_as(&router, method, &path, &[], None).await;
        assert_method_page(&answer, "GET,HEAD", &says, "/");
        assert!(!answer.body.contains(&"x".repeat(121)), "{says}");
        assert!(!answer.body.contains(&"M".repeat(21)), "{says}");
        assert!(!answer.body.contains("<script"), "{says}");
    }
    // Mounted under a prefix, by `nest` or `nest_service`, the page names the whole path and
    // the way back follows the mount point.
    let nested = axum::Router::new().nest("/ops/jobs", Dashboard::new(db.store()).router());
    let answer = send_as(&nested, "GET", "/ops/jobs/actions/cancel", &[], None).await;
    let says = "GET is not allowed at /ops/jobs/actions/cancel";
    assert_method_page(&answer, "POST", says, "/ops/jobs");
    let served = axum::Router::new().nest_service("/ops/jobs", Dashboard::new(db.store()).router());
    let answer = send_as(&served, "DELETE", "/ops/jobs/dead", &[], None).await;
    let says = "DELETE is not allowed at /ops/jobs/dead";
    assert_method_page(&answer, "GET,HEAD", says, "/ops/jobs");
    db.close().await;
}

#[tokio::test]
async fn a_wrong_method_never_performs_an_action() {
    let db = TestDb::new().await;
    let waiting = enqueue(&db, "charge", "{}", "mail", None).await;
    let dead = enqueue(&db, "charge", "{}", "mail", None).await;
    discard(&db, dead, "terminal", "boom").await;
    sqlx::query("INSERT INTO job.pauses (scope, name) VALUES ('queue', 'held')")
        .execute(&db.pool())
        .await
        .unwrap();
    let router = Dashboard::new(db.store()).operator_token(TOKEN).router();
    let op = login(&router, TOKEN).await;
    let token = csrf(&get(&router, "/", Some(&op)).await.body);
    let (waiting_id, dead_id) = (waiting.to_string(), dead.to_string());
    // Each action's complete form, the session and its CSRF token: only the method is wrong.
    let actions: [(&str, Vec<(&str, &str)>); 6] = [
        (
            "/actions/cancel",
            vec![("id", &waiting_id), ("csrf", &token)],
        ),
        ("/actions/redrive", vec![("id", &dead_id), ("csrf", &token)]),
        (
            "/actions/purge",
            vec![("id", &dead_id), ("confirm", "yes"), ("csrf", &token)],
        ),
        (
            "/actions/pause",
            vec![("scope", "queue"), ("name", "mail"), ("csrf", &token)],
        ),
        (
            "/actions/resume",
            vec![("scope", "queue"), ("name", "held"), ("csrf", &token)],
        ),
        ("/logout", vec![("csrf", &token)]),
    ];
    for method in ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        for (path, form) in &actions {
            let answer = send_as(&router, method, path, form, Some(&op)).await;
            assert_eq!(
                answer.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {}",
                answer.body
            );
            assert_eq!(answer.allow.as_deref(), Some("POST"), "{method} {path}");
            assert!(
                answer.location.is_none() && answer.set_cookie.is_none(),
                "{method} {path}: {answer:?}"
            );
            // HEAD has no body to show the page in.
            if method != "HEAD" {
                let says = format!("{method} is not allowed at {path}");
                assert!(answer.body.contains(&says), "{says}: {}", answer.body);
            }
        }
    }
    assert_eq!(state(&db, waiting).await.as_deref(), Some("available"));
    assert_eq!(state(&db, dead).await.as_deref(), Some("discarded"));
    let paused: Vec<String> = sqlx::query_scalar("SELECT name FROM job.pauses ORDER BY name")
        .fetch_all(&db.pool())
        .await
        .unwrap();
    assert_eq!(paused, ["held"], "nothing paused, nothing resumed");
    // The session still acts, and the same form posted does what it says: the requests above
    // lacked nothing but the method.
    let (path, form) = &actions[0];
    let answer = post(&router, path, form, Some(&op)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(state(&db, waiting).await.as_deref(), Some("cancelled"));
    db.close().await;
}
