//! Where the dashboard is mounted, so that its links work under any prefix (`/jobs`, `/`).

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;

/// The path prefix the dashboard is mounted at, without a trailing slash (`""` at the root).
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl Base {
    /// A link to `path` (which starts with `/`) inside the dashboard.
    pub(crate) fn at(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // Inside `Router::nest` the request's path has the prefix stripped; the original URI
        // keeps it: the difference is the prefix.
        let inner = parts.uri.path().to_owned();
        let original = parts
            .extensions
            .get::<OriginalUri>()
            .map(|o| o.path().to_owned())
            .unwrap_or_else(|| inner.clone());
        let prefix = if inner == "/" {
            original.trim_end_matches('/')
        } else {
            original.strip_suffix(inner.as_str()).unwrap_or("")
        };
        Ok(Base(prefix.to_owned()))
    }
}
