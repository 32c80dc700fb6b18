//! [`Dashboard`]: the configuration and the router.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use job_postgres::{PgStore, TenantAdmin};

use crate::auth::{Operator, Session};
use crate::base::Base;
use crate::notice::Notice;
use crate::scope::Scope;
use crate::throttle::LoginThrottle;
use crate::{actions, connections, deadline, notice, pages};

/// How the dashboard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Jobs on a listing page. Defaults to 50.
    pub page_size: u32,
    /// Rows a listing page looks at, at most, whatever its filter matches (see
    /// `job_postgres::PageRequest::scan`). Defaults to 20,000.
    pub page_scan: u32,
    /// Rows each part of the queues page (waiting, running, dead letters, recently finished)
    /// reads at most; counts at the cap show as `N+`. Defaults to 10,000.
    pub count_cap: u32,
    /// How far back the queues page counts finished jobs as its throughput, at most 100 years
    /// (a longer one is taken as that). Defaults to 5 minutes.
    pub recent_window: Duration,
    /// How long a page or an action may wait for the database (a lock, a connection) before it
    /// is answered 503 "the database did not answer within ..." instead. The database itself
    /// ends each of the request's statements before that: the dashboard's connections get,
    /// as `statement_timeout`, what is left of the request's time less a margin (a fifth of
    /// `answer_within`, at most 0.5 s). So a page or an action cut short leaves nothing
    /// running or waiting for a lock on the server, and an action cut short was not done: the
    /// page says "the action was not done (the database stopped it)". Only an answer that does
    /// not come from the database within `answer_within` (a lost network) says the action
    /// "may or may not have been done". Taken as 100 ms at least and 1 hour at most (PostgreSQL's
    /// `statement_timeout` goes no further than 24 days, and nobody waits longer for a page).
    /// An action's form is read before this time starts, within as long again: one whose body
    /// does not arrive by then is answered 408, nothing done. Defaults to 5 seconds.
    pub answer_within: Duration,
    /// Connections the dashboard opens for itself, at most, from the connect options of the
    /// store's pool (URL, role, TLS, `options`; not hooks set on the application's pool
    /// options), named `<application_name>: job dashboard`: it never uses the application's
    /// pool, so a stalled page cannot take a connection the application needs. None is opened
    /// before a page needs it, and none is kept a minute unused. Count them in the server's
    /// `max_connections`. 0 is taken as 1. Defaults to 4.
    pub connections: u32,
    /// Marks the session cookie `Secure` (sent over HTTPS only). Defaults to false, so that a
    /// dashboard on `http://127.0.0.1` works; set it behind HTTPS.
    pub secure_cookie: bool,
    /// The host names the dashboard answers to (`Host`, without the port, any case), for
    /// example `["localhost", "127.0.0.1", "jobs.example.com"]`; a request to another name
    /// is answered 421. This is what stops a page on another site from reading the dashboard
    /// through DNS rebinding (pointing its own name at the dashboard's address): reading
    /// needs no login. Empty: any name, the default, since an application that mounts the
    /// dashboard knows its names and this crate does not; `job web` sets the loopback names
    /// when it listens on a loopback address. Actions and logins from another site are refused
    /// whatever this says (by `Sec-Fetch-Site`, or `Origin`).
    pub allowed_hosts: Vec<String>,
    /// How many reverse proxies in front of the dashboard each append the address they were
    /// reached from to `X-Forwarded-For`. With `n`, the client a login is counted against (see
    /// the login throttle: 10 wrong tokens a minute per client) is the `n`th address from the
    /// right of that list (every `X-Forwarded-For` header, in order); a request whose list is
    /// shorter, or whose entry there is no IP address, is counted by the peer's address. 0, the
    /// default, ignores the header: a client can write it, so trust it only as far as proxies
    /// you run append to it. Behind a proxy with 0, every login comes from the proxy: one host
    /// guessing the token locks every operator out for its minute.
    pub forwarded_hops: u8,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            page_size: 50,
            page_scan: 20_000,
            count_cap: 10_000,
            recent_window: Duration::from_secs(300),
            answer_within: Duration::from_secs(5),
            connections: 4,
            secure_cookie: false,
            allowed_hosts: Vec::new(),
            forwarded_hops: 0,
        }
    }
}

/// The shortest [`DashboardConfig::answer_within`] taken: a shorter one would answer every page
/// 503 before the database could.
const MIN_ANSWER_WITHIN: Duration = Duration::from_millis(100);
/// The longest [`DashboardConfig::answer_within`] taken: far inside the longest
/// `statement_timeout` PostgreSQL accepts (2^31 - 1 ms), and inside `Instant`'s range.
const MAX_ANSWER_WITHIN: Duration = Duration::from_secs(3600);

/// The operator dashboard: build it, then mount [`Dashboard::router`] (see the crate docs).
#[derive(Debug, Clone)]
pub struct Dashboard {
    scope: Scope,
    operator: Option<Operator>,
    config: DashboardConfig,
}

impl Dashboard {
    /// A dashboard over every job of `store`, read-only until an operator token is set.
    pub fn new(store: PgStore) -> Dashboard {
        Dashboard {
            scope: Scope::All(store),
            operator: None,
            config: DashboardConfig::default(),
        }
    }

    /// A dashboard over one tenant's jobs only: every listing, count, page and action goes
    /// through `admin`, which adds the tenant to whatever it is asked; pausing and resuming
    /// (which act on every tenant's jobs) are not offered.
    pub fn for_tenant(admin: TenantAdmin) -> Dashboard {
        Dashboard {
            scope: Scope::Tenant(admin),
            operator: None,
            config: DashboardConfig::default(),
        }
    }

    /// Lets an operator who logs in with `token` act (cancel, redrive, purge, pause, resume).
    /// Without it the dashboard is read-only. An empty token is ignored. Sessions are signed
    /// with a key derived from the token, so a session cookie lets whoever reads it guess the
    /// token offline, past the login's throttle: use a random one of at least
    /// [`MIN_OPERATOR_TOKEN`] characters (`openssl rand -hex 16`); a shorter one is logged as a
    /// warning here, and refused by `job web`.
    pub fn operator_token(mut self, token: impl AsRef<str>) -> Dashboard {
        let token = token.as_ref();
        if let Some(problem) = operator_token_problem(token) {
            tracing::warn!("{problem}");
        }
        self.operator = (!token.is_empty()).then(|| Operator::new(token));
        self
    }

    /// Replaces the configuration.
    pub fn config(mut self, config: DashboardConfig) -> Dashboard {
        self.config = config;
        self
    }

    /// The dashboard's routes, to serve or to `nest` into an application's router. An address
    /// with no page gets the dashboard's 404 page when the router is served alone or mounted
    /// with `Router::nest_service`; under `Router::nest` (or `merge`) axum gives it the
    /// application's fallback. The router sets no fallback of its own, so that it merges into
    /// a router that has one. A method a route does not take gets the dashboard's 405 page
    /// however the router is mounted. Under `nest("/jobs", ..)` the dashboard's root is
    /// `/jobs`, where its links and redirects go: axum routes no `/jobs/` there.
    pub fn router(mut self) -> Router {
        let given = self.config.answer_within;
        let within = given.clamp(MIN_ANSWER_WITHIN, MAX_ANSWER_WITHIN);
        if within != given {
            tracing::warn!(
                given = ?given,
                taken = ?within,
                "job-web: DashboardConfig::answer_within is outside 100 ms to 1 hour"
            );
        }
        self.config.answer_within = within;
        if self.config.connections == 0 {
            tracing::warn!("job-web: DashboardConfig::connections is 0: the dashboard opens 1");
        }
        let hosts = crate::origin::Hosts::new(&self.config.allowed_hosts);
        let app = Arc::new(App {
            given: self.scope,
            scope: OnceLock::new(),
            operator: self.operator,
            config: self.config,
            logins: LoginThrottle::new(Instant::now()),
        });
        Router::new()
            .route("/", get(pages::overview::page))
            .route("/jobs", get(pages::jobs::page))
            .route("/dead", get(pages::jobs::dead_letters))
            .route("/jobs/{id}", get(pages::job::page))
            .route("/login", get(pages::login::page).post(actions::login))
            .route("/logout", post(actions::logout))
            .route("/actions/cancel", post(actions::cancel))
            .route("/actions/redrive", post(actions::redrive))
            .route("/actions/purge", post(actions::purge))
            .route("/actions/pause", post(actions::pause))
            .route("/actions/resume", post(actions::resume))
            .route("/assets/dashboard.css", get(stylesheet))
            .layer(axum::middleware::from_fn_with_state(
                within,
                deadline::bound,
            ))
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                pages::failure::dress,
            ))
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                notice::clear,
            ))
            .layer(axum::middleware::from_fn_with_state(
                hosts,
                crate::origin::guard,
            ))
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(app)
    }
}

/// The dashboard's shared state.
#[derive(Debug)]
pub(crate) struct App {
    /// The scope as the application gave it, on the application's pool: only its connect
    /// options are used.
    given: Scope,
    /// The same scope on the dashboard's own connections, made by the first request (inside
    /// the runtime, which the pool's maintenance needs).
    scope: OnceLock<Scope>,
    pub(crate) operator: Option<Operator>,
    pub(crate) config: DashboardConfig,
    /// Wrong logins, to refuse logging in after too many.
    pub(crate) logins: LoginThrottle,
}

pub(crate) type AppState = axum::extract::State<Arc<App>>;

/// What a page needs to know about the request: where it is mounted, and whether (and with
/// which CSRF token) the visitor may act.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) base: Base,
    /// The CSRF token to put in forms; `Some` only for a logged-in operator.
    pub(crate) csrf: Option<String>,
    /// Whether an operator token is configured (so that logging in is possible).
    pub(crate) has_operator: bool,
    /// The tenant the dashboard is limited to.
    pub(crate) tenant: Option<String>,
    /// The outcome of the action that led here, from its cookie.
    pub(crate) notice: Option<Notice>,
}

impl Ctx {
    pub(crate) fn can_act(&self) -> bool {
        self.csrf.is_some()
    }
}

impl App {
    /// What the dashboard reaches, on its own connections (see `connections.rs`).
    pub(crate) fn scope(&self) -> &Scope {
        self.scope.get_or_init(|| {
            self.given
                .on(connections::store(self.given.store(), &self.config))
        })
    }

    pub(crate) fn session(&self, headers: &HeaderMap) -> Option<(&Operator, Session)> {
        let operator = self.operator.as_ref()?;
        Some((operator, operator.session(headers)?))
    }

    pub(crate) fn ctx(&self, base: Base, headers: &HeaderMap) -> Ctx {
        Ctx {
            base,
            csrf: self
                .session(headers)
                .map(|(operator, session)| operator.csrf(&session)),
            has_operator: self.operator.is_some(),
            tenant: self.given.tenant().map(str::to_owned),
            notice: Notice::of(headers),
        }
    }

    /// A `Set-Cookie` value for cookie `name`, scoped to where the dashboard is mounted, kept
    /// from scripts and from other sites' requests (`Secure` with
    /// [`DashboardConfig::secure_cookie`]); `max_age` 0 removes it.
    pub(crate) fn cookie(&self, base: &Base, name: &str, value: &str, max_age: u64) -> HeaderValue {
        let path = if base.0.is_empty() { "/" } else { &base.0 };
        let secure = if self.config.secure_cookie {
            "; Secure"
        } else {
            ""
        };
        format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
            .parse()
            .expect("a valid cookie header")
    }
}

/// Headers on every answer: no script may run (the pages have none), no framing, no caching
/// of pages that show payloads.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../assets/dashboard.css"),
    )
}

/// The fewest characters an operator token should have: see [`Dashboard::operator_token`].
pub const MIN_OPERATOR_TOKEN: usize = 16;

/// Why `token` is too weak to be the operator token, if it is (an empty one, which leaves the
/// dashboard read-only, is not).
pub fn operator_token_problem(token: &str) -> Option<String> {
    let n = token.chars().count();
    (n > 0 && n < MIN_OPERATOR_TOKEN).then(|| {
        format!(
            "the operator token has {n} characters, fewer than {MIN_OPERATOR_TOKEN}: whoever \
             reads a session cookie could guess it offline; use a random one, such as \
             `openssl rand -hex 16` prints"
        )
    })
}
