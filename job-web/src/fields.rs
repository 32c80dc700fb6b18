//! The fields of the pages' query strings and the actions' forms, and the job id in a page's
//! path: each read as text (a number too, so that a value that does not parse is refused
//! here, naming its field, rather than by serde, which names none), trimmed, unset when empty.

use axum::http::StatusCode;

use crate::error::WebError;
use crate::pages::layout::clip;

/// The most characters of a refused value an error repeats: a query string can be as long as
/// the server takes.
const ECHOED: usize = 40;

/// Field `name`: trimmed, unset when empty, and refused (400, naming it) when it holds a NUL
/// character, which no kind, queue, tenant or tag can hold and PostgreSQL cannot take, or when
/// it is longer than any of them can be ([`job::MAX_NAME_LEN`] bytes): a listing page shows
/// its filter again (in its form, its links), so that a page repeats no more than that of it.
pub(crate) fn text(name: &str, value: &Option<String>) -> Result<Option<String>, WebError> {
    let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.len() > job::MAX_NAME_LEN {
        return Err(WebError::bad_request(format!(
            "`{name}` must be at most {} bytes, got {}: no kind, queue, tenant or tag is longer",
            job::MAX_NAME_LEN,
            value.len()
        )));
    }
    if value.contains('\0') {
        return Err(WebError::bad_request(format!(
            "`{name}` holds a NUL character, which no name can hold"
        )));
    }
    Ok(Some(value.to_owned()))
}

/// Field `name`, a job id: trimmed, unset when empty, and refused (400) naming the field and
/// what is wrong with the value, of which at most [`ECHOED`] characters are repeated.
pub(crate) fn id(name: &str, value: &Option<String>) -> Result<Option<i64>, WebError> {
    let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    parse_id(value, "a job id (a whole number, in digits only)")
        .map(Some)
        .map_err(|problem| WebError::bad_request(format!("`{name}` {problem}")))
}

/// The job id of a page's path (`/jobs/{id}`), refused with the dashboard's error page: 404,
/// since no job has such an id, saying why, with at most [`ECHOED`] characters of it.
pub(crate) fn path_id(value: &str) -> Result<i64, WebError> {
    parse_id(value, "a whole number, in digits only").map_err(|problem| {
        WebError::new(
            StatusCode::NOT_FOUND,
            format!("no such job: the path's job id {problem}"),
        )
    })
}

/// `value` as a job id: decimal digits only (`str::parse` takes a sign too, and `/jobs/+1`
/// showed job 1), at most [`i64::MAX`]; or what is wrong with it, which `must be` that.
fn parse_id(value: &str, must_be: &str) -> Result<i64, String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("must be {must_be}, got {}", echo(value)));
    }
    value
        .parse()
        .map_err(|_| format!("must be at most {}, got {}", i64::MAX, echo(value)))
}

/// A field's name as an error repeats it: in backticks, at most [`ECHOED`] characters (cut
/// with an ellipsis), control characters escaped. A query string names its fields as it likes.
pub(crate) fn echo_name(name: &str) -> String {
    format!("`{}`", clip(name, ECHOED).escape_debug())
}

/// `value` as an error repeats it: quoted, at most [`ECHOED`] characters (cut with an
/// ellipsis), control characters escaped.
pub(crate) fn echo(value: &str) -> String {
    format!("{:?}", clip(value, ECHOED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_field_is_unset_when_empty_and_refused_naming_it_and_its_problem() {
        assert_eq!(id("before", &None).unwrap(), None);
        assert_eq!(id("before", &Some(" ".into())).unwrap(), None);
        assert_eq!(id("before", &Some(" 42 ".into())).unwrap(), Some(42));
        let refused = |v: &str| id("before", &Some(v.into())).unwrap_err().message;
        assert_eq!(
            refused("abc"),
            r#"`before` must be a job id (a whole number, in digits only), got "abc""#
        );
        assert_eq!(
            refused("99999999999999999999"),
            r#"`before` must be at most 9223372036854775807, got "99999999999999999999""#
        );
        for signed in ["+42", "-42", "4_2", "٤٢"] {
            assert!(refused(signed).contains("in digits only"), "{signed}");
        }
        let long = refused(&"x".repeat(10_000));
        assert!(long.len() < 120 && long.contains("xxx…\""), "{long}");
        assert!(refused("a\u{1b}b").contains(r#""a\u{1b}b""#));
        let path = path_id("abc").unwrap_err();
        assert_eq!(path.status, StatusCode::NOT_FOUND);
        assert_eq!(path_id("7").unwrap(), 7);
        assert_eq!(path_id("+7").unwrap_err().status, StatusCode::NOT_FOUND);
    }
}
