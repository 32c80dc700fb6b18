//! Requests to a dashboard router in process, and the database rows the tests need.

#![allow(dead_code, unreachable_pub)]

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use job_testkit::TestDb;
use tower::ServiceExt;

/// An answer: status, `Location`, the first `Set-Cookie` and all of them, `Allow`, body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub location: Option<String>,
    pub set_cookie: Option<String>,
    pub set_cookies: Vec<String>,
    pub allow: Option<String>,
    pub body: String,
}

impl Answer {
    /// The `name=value` of the cookie `name` this answer sets, if it sets it.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies
            .iter()
            .map(|c| c.split(';').next().unwrap())
            .find(|c| c.split_once('=').is_some_and(|(n, _)| n == name))
            .map(str::to_owned)
    }
}

/// Sends `request` as it is.
pub async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    // In a block of its own, so that the future stays `Send` (tests run requests at once).
    let set_cookies: Vec<String> = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let (location, set_cookie, allow) = {
        let header = |name| {
            response
                .headers()
                .get(name)
                .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
        };
        (
            header(header::LOCATION),
            header(header::SET_COOKIE),
            header(header::ALLOW),
        )
    };
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    Answer {
        status,
        location,
        set_cookie,
        set_cookies,
        allow,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

pub async fn get(router: &Router, path: &str, cookie: Option<&str>) -> Answer {
    let mut request = Request::get(path);
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    send(router, request.body(Body::empty()).unwrap()).await
}

pub async fn post(
    router: &Router,
    path: &str,
    form: &[(&str, &str)],
    cookie: Option<&str>,
) -> Answer {
    let mut request =
        Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    let body = serde_urlencoded::to_string(form).unwrap();
    send(router, request.body(Body::from(body)).unwrap()).await
}

/// POSTs `body` as it is, as a form.
pub async fn post_raw(router: &Router, path: &str, body: &str, cookie: Option<&str>) -> Answer {
    let mut request =
        Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    send(router, request.body(Body::from(body.to_owned())).unwrap()).await
}

/// POSTs a login with `token` from the client at `from`, as a server serving the router with
/// `into_make_service_with_connect_info` says it.
pub async fn login_from(router: &Router, token: &str, from: &str) -> Answer {
    let body = serde_urlencoded::to_string([("token", token)]).unwrap();
    let mut request = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    let peer: std::net::SocketAddr = from.parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    send(router, request).await
}

/// Logs in with `token` and returns the session cookie (`name=value`).
pub async fn login(router: &Router, token: &str) -> String {
    let answer = post(router, "/login", &[("token", token)], None).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let cookie = answer.set_cookie.expect("a session cookie");
    cookie.split(';').next().unwrap().to_owned()
}

/// The CSRF token in a page's forms.
pub fn csrf(page: &str) -> String {
    hidden(page, "csrf")
}

/// The value of the first hidden field `name` of a page's forms.
pub fn hidden(page: &str, name: &str) -> String {
    let marker = format!(r#"name="{name}" value=""#);
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("a form with a `{name}` field"))
        + marker.len();
    page[at..at + page[at..].find('"').unwrap()].to_owned()
}

/// Makes job `id` a dead letter as a worker would: discarded with one error of `class`.
pub async fn discard(db: &TestDb, id: i64, class: &str, message: &str) {
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', attempt = 1, finalized_at = now(),
                errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(),
                         'class', $2::text, 'message', $3::text))
         WHERE id = $1",
    )
    .bind(id)
    .bind(class)
    .bind(message)
    .execute(&db.pool())
    .await
    .unwrap();
}

/// Enqueues a job through the SQL interface.
pub async fn enqueue(
    db: &TestDb,
    kind: &str,
    payload: &str,
    queue: &str,
    tenant: Option<&str>,
) -> i64 {
    sqlx::query_scalar("SELECT job.enqueue($1, $2::jsonb, queue => $3, tenant => $4)")
        .bind(kind)
        .bind(payload)
        .bind(queue)
        .bind(tenant)
        .fetch_one(&db.pool())
        .await
        .unwrap()
}

pub async fn state(db: &TestDb, id: i64) -> Option<String> {
    sqlx::query_scalar("SELECT state::text FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(&db.pool())
        .await
        .unwrap()
}

/// A TCP relay to the test database that counts the bytes the server sends: what the
/// dashboard's statements read, whatever the page shows of it.
pub struct CountingProxy {
    pub options: sqlx::postgres::PgConnectOptions,
    from_server: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CountingProxy {
    pub async fn start(db: &TestDb) -> CountingProxy {
        let upstream = db.connect_options();
        let target = format!("{}:{}", upstream.get_host(), upstream.get_port());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let from_server = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = from_server.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut server = tokio::net::TcpStream::connect(&target).await.unwrap();
                    let (mut client_read, mut client_write) = client.split();
                    let (mut server_read, mut server_write) = server.split();
                    let up = tokio::io::copy(&mut client_read, &mut server_write);
                    let down = async {
                        let mut buf = vec![0u8; 64 << 10];
                        loop {
                            let n = match tokio::io::AsyncReadExt::read(&mut server_read, &mut buf)
                                .await
                            {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            counter.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                            if tokio::io::AsyncWriteExt::write_all(&mut client_write, &buf[..n])
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                    };
                    let _ = tokio::join!(up, down);
                });
            }
        });
        let options = upstream
            .host("127.0.0.1")
            .port(port)
            .ssl_mode(sqlx::postgres::PgSslMode::Disable);
        CountingProxy {
            options,
            from_server,
        }
    }

    /// Bytes the server has sent through the relay so far.
    pub fn bytes_from_server(&self) -> u64 {
        self.from_server.load(std::sync::atomic::Ordering::Relaxed)
    }
}
