//! The query string and form extractors of every page and action. axum's `Query` and `Form`
//! decode percent-escapes that are not UTF-8 by replacing them (`%ff` reads as U+FFFD), so a
//! form could pause a kind named "\u{FFFD}"; these refuse such a field instead (400, naming it),
//! then deserialize as axum does.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use percent_encoding::percent_decode;
use serde::de::DeserializeOwned;

use crate::error::WebError;
use crate::fields::echo_name;

/// The job id of a page's path (`/jobs/{id}`): one that does not parse (`/jobs/abc`, a
/// percent-escape that is no UTF-8) is answered with the dashboard's error page, as a job that
/// does not exist is (404), not with axum's plain-text rejection.
#[derive(Debug)]
pub(crate) struct JobIdPath(pub(crate) i64);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => crate::fields::path_id(&id).map(JobIdPath),
            Err(_) => Err(WebError::new(
                StatusCode::NOT_FOUND,
                "no such job: the path's job id is not UTF-8 text",
            )),
        }
    }
}

/// A page's query string, every name and value UTF-8.
#[derive(Debug)]
pub(crate) struct Query<T>(pub(crate) T);

/// An action's `application/x-www-form-urlencoded` body, every name and value UTF-8.
#[derive(Debug)]
pub(crate) struct Form<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        utf8_fields(query.as_bytes())?;
        serde_urlencoded::from_str(query).map(Query).map_err(|e| {
            WebError::bad_request(format!("the query string does not read: {}", bounded(&e)))
        })
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Form<T> {
    type Rejection = WebError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_form = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !is_form {
            return Err(WebError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a form is sent as application/x-www-form-urlencoded",
            ));
        }
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|e| WebError::new(e.status(), e.body_text()))?;
        utf8_fields(&body)?;
        serde_urlencoded::from_bytes(&body)
            .map(Form)
            .map_err(|e| WebError::bad_request(format!("the form does not read: {}", bounded(&e))))
    }
}

/// What serde says of a query string or a form it cannot read, bounded: every field is read as
/// text (numbers by `fields`), so this is a field given twice, named; nothing of the input's
/// length reaches the page.
fn bounded(e: &serde_urlencoded::de::Error) -> String {
    crate::pages::layout::clip(&e.to_string(), 200)
}

/// Refuses `encoded` (`name=value&..`) when a name or a value, percent-decoded, is not UTF-8.
fn utf8_fields(encoded: &[u8]) -> Result<(), WebError> {
    for pair in encoded.split(|&b| b == b'&') {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let Ok(name) = percent_decode(name).decode_utf8() else {
            return Err(WebError::bad_request("a field's name is not UTF-8 text"));
        };
        if percent_decode(value).decode_utf8().is_err() {
            return Err(WebError::bad_request(format!(
                "{} is not UTF-8 text (a percent-escape that is no UTF-8 character)",
                echo_name(&name)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_must_decode_to_utf8() {
        assert!(utf8_fields(b"").is_ok());
        assert!(utf8_fields(b"name=mail&scope=queue&flag").is_ok());
        assert!(utf8_fields("kind=%D0%BE%D1%87&q=%E2%82%AC+x".as_bytes()).is_ok());
        let refused = utf8_fields(b"scope=kind&name=%ff").unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("`name`"), "{}", refused.message);
        assert!(utf8_fields(b"%c3=x").is_err());
        assert!(utf8_fields(b"kind=%e2%82").is_err());
        // A name is repeated bounded: a query string names its fields as it likes.
        let long = format!("{}=%ff", "n".repeat(10_000));
        let refused = utf8_fields(long.as_bytes()).unwrap_err().message;
        assert!(
            refused.len() < 120 && refused.contains("nnn…`"),
            "{refused}"
        );
    }
}
