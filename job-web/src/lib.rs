//! A server-rendered operator dashboard for the `job` framework: the queues with their counts
//! and recent throughput, jobs filtered by state, kind, queue, tenant and tag, a page per job
//! (payload, error history, steps), dead letters with redrive and purge, cancel, pause and
//! resume. An application mounts [`Dashboard::router`] into its own axum router; `job web`
//! serves it standalone.
//!
//! It is read-only unless an operator token is configured ([`Dashboard::operator_token`]):
//! then an operator logs in with the token (compared in constant time) and every action is a
//! POST carrying a CSRF token tied to the operator's session. Every value shown from a payload,
//! an error or a step output is escaped, and the pages need no JavaScript. Mounted with a
//! [`TenantAdmin`](job_postgres::TenantAdmin) ([`Dashboard::for_tenant`]), it shows and touches
//! that tenant's jobs only. It runs its statements on connections of its own
//! ([`DashboardConfig::connections`]), never the application's pool, and the database stops
//! each one when its request runs out of time ([`DashboardConfig::answer_within`]).
//!
//! ```no_run
//! # async fn demo(store: job::PgStore) -> std::io::Result<()> {
//! let app = axum::Router::new().nest(
//!     "/jobs",
//!     job_web::Dashboard::new(store)
//!         .operator_token(std::env::var("JOB_OPERATOR_TOKEN").unwrap())
//!         .router(),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // With the peer's address, wrong logins are bounded per client (see the README).
//! axum::serve(
//!     listener,
//!     app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
//! )
//! .await
//! # }
//! ```

mod actions;
mod auth;
mod base;
mod connections;
mod dashboard;
mod deadline;
mod error;
mod extract;
mod fields;
mod json_text;
mod notice;
mod origin;
mod pages;
mod scope;
mod throttle;

pub use dashboard::{operator_token_problem, Dashboard, DashboardConfig, MIN_OPERATOR_TOKEN};
pub use json_text::pretty_json;
