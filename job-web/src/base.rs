//! Where the dashboard is mounted, so that its links work under any prefix (`/jobs`, `/`).

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;

/// The path prefix the dashboard is mounted at, without a trailing slash (`""` at the root).
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl Base {
    /// A link to `path` (which starts with `/`) inside the dashboard. The dashboard's root
    /// under a prefix is the prefix itself (`/ops/jobs`, `/ops/jobs?done=paused`), not
    /// `/ops/jobs/`: `Router::nest` routes the one and not the other (`nest_service` both).
    pub(crate) fn at(&self, path: &str) -> String {
        let path = match path.strip_prefix('/') {
            Some(rest) if !self.0.is_empty() && (rest.is_empty() || rest.starts_with('?')) => rest,
            _ => path,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_under_a_prefix_is_the_prefix() {
        let root = Base(String::new());
        assert_eq!(root.at("/"), "/");
        assert_eq!(root.at("/?done=paused"), "/?done=paused");
        assert_eq!(root.at("/dead"), "/dead");
        let nested = Base("/ops/jobs".to_owned());
        assert_eq!(nested.at("/"), "/ops/jobs");
        assert_eq!(nested.at("/?done=paused"), "/ops/jobs?done=paused");
        assert_eq!(nested.at("/dead"), "/ops/jobs/dead");
        assert_eq!(nested.at("/jobs?queue=mail"), "/ops/jobs/jobs?queue=mail");
    }
}
