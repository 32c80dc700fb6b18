//! Refuses requests that come from another site or to another host name.
//!
//! - An action or a login (any request that is not a GET or HEAD) that the browser says comes
//!   from another site is refused 403: its `Sec-Fetch-Site` is neither `same-origin` nor `none`,
//!   or, from a browser that does not send that header, its `Origin` is not this host's. The
//!   CSRF token already guards every action; this also guards the login form, which has no
//!   session yet, so that a page on any site cannot spend the wrong-login budget
//!   (`throttle.rs`) and lock operators out. Clients that send neither header (curl, scripts)
//!   are not browsers on another site, and pass.
//! - With [`DashboardConfig::allowed_hosts`](crate::DashboardConfig::allowed_hosts) set, a
//!   request whose `Host` is not one of them is refused 421: a page on another site that made
//!   its own name resolve to the dashboard's address (DNS rebinding) reads nothing, since its
//!   requests carry its own name.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::WebError;

/// The host names a request may be addressed to (lower case, without port); empty: any.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hosts(Arc<[String]>);

impl Hosts {
    pub(crate) fn new(names: &[String]) -> Hosts {
        Hosts(names.iter().map(|n| host_name(n).to_owned()).collect())
    }
}

pub(crate) async fn guard(State(hosts): State<Hosts>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !hosts.0.is_empty() {
        let host = request_host(&request);
        if !host.is_some_and(|h| hosts.0.iter().any(|allowed| *allowed == host_name(h))) {
            return WebError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "this dashboard does not answer to that host name",
            )
            .into_response();
        }
    }
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && from_another_site(headers) {
        return WebError::forbidden(
            "refused: the request comes from another site (log in and act from the dashboard's own pages)",
        )
        .into_response();
    }
    next.run(request).await
}

/// The `Host` header, or the URI's authority (HTTP/2).
fn request_host(request: &Request) -> Option<&str> {
    match request.headers().get(header::HOST) {
        Some(h) => h.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    }
}

/// `name` in lower case without its port: `Jobs.Example:8080` → `jobs.example`, `[::1]:80` →
/// `[::1]`.
fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if host.starts_with('[') {
        host.find(']').map_or(host, |end| &host[..=end])
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    name.to_ascii_lowercase()
}

fn from_another_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let Ok(origin) = origin.to_str() else {
        return true;
    };
    // `scheme://host[:port]`, or `null` (a sandboxed page, a redirect across sites).
    let Some((_, authority)) = origin.split_once("://") else {
        return true;
    };
    // Behind a proxy that rewrites `Host`, the name the browser used is `X-Forwarded-Host`.
    let named = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(authority))
    };
    !(named(header::HOST) || named(header::HeaderName::from_static("x-forwarded-host")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port_and_case() {
        assert_eq!(host_name("Jobs.Example:8080"), "jobs.example");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }

    #[test]
    fn a_post_from_another_site_is_told_apart() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert!(!from_another_site(&headers(&[])), "curl");
        assert!(!from_another_site(&headers(&[(
            "sec-fetch-site",
            "same-origin"
        )])));
        assert!(from_another_site(&headers(&[(
            "sec-fetch-site",
            "cross-site"
        )])));
        assert!(from_another_site(&headers(&[(
            "sec-fetch-site",
            "same-site"
        )])));
        assert!(!from_another_site(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(from_another_site(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(from_another_site(&headers(&[
            ("origin", "null"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!from_another_site(&headers(&[
            ("origin", "https://jobs.example"),
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-host", "jobs.example")
        ])));
    }
}
